"""The vacuum job on the real stack: Hive Metastore, Kafka and Spark (local[2]).

Tables are written by the ingest writer; snapshots are read as a reader would (its valid id list
from the metastore). Every vacuum must leave the snapshot exactly as it was, identities included.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import pytest
from click.testing import CliRunner
from hmsclient import hmsclient
from hmsclient.genthrift.hive_metastore import ttypes
from producers_support import (
    DB,
    directories,
    make_settings,
    new_table,
    snapshot,
    vacuum,
    vacuum_events,
    write,
)

from acidclean.cli import main as cli
from acidclean.producers.publish import Publisher
from acidclean.producers.reader import locked_read
from acidclean.shared.acid.id_lists import MetastoreKind
from acidclean.shared.errors import VacuumError, VacuumRefusedError
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.settings import Settings
from acidclean.shared.storage import open_location

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", autouse=True)
def database(metastore: HiveMetastore) -> None:
    metastore.create_database(DB)


@pytest.fixture
def settings(metastore_uri: str, kafka_bootstrap: str, unique_name: str, tmp_path: Path) -> Settings:
    return make_settings(metastore_uri, kafka_bootstrap, unique_name, tmp_path)


def d(*ids: int, delete: bool = False, statement: bool = True) -> str:
    """A directory name from ids, as Hive formats it."""
    prefix = "delete_delta" if delete else "delta"
    name = f"{prefix}_{ids[0]:07d}_{ids[-1]:07d}"
    return f"{name}_0000" if statement else name


@pytest.mark.metastore  # CI runs these on Hive 3 too
def test_minor_then_major_vacuum_keep_every_row_with_its_identity_and_deleted_rows_stay_deleted(
    metastore: HiveMetastore, settings: Settings, spark: Any, unique_name: str
) -> None:
    new_table(metastore, unique_name, buckets=3)
    ids = [c.write_id for c in write(metastore, unique_name, rows=200, commits=3)]
    last = write(metastore, unique_name, rows=100, delete_fraction=0.2)[0]
    ids.append(last.write_id)
    before = snapshot(metastore, unique_name)
    assert before.num_rows == 700 - last.deletes and last.deletes == 120

    minor = vacuum(metastore, settings, spark, unique_name)
    assert minor.new_directories == (
        d(ids[0], ids[3], delete=True, statement=False),
        d(ids[0], ids[3], statement=False),
    )
    assert (minor.rows_written, minor.deletes_written) == (700, 120)  # a minor vacuum does not apply deletes
    assert snapshot(metastore, unique_name).equals(before)

    major = vacuum(metastore, settings, spark, unique_name, full=True, allow_uncleaned=True)  # minor not cleaned
    assert major.new_directories == (f"base_{ids[3]:07d}",)
    assert major.rows_written == before.num_rows
    assert snapshot(metastore, unique_name).equals(before)
    assert set(major.plan.obsolete_after) >= {d(ids[0], ids[3], statement=False), d(ids[3], delete=True)}

    events = vacuum_events(settings)
    assert [e.event_id for e in events] == [minor.publish.event.event_id, major.publish.event.event_id]  # type: ignore[union-attr]
    assert [e.compaction_type for e in events] == ["MINOR", "MAJOR"]
    assert events[1].highest_write_id == ids[3]
    assert events[1].obsolete_directories == list(major.plan.obsolete_after)
    assert events[1].table == f"{DB}.{unique_name}" and events[1].tenant == settings.tenant


@pytest.mark.rule2
def test_the_lock_snapshot_taken_after_the_rename_holds_the_reader_that_was_reading(
    metastore: HiveMetastore, settings: Settings, spark: Any, unique_name: str
) -> None:
    new_table(metastore, unique_name)
    write(metastore, unique_name, rows=20, commits=2)
    with locked_read(metastore, DB, unique_name) as reader:
        result = vacuum(metastore, settings, spark, unique_name)
        assert result.publish is not None and result.publish.published
        (lock,) = result.publish.event.lock_snapshot
        assert (lock.lock_id, lock.txn_id, lock.lock_type) == (reader.lock_id, reader.txn_id, "SHARED_READ")
        assert lock.user == metastore.user and lock.acquired_at is not None
        # What the reader listed before the vacuum is still there: nothing is deleted by a vacuum.
        assert set(reader.directories) <= set(directories(metastore, unique_name))
    (published,) = vacuum_events(settings)
    assert published == result.publish.event


def test_a_partition_is_vacuumed_alone_and_its_event_names_it(
    metastore: HiveMetastore, settings: Settings, spark: Any, unique_name: str
) -> None:
    new_table(metastore, unique_name, partitioned_by=[("ds", "string")])
    for day in ("ds=2026-01-01", "ds=2026-01-02"):
        write(metastore, unique_name, rows=30, commits=2, partition=day)
    untouched = directories(metastore, unique_name, "ds=2026-01-02")
    before = snapshot(metastore, unique_name, "ds=2026-01-01")
    result = vacuum(metastore, settings, spark, unique_name, full=True, partition="ds=2026-01-01")
    assert snapshot(metastore, unique_name, "ds=2026-01-01").equals(before)
    assert directories(metastore, unique_name, "ds=2026-01-02") == untouched
    assert result.publish is not None
    event = result.publish.event
    assert event.partition == "ds=2026-01-01" and event.location.endswith("/ds=2026-01-01")


@pytest.mark.rule2
@pytest.mark.metastore  # CI runs these on Hive 3 and 4 too
def test_a_partitioned_table_without_a_partition_is_vacuumed_one_partition_at_a_time(
    metastore: HiveMetastore, spark: Any, metastore_uri: str, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    """As openLooKeng's VACUUM TABLE t without PARTITION: each partition its own vacuum and event, whose
    lock snapshot holds the readers of that partition; one with nothing to compact is skipped; one
    refused does not stop the others, and makes the run exit 1."""
    table = new_table(metastore, unique_name, partitioned_by=[("ds", "string")])
    days = ("ds=2026-01-01", "ds=2026-01-02", "ds=2026-01-03")
    for day, commits in zip(days, (2, 2, 1), strict=True):
        write(metastore, unique_name, rows=20, commits=commits, partition=day)
    before = {day: snapshot(metastore, unique_name, day) for day in days}
    alone = directories(metastore, unique_name, days[2])
    settings = make_settings(metastore_uri, kafka_bootstrap, unique_name, tmp_path)
    env = {
        "ACIDCLEAN_METASTORE_URIS": metastore_uri,
        "ACIDCLEAN_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "ACIDCLEAN_STATE_DIR": str(tmp_path),
        "ACIDCLEAN_TOPIC_PREFIX": settings.topic_prefix,
    }
    with locked_read(metastore, DB, unique_name, days[1]) as reader:
        result = CliRunner().invoke(cli, ["vacuum", table], env=env)
    assert result.exit_code == 0, result.output
    assert f"skipped: nothing to compact in {table} partition {days[2]}" in result.stdout
    assert result.stdout.rstrip().endswith(f"{table}: 3 partition(s): 2 vacuumed, 1 with nothing to compact")
    events = {event.partition: event for event in vacuum_events(settings)}
    assert sorted(events) == list(days[:2])
    assert events[days[0]].lock_snapshot == []
    assert [lock.lock_id for lock in events[days[1]].lock_snapshot] == [reader.lock_id]
    assert all(events[day].location.endswith(f"/{day}") for day in days[:2])
    assert all(snapshot(metastore, unique_name, day).equals(before[day]) for day in days)
    assert directories(metastore, unique_name, days[2]) == alone

    again = CliRunner().invoke(cli, ["vacuum", table], env=env)
    assert again.exit_code == 1
    assert f"error: nothing to compact in any of the 3 partition(s) of {table}" in again.stderr

    # FULL: the first two still hold what their minor vacuums made obsolete (no cleaner ran): refused;
    # the third becomes a base all the same.
    full = CliRunner().invoke(cli, ["vacuum", table, "--full"], env=env)
    assert full.exit_code == 1, full.output
    assert f"not vacuumed: partition {days[0]}: " in full.stdout and "its cleanup has not run yet" in full.stdout
    assert f"committed MAJOR vacuum of {table} partition {days[2]}" in full.stdout
    assert f"1 vacuumed, 0 with nothing to compact, 2 not vacuumed ({days[0]}, {days[1]})" in full.stdout
    assert sorted(event.partition or "" for event in vacuum_events(settings)) == list(days)  # one more: the third
    assert snapshot(metastore, unique_name, days[2]).equals(before[days[2]])


@pytest.mark.rule2
@pytest.mark.metastore  # CI runs these on Hive 3 and 4 too
def test_a_reader_of_the_whole_table_is_in_the_lock_snapshot_of_every_partitions_vacuum(
    metastore: HiveMetastore, spark: Any, metastore_uri: str, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    """A query over every partition started before the vacuums: each partition's cleanup must wait
    for it, so each partition's event names its lock; what it listed is all still there."""
    table = new_table(metastore, unique_name, partitioned_by=[("ds", "string")])
    days = ("ds=2026-02-01", "ds=2026-02-02")
    for day in days:
        write(metastore, unique_name, rows=10, commits=2, partition=day)
    settings = make_settings(metastore_uri, kafka_bootstrap, unique_name, tmp_path)
    env = {
        "ACIDCLEAN_METASTORE_URIS": metastore_uri,
        "ACIDCLEAN_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "ACIDCLEAN_STATE_DIR": str(tmp_path),
        "ACIDCLEAN_TOPIC_PREFIX": settings.topic_prefix,
    }
    with locked_read(metastore, DB, unique_name) as reader:
        result = CliRunner().invoke(cli, ["vacuum", table], env=env)
        assert result.exit_code == 0, result.output
        for day in days:
            listed = {name.split("/", 1)[1] for name in reader.directories if name.startswith(f"{day}/")}
            assert listed and listed <= set(directories(metastore, unique_name, day))
    events = vacuum_events(settings)
    assert sorted(event.partition or "" for event in events) == list(days)
    assert all([lock.lock_id for lock in event.lock_snapshot] == [reader.lock_id] for event in events)


