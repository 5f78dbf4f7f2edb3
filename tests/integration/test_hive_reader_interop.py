"""Apache Hive's own reader code reads what acidclean ingested and vacuumed as ``acidclean read`` does
(docs/design.md section 7, rule 10).

Hive's ``AcidUtils.getAcidState``, its row reader (``OrcInputFormat.getRecordReader``, row ids included)
and its vectorized ACID reader (``VectorizedOrcAcidRowBatchReader``), of hive-exec 3.1.3 and of 4.0.1, run
in a JVM (deploy/local/hive_reader.py) over the tables' directories, under the valid write id list and
transaction list of the real metastore. Every row must be the row ``acidclean read`` prints, with its
identity (``originalTransaction``, ``bucket``, ``rowId``). A reader whose snapshot was taken while a writer
was open must not take a later base over that writer's id for its base (Hive's compactor output is a
compacted base, ``_metadata_acid``), and must refuse ("Not enough history") or return exactly the rows
committed in that snapshot.

On a Hive 2 metastore the ids are transaction ids, in the same string form: Hive 3 and 4 read such
deltas the same way, so the same checks run there too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from producers_support import DB, make_settings, new_table, vacuum, write

from acidclean.cli import main as cli
from acidclean.deploy.local.hive_reader import HiveReader, compile_hive_reader
from acidclean.producers.acid_files import write_acid_events
from acidclean.producers.hive_types import generate_rows
from acidclean.shared.acid.names import delta_name
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.orc.writer import insert_events, write_acid_version_file
from acidclean.shared.settings import Settings
from acidclean.shared.storage import open_location

pytestmark = [pytest.mark.integration, pytest.mark.metastore, pytest.mark.rule10]

COLUMNS = (("id", "int"), ("v", "string"))
BUCKETS = 2
Row = tuple[Any, ...]  # (originalTransaction, bucket, rowId, id, v), values as strings


@pytest.fixture(scope="module", autouse=True)
def database(metastore: HiveMetastore) -> None:
    metastore.create_database(DB)


@pytest.fixture(scope="module")
def hive_readers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[HiveReader]]:
    """Hive 3.1.3's and 4.0.1's reader programs, compiled once for the module."""
    work = tmp_path_factory.mktemp("hive-readers")
    yield [compile_hive_reader(flavour, work, work / "logs") for flavour in ("hive3", "hive4")]


@pytest.fixture
def settings(metastore_uri: str, kafka_bootstrap: str, unique_name: str, tmp_path: Path) -> Settings:
    return make_settings(metastore_uri, kafka_bootstrap, unique_name, tmp_path)


def locations(metastore: HiveMetastore, name: str, partitions: Sequence[str] = ()) -> list[str]:
    """The table's (or its partitions') directories; Hive 4 skips any path with a ``/.`` or ``/_`` in it."""
    found = [
        open_location(metastore.get_table(DB, name, partition).location).path for partition in partitions or [None]
    ]
    hidden = [path for path in found if "/." in path or "/_" in path]
    assert not hidden, f"Hive 4's AcidUtils would skip {hidden}: run the stack with a warehouse outside hidden paths"
    return found


def acidclean_rows(metastore_uri: str, name: str) -> list[Row]:
    """``acidclean read DB.name --with-row-id``: every row with its identity, sorted."""
    env = {"ACIDCLEAN_METASTORE_URIS": metastore_uri}
    result = CliRunner().invoke(cli, ["read", f"{DB}.{name}", "--with-row-id"], env=env)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return sorted(
        (r["originalTransaction"], r["bucket"], r["rowId"], *(None if r[c] is None else str(r[c]) for c, _ in COLUMNS))
        for r in rows
    )


def snapshot_ids(metastore: HiveMetastore, name: str) -> tuple[str, str]:
    """The metastore's valid write id list of the table and its transaction list, of one moment."""
    txns = metastore.valid_txn_list()
    return metastore.valid_write_ids_of([(DB, name)], txns)[0], txns


def hive_reads(reader: HiveReader, paths: Sequence[str], ids: tuple[str, str]) -> dict[str, Any]:
    """Per Hive reader: ``acid_state`` (records), ``rows`` and ``vectorized`` (sorted rows), ``errors``."""
    records = reader.read(paths, ids[0], ids[1], COLUMNS, BUCKETS)
    result: dict[str, Any] = {"acid_state": [], "rows": [], "vectorized": [], "errors": {}}
    for record in records:
        if "error" in record:
            result["errors"][record["reader"]] = record["error"]
        elif record["reader"] == "acid_state":
            result["acid_state"].append(record)
        else:
            identity = (record["originalTransaction"], record["bucket"], record["rowId"])
            result[record["reader"]].append((*identity, *record["values"]))
    result["rows"].sort()
    result["vectorized"].sort()
    return result


