"""The ingest writer on the real metastore and broker: what a streaming-ingest platform leaves behind."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyorc
import pytest
from click.testing import CliRunner
from producers_support import DB, directories, make_settings, new_table, snapshot, write

from acidclean.cli import main as cli
from acidclean.schemas.events import DeltaCommitted
from acidclean.shared.acid.events import decode_bucket_property
from acidclean.shared.acid.id_lists import MetastoreKind, reader_ids
from acidclean.shared.bus.codec import decode
from acidclean.shared.bus.reader import LogReader
from acidclean.shared.bus.records import raw_record
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.storage import open_location

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", autouse=True)
def database(metastore: HiveMetastore) -> None:
    metastore.create_database(DB)


@pytest.mark.metastore  # CI runs this on Hive 3 too
def test_each_commit_writes_one_delta_named_by_its_write_id_with_rows_in_hive_buckets(
    metastore: HiveMetastore, unique_name: str
) -> None:
    new_table(metastore, unique_name, buckets=4)
    commits = write(metastore, unique_name, rows=200, commits=2)
    if metastore.kind is MetastoreKind.HIVE2:
        assert [c.write_id for c in commits] == [c.txn_id for c in commits]  # Hive 2 names deltas by txn id
    else:
        assert [c.write_id for c in commits] == [1, 2]
    names = [f"delta_{c.write_id:07d}_{c.write_id:07d}_0000" for c in commits]
    assert directories(metastore, unique_name) == names
    location = Path(open_location(metastore.get_table(DB, unique_name).location).path)
    delta = location / names[0]
    assert sorted(p.name for p in delta.iterdir()) == ["_orc_acid_version", *(f"bucket_0000{b}" for b in range(4))]
    for bucket in range(4):
        reader = pyorc.Reader(io.BytesIO((delta / f"bucket_0000{bucket}").read_bytes()))
        assert reader.user_metadata["hive.acid.version"] == b"2"
        rows = list(reader)
        assert {decode_bucket_property(row[2]).bucket_id for row in rows} == {bucket}
        assert [row[3] for row in rows] == list(range(len(rows)))  # rowId counts from 0 in each bucket
        assert {row[5][0] % 4 for row in rows} == {bucket}  # an int is its own Hive hash
    assert snapshot(metastore, unique_name).num_rows == 400
    assert not reader_ids(metastore.valid_write_ids(DB, unique_name), metastore.kind).open_ids


def test_a_commit_with_deletes_writes_a_delete_delta_and_hides_those_rows(
    metastore: HiveMetastore, unique_name: str
) -> None:
    new_table(metastore, unique_name, buckets=2)
    write(metastore, unique_name, rows=100)
    before = snapshot(metastore, unique_name)
    (result,) = write(metastore, unique_name, rows=10, delete_fraction=0.3)
    assert result.deletes == 30
    assert result.delete_delta == f"delete_delta_{result.write_id:07d}_{result.write_id:07d}_0000"
    after = snapshot(metastore, unique_name)
    assert after.num_rows == 100 - 30 + 10

    def identities(rows: pa.Table) -> set[tuple[int, int, int]]:
        return set(zip(*(rows.column(c).to_pylist() for c in ("originalTransaction", "bucket", "rowId")), strict=True))

    old_left = {i for i in identities(after) if i[0] != result.write_id}
    assert old_left < identities(before) and len(identities(before) - old_left) == 30


def test_the_cli_creates_a_table_ingests_into_a_partition_and_publishes_delta_committed(
    metastore: HiveMetastore, metastore_uri: str, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    env = {
        "ACIDCLEAN_METASTORE_URIS": metastore_uri,
        "ACIDCLEAN_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "ACIDCLEAN_TOPIC_PREFIX": f"{unique_name}.",
        "ACIDCLEAN_TOPIC_PARTITIONS": "1",
    }
    runner = CliRunner()
    created = runner.invoke(
        cli,
        [
            "create-table",
            f"{DB}.{unique_name}",
            "--columns",
            "id bigint, v string",
            "--buckets",
            "3",
            "--partitioned-by",
            "ds",
        ],
        env=env,
    )
    assert created.exit_code == 0, created.output
    assert f"created transactional table {DB}.{unique_name} (id bigint, v string): 3 buckets on id" in created.output
    info = metastore.get_table(DB, unique_name)
    assert info.transactional and info.bucket_count == 3 and info.partition_keys == ("ds",)

    ingested = runner.invoke(
        cli,
        ["ingest", f"{DB}.{unique_name}", "--rows", "20", "--commits", "2", "--partition", "ds=2026-01-01"],
        env=env,
    )
    assert ingested.exit_code == 0, ingested.output
    lines = ingested.output.strip().splitlines()
    assert len(lines) == 2 and all("(20 rows)" in line and "DeltaCommitted published" in line for line in lines)
    assert snapshot(metastore, unique_name, "ds=2026-01-01").num_rows == 40

    settings = make_settings(metastore_uri, kafka_bootstrap, unique_name, tmp_path)
    topic = settings.topic("delta_committed")
    events = [decode(raw_record(m), rejected_by="tests", tenant="default") for m in LogReader(settings.kafka, [topic])]
    assert all(isinstance(e, DeltaCommitted) for e in events) and len(events) == 2
    assert {e.partition for e in events} == {"ds=2026-01-01"}  # type: ignore[union-attr]
    assert [e.delta_directory for e in events] == directories(metastore, unique_name, "ds=2026-01-01")  # type: ignore[union-attr]


def test_a_commit_that_fails_to_write_aborts_its_transaction(metastore: HiveMetastore, unique_name: str) -> None:
    new_table(metastore, unique_name)
    location = Path(open_location(metastore.get_table(DB, unique_name).location).path)
    location.rmdir()
    location.write_text("not a directory")  # the storage refuses every write below it
    before = reader_ids(metastore.valid_write_ids(DB, unique_name), metastore.kind)
    try:
        with pytest.raises(OSError):
            write(metastore, unique_name, rows=5)
        after = reader_ids(metastore.valid_write_ids(DB, unique_name), metastore.kind)
        aborted_now = set(after.aborted_ids) - set(before.aborted_ids)
        assert aborted_now and min(aborted_now) > before.high_watermark
        assert not aborted_now & set(after.open_ids)
    finally:
        location.unlink()
        location.mkdir()