@pytest.mark.metastore  # CI runs these on Hive 3 too
def test_only_ids_below_an_open_transaction_are_compacted(
    metastore: HiveMetastore, settings: Settings, spark: Any, unique_name: str
) -> None:
    new_table(metastore, unique_name)
    first = [c.write_id for c in write(metastore, unique_name, rows=10, commits=2)]
    txn = metastore.open_txn()
    try:
        open_id = metastore.allocate_write_id(txn, DB, unique_name)
        later = [c.write_id for c in write(metastore, unique_name, rows=10, commits=2)]
        before = snapshot(metastore, unique_name)
        result = vacuum(metastore, settings, spark, unique_name)
        assert result.new_directories == (d(first[0], first[1], statement=False),)
        assert result.plan.held_back == tuple(d(i) for i in later)
        assert result.plan.held_back_by == open_id
        assert snapshot(metastore, unique_name).equals(before)
    finally:
        metastore.abort_txn(txn)


def test_a_rerun_finds_its_directories_committed_and_does_nothing(
    metastore: HiveMetastore, settings: Settings, spark: Any, unique_name: str
) -> None:
    new_table(metastore, unique_name)
    write(metastore, unique_name, rows=10, commits=2, delete_fraction=0.5)
    first = vacuum(metastore, settings, spark, unique_name)
    listed = directories(metastore, unique_name)
    second = vacuum(metastore, settings, spark, unique_name)
    assert second.status == "already-committed" and second.new_directories == first.new_directories
    assert directories(metastore, unique_name) == listed
    assert len(vacuum_events(settings)) == 1