def assert_hive_reads_as_acidclean(
    readers: list[HiveReader], metastore: HiveMetastore, metastore_uri: str, name: str, partitions: Sequence[str] = ()
) -> list[dict[str, Any]]:
    expected = acidclean_rows(metastore_uri, name)
    assert expected, "an empty table would prove nothing"
    paths = locations(metastore, name, partitions)
    ids = snapshot_ids(metastore, name)
    seen = []
    for reader in readers:
        read = hive_reads(reader, paths, ids)
        assert read["errors"] == {}, f"Hive {reader.version}: {read['errors']}"
        assert read["rows"] == expected, f"Hive {reader.version}'s row reader"
        assert read["vectorized"] == expected, f"Hive {reader.version}'s vectorized reader"
        seen.append(read)
    return seen


def test_deltas_and_a_delete_delta_are_read_by_hive_as_by_acidclean(
    metastore: HiveMetastore, metastore_uri: str, unique_name: str, hive_readers: list[HiveReader]
) -> None:
    new_table(metastore, unique_name, buckets=BUCKETS)
    write(metastore, unique_name, rows=40, commits=2)
    assert_hive_reads_as_acidclean(hive_readers, metastore, metastore_uri, unique_name)  # deltas only
    write(metastore, unique_name, rows=30, delete_fraction=0.25)
    assert_hive_reads_as_acidclean(hive_readers, metastore, metastore_uri, unique_name)  # with a delete delta


def test_minor_then_major_vacuum_output_is_read_by_hive_as_by_acidclean(
    metastore: HiveMetastore,
    metastore_uri: str,
    settings: Settings,
    spark: Any,
    unique_name: str,
    hive_readers: list[HiveReader],
) -> None:
    new_table(metastore, unique_name, buckets=BUCKETS)
    write(metastore, unique_name, rows=40, commits=2)
    write(metastore, unique_name, rows=30, delete_fraction=0.25)
    minor = vacuum(metastore, settings, spark, unique_name)
    assert [d.split("_")[0] for d in minor.new_directories] == ["delete", "delta"]
    for read in assert_hive_reads_as_acidclean(hive_readers, metastore, metastore_uri, unique_name):
        (state,) = read["acid_state"]
        assert state["base"] is None and minor.new_directories[1] in state["deltas"]

    major = vacuum(metastore, settings, spark, unique_name, full=True, allow_uncleaned=True)
    (base,) = major.new_directories
    for read in assert_hive_reads_as_acidclean(hive_readers, metastore, metastore_uri, unique_name):
        (state,) = read["acid_state"]
        assert (state["base"], state["deltas"]) == (base, [])  # Hive takes our base and nothing else


def test_a_vacuums_base_carries_exactly_the_side_files_hives_compactor_writes(
    metastore: HiveMetastore,
    settings: Settings,
    spark: Any,
    unique_name: str,
    hive_readers: list[HiveReader],
    tmp_path: Path,
) -> None:
    new_table(metastore, unique_name, buckets=BUCKETS)
    write(metastore, unique_name, rows=20, commits=2)
    minor = vacuum(metastore, settings, spark, unique_name)
    write(metastore, unique_name, rows=20)
    major = vacuum(metastore, settings, spark, unique_name, full=True, allow_uncleaned=True)
    (table,) = locations(metastore, unique_name)
    # Hive 3.1's compactor (CompactorOutputCommitter) marks a minor compaction's delta with
    # _orc_acid_version only; Hive 4's compactor marks nothing more.
    (delta,) = minor.new_directories
    side_files = {p.name for p in Path(table, delta).iterdir()} & {"_orc_acid_version", "_metadata_acid"}
    assert side_files == {"_orc_acid_version"}
    (base,) = major.new_directories
    for reader in hive_readers:
        hives = tmp_path / f"base-by-hive-{reader.version}"
        reader.write_markers(hives)
        for side_file in sorted(p.name for p in hives.iterdir()):
            assert (Path(table) / base / side_file).read_bytes() == (hives / side_file).read_bytes(), (
                f"{side_file} of {base} differs from Hive {reader.version}'s"
            )
        assert sorted(p.name for p in hives.iterdir()) == ["_metadata_acid", "_orc_acid_version"]