# -- refusals ---------------------------------------------------------------------------------------


def _plain_table(metastore_uri: str, name: str) -> None:
    url = urlparse(metastore_uri)
    storage = ttypes.StorageDescriptor(
        cols=[ttypes.FieldSchema("id", "int", None)],
        inputFormat="org.apache.hadoop.hive.ql.io.orc.OrcInputFormat",
        outputFormat="org.apache.hadoop.hive.ql.io.orc.OrcOutputFormat",
        serdeInfo=ttypes.SerDeInfo(name, "org.apache.hadoop.hive.ql.io.orc.OrcSerde", {}),
        numBuckets=-1,
        bucketCols=[],
        sortCols=[],
        parameters={},
    )
    table = ttypes.Table(name, DB, "test", sd=storage, partitionKeys=[], parameters={}, tableType="MANAGED_TABLE")
    with hmsclient.HMSClient(host=url.hostname, port=url.port) as client:
        client.create_table(table)


def refusal(metastore: HiveMetastore, settings: Settings, name: str, **options: Any) -> str:
    with pytest.raises(VacuumRefusedError) as refused:
        vacuum(metastore, settings, None, name, **options)
    return str(refused.value)


def test_a_table_that_is_not_transactional_is_refused_saying_why(
    metastore: HiveMetastore, settings: Settings, metastore_uri: str, unique_name: str
) -> None:
    _plain_table(metastore_uri, unique_name)
    assert "is not a transactional table (TBLPROPERTIES transactional=true is not set)" in refusal(
        metastore, settings, unique_name
    )


def test_unknown_tables_and_partitions_are_refused(
    metastore: HiveMetastore, settings: Settings, unique_name: str
) -> None:
    assert f"table {DB}.{unique_name} does not exist" in refusal(metastore, settings, unique_name)
    new_table(metastore, unique_name, partitioned_by=[("ds", "string")])
    assert "has no partition ds=2030-01-01" in refusal(metastore, settings, unique_name, partition="ds=2030-01-01")
    assert "is partitioned by ds: vacuum one partition at a time" in refusal(metastore, settings, unique_name)


def test_nothing_to_compact_is_refused(metastore: HiveMetastore, settings: Settings, unique_name: str) -> None:
    new_table(metastore, unique_name)
    assert "it has no committed delta" in refusal(metastore, settings, unique_name)
    write(metastore, unique_name, rows=5)
    assert "only one current delta" in refusal(metastore, settings, unique_name)


@pytest.mark.metastore  # CI runs these on Hive 3 too
def test_an_open_transaction_below_every_delta_is_refused_naming_it(
    metastore: HiveMetastore, settings: Settings, unique_name: str
) -> None:
    new_table(metastore, unique_name)
    txn = metastore.open_txn()
    try:
        open_id = metastore.allocate_write_id(txn, DB, unique_name)
        write(metastore, unique_name, rows=5, commits=2)
        message = refusal(metastore, settings, unique_name, full=True)
        noun = "transaction" if metastore.kind is MetastoreKind.HIVE2 else "write id"
        assert f"{noun} {open_id} is open and lies below every delta" in message
    finally:
        metastore.abort_txn(txn)


# -- publishing -----------------------------------------------------------------------------------------


@pytest.mark.rule6
def test_an_event_kafka_does_not_acknowledge_waits_in_the_outbox_until_a_flush(
    metastore: HiveMetastore,
    settings: Settings,
    spark: Any,
    unique_name: str,
    metastore_uri: str,
    kafka_bootstrap: str,
    tmp_path: Path,
) -> None:
    new_table(metastore, unique_name)
    write(metastore, unique_name, rows=10, commits=2)
    unreachable = make_settings(metastore_uri, "127.0.0.1:9", unique_name, tmp_path)
    result = vacuum(metastore, unreachable, spark, unique_name, publisher=Publisher(unreachable, timeout_s=2.0))
    assert result.status == "committed" and result.publish is not None and not result.publish.published
    assert "127.0.0.1:9" in (result.publish.error or "")
    assert [p.name for p in (tmp_path / "outbox").iterdir()] == [f"vacuum-{result.publish.event.event_id}.json"]

    env = {
        "ACIDCLEAN_METASTORE_URIS": metastore_uri,
        "ACIDCLEAN_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "ACIDCLEAN_TOPIC_PREFIX": f"{unique_name}.",
        "ACIDCLEAN_TOPIC_PARTITIONS": "1",
        "ACIDCLEAN_STATE_DIR": str(tmp_path),
    }
    flushed = CliRunner().invoke(cli, ["outbox", "flush"], env=env)
    assert flushed.exit_code == 0, flushed.output
    assert f"published VacuumCommitted {result.publish.event.event_id}" in flushed.output
    assert "1 published, 0 still pending" in flushed.output
    assert list((tmp_path / "outbox").iterdir()) == []
    assert vacuum_events(settings) == [result.publish.event]