def test_a_partitioned_table_vacuumed_one_partition_major_and_one_minor(
    metastore: HiveMetastore,
    metastore_uri: str,
    settings: Settings,
    spark: Any,
    unique_name: str,
    hive_readers: list[HiveReader],
) -> None:
    new_table(metastore, unique_name, buckets=BUCKETS, partitioned_by=[("ds", "string")])
    days = ("ds=2026-01-01", "ds=2026-01-02")
    for day in days:
        write(metastore, unique_name, rows=25, commits=2, partition=day)
        write(metastore, unique_name, rows=10, delete_fraction=0.2, partition=day)
    assert_hive_reads_as_acidclean(hive_readers, metastore, metastore_uri, unique_name, days)
    vacuum(metastore, settings, spark, unique_name, partition=days[0], full=True)
    vacuum(metastore, settings, spark, unique_name, partition=days[1])
    reads = assert_hive_reads_as_acidclean(hive_readers, metastore, metastore_uri, unique_name, days)
    for read in reads:
        first, second = read["acid_state"]
        assert first["base"] is not None and second["base"] is None


def _write_uncommitted_delta(metastore: HiveMetastore, name: str, txn_id: int, rows: int) -> int:
    """A writer's delta of ``rows`` rows in bucket 0, written in transaction ``txn_id``; its write id."""
    write_id = metastore.allocate_write_id(txn_id, DB, name)
    location = open_location(metastore.get_table(DB, name).location)
    directory = location.child(delta_name(write_id, write_id, 0))
    values = generate_rows(list(COLUMNS), rows, first_id=10_000, seed=write_id)
    write_acid_events(location.fs.arrow, f"{directory}/bucket_00000", insert_events(values, write_id))
    write_acid_version_file(location.fs.arrow, directory)
    return write_id


def test_an_aborted_writers_rows_are_read_by_neither_before_nor_after_a_vacuum(
    metastore: HiveMetastore,
    metastore_uri: str,
    settings: Settings,
    spark: Any,
    unique_name: str,
    hive_readers: list[HiveReader],
) -> None:
    new_table(metastore, unique_name, buckets=BUCKETS)
    write(metastore, unique_name, rows=20)
    writer = metastore.open_txn()
    aborted = _write_uncommitted_delta(metastore, unique_name, writer, rows=15)
    metastore.abort_txn(writer)
    write(metastore, unique_name, rows=20)
    for vacuum_first in (False, True):
        if vacuum_first:
            vacuum(metastore, settings, spark, unique_name, full=True)
        for read in assert_hive_reads_as_acidclean(hive_readers, metastore, metastore_uri, unique_name):
            assert all(row[0] != aborted for row in read["rows"])


def test_a_snapshot_taken_while_a_writer_was_open_never_reads_its_rows_from_a_later_base(
    metastore: HiveMetastore,
    metastore_uri: str,
    settings: Settings,
    spark: Any,
    unique_name: str,
    hive_readers: list[HiveReader],
) -> None:
    """A query compiles (its snapshot) while a writer W is open and a later writer has committed; W
    commits, a vacuum writes a base over both; the query then lists. The base's id is committed in the
    query's snapshot, W's is not: Hive must refuse or read what its snapshot committed, never W's rows."""
    new_table(metastore, unique_name, buckets=BUCKETS)
    write(metastore, unique_name, rows=30, commits=2)
    writer = metastore.open_txn()
    try:
        open_id = _write_uncommitted_delta(metastore, unique_name, writer, rows=50)
        (later,) = write(metastore, unique_name, rows=20)
        compiled = snapshot_ids(metastore, unique_name)
        committed_then = acidclean_rows(metastore_uri, unique_name)
    except BaseException:
        metastore.abort_txn(writer)
        raise
    metastore.commit_txn(writer)
    assert len(committed_then) == 80 and all(row[0] != open_id for row in committed_then)
    major = vacuum(metastore, settings, spark, unique_name, full=True)
    (base,) = major.new_directories
    assert base == f"base_{later.write_id:07d}"  # it holds the writer's rows
    paths = locations(metastore, unique_name)
    for reader in hive_readers:
        read = hive_reads(reader, paths, compiled)
        # Hive's compactor output is a compacted base: never the base of a snapshot with an id open
        # below it (an insert overwrite's base would be, its own id being committed).
        refused = "Not enough history" in read["errors"].get("acid_state", "")
        assert refused or all(state["base"] != base for state in read["acid_state"]), (
            f"Hive {reader.version} took {base} for an insert overwrite's base: {read['acid_state']}"
        )
        for kind in ("rows", "vectorized"):
            refused = "Not enough history" in read["errors"].get(kind, "")
            assert refused or (kind not in read["errors"] and read[kind] == committed_then), (
                f"Hive {reader.version}'s {kind} reader, snapshot {compiled[0]}: "
                f"{read['errors'].get(kind) or [row for row in read[kind] if row[0] == open_id][:3]}"
            )
    assert_hive_reads_as_acidclean(hive_readers, metastore, metastore_uri, unique_name)  # a new snapshot reads all