def test_the_cli_dry_run_prints_the_plan_and_writes_nothing(
    metastore: HiveMetastore, metastore_uri: str, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    new_table(metastore, unique_name)
    ids = [c.write_id for c in write(metastore, unique_name, rows=10, commits=3)]
    listed = directories(metastore, unique_name)
    env = {
        "ACIDCLEAN_METASTORE_URIS": metastore_uri,
        "ACIDCLEAN_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "ACIDCLEAN_STATE_DIR": str(tmp_path),
    }
    result = CliRunner().invoke(cli, ["vacuum", f"{DB}.{unique_name}", "--dry-run"], env=env)
    assert result.exit_code == 0, result.output
    assert f"MINOR vacuum of {DB}.{unique_name}" in result.output
    assert f"into       {d(ids[0], ids[2], statement=False)}" in result.output
    assert f"obsolete   {', '.join(d(i) for i in ids)}" in result.output
    assert result.output.rstrip().endswith("dry run: nothing written")
    assert directories(metastore, unique_name) == listed
    refused = CliRunner().invoke(cli, ["vacuum", f"{DB}.nosuchtable{unique_name}"], env=env)
    assert refused.exit_code == 1 and refused.output.startswith("error: table")


# -- failure in the middle ----------------------------------------------------------------------------


@pytest.mark.rule6
def test_a_vacuum_killed_while_writing_leaves_only_its_hidden_staging_directory(
    metastore: HiveMetastore,
    settings: Settings,
    spark: Any,
    metastore_uri: str,
    kafka_bootstrap: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    new_table(metastore, unique_name, buckets=8)
    write(metastore, unique_name, rows=60_000, commits=3)
    listed = directories(metastore, unique_name)
    before = snapshot(metastore, unique_name)
    location = open_location(metastore.get_table(DB, unique_name).location).path

    env = {
        **os.environ,
        "ACIDCLEAN_METASTORE_URIS": metastore_uri,
        "ACIDCLEAN_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "ACIDCLEAN_STATE_DIR": str(tmp_path),
        "PYSPARK_PYTHON": sys.executable,
    }
    job = subprocess.Popen(
        [sys.executable, "-m", "acidclean", "vacuum", f"{DB}.{unique_name}", "--full", "--master", "local[1]"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        staged = _wait_for_first_bucket_file(Path(location), job, timeout_s=120)
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # the driver, its JVM and the Python workers
        job.wait(30)
    assert staged, "the vacuum finished before it could be killed while writing"

    leftovers = [name for name in directories(metastore, unique_name) if name not in listed]
    assert len(leftovers) == 1 and leftovers[0].startswith("_tmp_acidclean_")
    assert snapshot(metastore, unique_name).equals(before)

    # The killed vacuum's lock outlives it; once silent past vacuum_lock_stale_s the next vacuum
    # releases it (where the metastore's housekeeping has not timed it out already).
    time.sleep(2.5)
    next_settings = settings.model_copy(update={"vacuum_lock_stale_s": 2.0})
    result = vacuum(metastore, next_settings, spark, unique_name, full=True)
    assert result.status == "committed"
    assert snapshot(metastore, unique_name).equals(before)
    assert leftovers[0] in directories(metastore, unique_name)  # still there, still hidden, for a cleaner
    assert not [lock for lock in metastore.show_locks(DB) if "acidclean_vacuum" in (lock.table or "")]


def test_an_unreadable_input_file_fails_the_vacuum_naming_it_and_commits_nothing(
    metastore: HiveMetastore, settings: Settings, spark: Any, unique_name: str
) -> None:
    new_table(metastore, unique_name, buckets=1)
    (_, second) = write(metastore, unique_name, rows=10, commits=2)
    location = Path(open_location(metastore.get_table(DB, unique_name).location).path)
    broken = location / str(second.delta) / "bucket_00000"
    broken.write_bytes(b"this is not an ORC file")  # read by the Spark task, not by the driver
    listed = directories(metastore, unique_name)
    expected = rf"UnreadableFileError: cannot read ORC file {broken}.*Nothing was committed"
    with pytest.raises(VacuumError, match=expected):
        vacuum(metastore, settings, spark, unique_name)
    leftovers = [name for name in directories(metastore, unique_name) if name not in listed]
    assert all(name.startswith("_tmp_acidclean_") for name in leftovers)  # at most its staging directory
    assert vacuum_events(settings) == []


def _wait_for_first_bucket_file(location: Path, job: subprocess.Popen[bytes], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and job.poll() is None:
        if any(location.glob("_tmp_acidclean_*/*/bucket_*")):
            return True
        time.sleep(0.01)
    return False


# -- random histories -----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2])
def test_random_histories_of_ingest_and_vacuums_never_change_a_snapshot(
    metastore: HiveMetastore, settings: Settings, spark: Any, unique_name: str, seed: int
) -> None:
    random = np.random.default_rng(seed)
    new_table(metastore, unique_name, buckets=int(random.integers(1, 4)))
    vacuums = 0
    for _ in range(8):
        if random.random() < 0.6:
            write(
                metastore, unique_name, rows=int(random.integers(1, 60)), delete_fraction=float(random.choice([0, 0.3]))
            )
            continue
        before = snapshot(metastore, unique_name)
        try:
            full = bool(random.random() < 0.4)  # no cleaner runs here: earlier vacuums stay uncleaned
            vacuum(metastore, settings, spark, unique_name, full=full, allow_uncleaned=True)
        except VacuumRefusedError:
            continue
        vacuums += 1
        assert snapshot(metastore, unique_name).equals(before)
    assert vacuums >= 1


# -- files Hive reads ---------------------------------------------------------------------------------


def test_the_files_a_vacuum_writes_are_read_by_the_java_orc_reader_with_hives_metadata(
    metastore: HiveMetastore, settings: Settings, spark: Any, unique_name: str
) -> None:
    new_table(metastore, unique_name, buckets=1)
    write(metastore, unique_name, rows=100, commits=2, delete_fraction=0.1)
    result = vacuum(metastore, settings, spark, unique_name)
    location = open_location(metastore.get_table(DB, unique_name).location).path
    jvm = spark._jvm
    for directory in result.new_directories:
        path = jvm.org.apache.hadoop.fs.Path(f"file://{location}/{directory}/bucket_00000")
        options = jvm.org.apache.orc.OrcFile.readerOptions(jvm.org.apache.hadoop.conf.Configuration())
        reader = jvm.org.apache.orc.OrcFile.createReader(path, options)
        keys = set(reader.getMetadataKeys())
        assert {"hive.acid.version", "hive.acid.stats", "hive.acid.key.index"} <= keys
        version = jvm.java.nio.charset.StandardCharsets.UTF_8.decode(reader.getMetadataValue("hive.acid.version"))
        assert version.toString() == "2"
        assert str(reader.getSchema().toString()).startswith(
            "struct<operation:int,originalTransaction:bigint,bucket:int,rowId:bigint,currentTransaction:bigint,row:"
        )
        assert reader.getCompressionKind().toString() == "ZLIB"
        assert (Path(location) / directory / "_orc_acid_version").read_text() == "2"


# -- Python workers -----------------------------------------------------------------------------------

_WORKER_PROBE = """
import sys
from acidclean.producers.vacuum import spark_session
spark = spark_session("local[1]", "acidclean-daemon-probe")
try:
    seen = spark.sparkContext.parallelize([0], 1).map(
        lambda _: [m for m in ("pyarrow", "acidclean.producers.compact") if m in sys.modules]
    ).collect()
    print("preloaded:", seen[0])
finally:
    spark.stop()
"""


def test_the_vacuums_local_spark_forks_workers_that_have_its_modules_imported() -> None:
    """A fresh worker starts with pyarrow and the ACID writer imported (the daemon imported them once);
    the probe's own function imports neither."""
    environment = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_SUBMIT_ARGS", "PYSPARK_PYTHON")}
    probe = subprocess.run(
        [sys.executable, "-c", _WORKER_PROBE], capture_output=True, text=True, timeout=300, env=environment
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert "preloaded: ['pyarrow', 'acidclean.producers.compact']" in probe.stdout, probe.stdout + probe.stderr[-3000:]
