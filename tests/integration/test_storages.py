"""The same stories on the three storages: the local disk, a real HDFS and a real S3 API server.

Each test runs once per storage (the ``storage`` fixture): tables live in a database located on that
storage, the vacuum commits the way that storage allows (a rename on the local disk and HDFS, a
metastore transaction on S3, where a directory rename is a copy and a delete), and the cleaner lists
and deletes there. HDFS and S3 start once per session, the first time a test asks for them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from cleaner_support import TENANT, Watcher, publish, running_cleaner, start_cleaner_process
from storage_support import StorageStack

from acidclean.consumers.cleaner_process import CleanerOptions
from acidclean.producers.commit_mode import CommitMode
from acidclean.producers.ingest import IngestRequest, create_table, ingest
from acidclean.producers.plan import CompactionType
from acidclean.producers.publish import Publisher
from acidclean.producers.reader import locked_read
from acidclean.producers.vacuum import VacuumRequest, VacuumResult, outbox_for, run_vacuum
from acidclean.schemas.events import VacuumCommitted
from acidclean.shared.acid.id_lists import reader_ids
from acidclean.shared.acid.names import parse_directory_name
from acidclean.shared.acid.write_ids import ValidTxnList
from acidclean.shared.errors import VacuumError
from acidclean.shared.orc.reader import read_snapshot
from acidclean.shared.settings import Settings, load_settings
from acidclean.shared.storage import StorageLocation, open_location

pytestmark = pytest.mark.integration
IDENTITY_ORDER = [("originalTransaction", "ascending"), ("bucket", "ascending"), ("rowId", "ascending")]


@dataclass
class StorageTable:
    storage: StorageStack
    db: str
    name: str

    @property
    def full_name(self) -> str:
        return f"{self.db}.{self.name}"

    @property
    def location(self) -> StorageLocation:
        return open_location(self.storage.metastore.get_table(self.db, self.name).location)

    @property
    def database_location(self) -> str:
        return self.storage.metastore.get_table(self.db, self.name).location.rsplit("/", 1)[0]

    def write(self, commits: int, delete_fraction: float = 0.0, rows: int = 200) -> None:
        ingest(self.storage.metastore, IngestRequest(self.db, self.name, rows, commits, delete_fraction))

    def children(self) -> set[str]:
        location = self.location
        return {entry.name for entry in location.fs.list_dir(location.path)}

    def rows(self) -> pa.Table:
        """Every row a reader sees now, with its identity."""
        metastore = self.storage.metastore
        location = self.location
        ids = reader_ids(metastore.valid_write_ids(self.db, self.name), metastore.kind)
        txns = ValidTxnList.from_string(metastore.valid_txn_list())
        rows = read_snapshot(location.fs.arrow, location.path, ids, with_row_id=True, valid_txns=txns)
        return rows.sort_by(IDENTITY_ORDER)


def new_table(storage: StorageStack, name: str, buckets: int = 2) -> StorageTable:
    db = f"storage_{storage.name}"
    location = f"{storage.warehouse}/{db}.db" if storage.warehouse else None
    storage.metastore.create_database(db, location)
    create_table(storage.metastore, db, name, (("id", "int"), ("v", "string")), buckets=buckets)
    return StorageTable(storage, db, name)


# The S3 stack's metastore is Hive 3.1, behind which auto refuses an object store (Hive 3 readers cannot
# parse _vT); these tables' only readers are acidclean's own, which do, so the transaction commit is acknowledged.
S3_BEHIND_HIVE3 = {"vacuum_commit": "visibility-txn", "vacuum_visibility_txn_on_hive3": True}


def table_settings(storage: StorageStack, table: StorageTable, kafka_bootstrap: str, tmp_path: Path) -> Settings:
    return load_settings(
        environ={},
        overrides={
            "metastore_uris": storage.metastore_uri,
            "kafka": {"bootstrap.servers": kafka_bootstrap},
            "topic_prefix": f"{table.name}.",
            "topic_partitions": 1,
            "state_dir": str(tmp_path),
            "tenant": TENANT,
            "allowed_roots": {TENANT: [table.database_location]},
            "group_id": f"{table.name}-cleaner",
            "cleanup_interval_ms": 300,
            "vacuum_lock_stale_s": 2.0,
            **(S3_BEHIND_HIVE3 if storage.name == "s3" else {}),
        },
    )


def vacuum(table: StorageTable, settings: Settings, spark: Any, *, full: bool = False) -> VacuumResult:
    compaction = CompactionType.MAJOR if full else CompactionType.MINOR
    return run_vacuum(
        VacuumRequest(table.full_name, None, compaction, allow_uncleaned=True),
        settings=settings,
        metastore=table.storage.metastore,
        spark=lambda: spark,
        publisher=Publisher(settings, timeout_s=20.0),
        outbox=outbox_for(settings),
    )


def expected_commit(storage: StorageStack) -> CommitMode:
    return CommitMode.VISIBILITY_TXN if storage.name == "s3" else CommitMode.RENAME


def s3_request_counts(storage: StorageStack) -> dict[str, int]:
    if storage.request_log is None:
        return {}
    from acidclean.deploy.local.s3 import s3_requests

    return dict(s3_requests(storage.request_log))


def _grown(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {kind: count - before.get(kind, 0) for kind, count in after.items() if count > before.get(kind, 0)}


@pytest.fixture
def watched() -> Iterator[list[Watcher]]:
    watchers: list[Watcher] = []
    yield watchers
    for watcher in watchers:
        watcher.close()


@pytest.mark.rule1
@pytest.mark.rule2
@pytest.mark.rule4
def test_seed_story_a_reader_holds_the_cleanup_until_it_ends_then_exactly_the_claims_go(
    storage: StorageStack,
    kafka_bootstrap: str,
    spark: Any,
    unique_name: str,
    tmp_path: Path,
    watched: list[Watcher],
) -> None:
    table = new_table(storage, unique_name)
    table.write(commits=3, delete_fraction=0.1)
    before_rows, before_children = table.rows(), table.children()
    settings = table_settings(storage, table, kafka_bootstrap, tmp_path)
    watcher = Watcher(settings)
    watched.append(watcher)

    with ExitStack() as reading:
        reader = reading.enter_context(locked_read(storage.metastore, table.db, table.name))
        requests_before = s3_request_counts(storage)
        result = vacuum(table, settings, spark)
        vacuum_requests = _grown(requests_before, s3_request_counts(storage))
        assert result.status == "committed" and result.commit_mode is expected_commit(storage)
        assert result.publish is not None and result.publish.published
        event = result.publish.event
        assert [entry.lock_id for entry in event.lock_snapshot] == [reader.lock_id]
        if storage.name == "s3":
            assert all(f"_v{result.visibility_txn_id:07d}" in name for name in event.new_directories)
            assert "CopyObject" not in vacuum_requests, f"the vacuum renamed on S3: {vacuum_requests}"
        assert set(event.obsolete_directories) == {
            name for name in before_children if name.startswith(("delta_", "delete_delta_"))
        }
        with running_cleaner(settings, CleanerOptions(cleaner_id=f"storage-{storage.name}")):
            watcher.wait_for(lambda: len(watcher.delays(event)) >= 2, 30, "two requeues while the reader reads")
            assert set(event.obsolete_directories) <= table.children()
            assert table.rows().equals(before_rows)
            location = table.location
            sizes = {name: location.fs.tree_size(location.child(name)) for name in event.obsolete_directories}
            reading.close()  # the reader commits: its lock is released
            [done] = watcher.wait_for(lambda: watcher.done(event), 30, "CleanupDone after the reader ended")

    assert table.children() == (before_children - set(event.obsolete_directories)) | set(event.new_directories)
    assert table.rows().equals(before_rows)
    assert sorted(d.name for d in done.directories_removed) == sorted(event.obsolete_directories)
    # CleanupDone's counts are exact: the files and bytes each directory held (side files included).
    assert {d.name: (d.file_count, d.bytes) for d in done.directories_removed} == {
        name: (size.files, size.bytes) for name, size in sizes.items()
    }

    # Rule 4 on this storage: a location outside the tenant's roots, or climbing out of one, is refused.
    outside = [
        f"{table.database_location}/../elsewhere.db/{table.name}",
        table.database_location.replace(f"storage_{storage.name}.db", "other_tenant.db") + f"/{table.name}",
    ]
    forged = []
    for where in outside:
        forged_id = uuid.uuid4()
        forged.append(event.model_copy(update={"event_id": forged_id, "correlation_id": forged_id, "location": where}))
    with running_cleaner(settings, CleanerOptions(cleaner_id=f"storage-{storage.name}-2")):
        publish(settings, *forged)
        for bad in forged:
            [rejected] = watcher.wait_for(lambda b=bad: watcher.rejected(b), 30, f"dead letter for {bad.location}")
            assert rejected.reason_code == "unsafe_path", rejected.reason
    assert table.children() == (before_children - set(event.obsolete_directories)) | set(event.new_directories)


@pytest.mark.parametrize(("full", "deletes"), [(False, False), (True, False), (False, True)])
def test_the_seed_vacuum_cases_claim_what_hive_would_call_obsolete(
    storage: StorageStack, kafka_bootstrap: str, spark: Any, unique_name: str, tmp_path: Path, full: bool, deletes: bool
) -> None:
    table = new_table(storage, unique_name, buckets=1)
    table.write(commits=3 + deletes, delete_fraction=0.2 if deletes else 0.0, rows=50)
    singles = table.children() - {"_orc_acid_version"}
    before_rows = table.rows()
    settings = table_settings(storage, table, kafka_bootstrap, tmp_path)
    result = vacuum(table, settings, spark, full=full)
    assert result.publish is not None
    event = result.publish.event
    parsed = [parse_directory_name(name) for name in singles]
    ids = [p.max_write_id for p in parsed if p is not None]  # transaction ids on Hive 2, write ids after
    lowest, highest = min(ids), max(ids)
    plain = [_plain(name) for name in event.new_directories]
    if full:
        assert plain == [f"base_{highest:07d}"]
    elif deletes:
        assert plain == [f"delete_delta_{lowest:07d}_{highest:07d}", f"delta_{lowest:07d}_{highest:07d}"]
    else:
        assert plain == [f"delta_{lowest:07d}_{highest:07d}"]
    assert sorted(event.obsolete_directories) == sorted(singles)
    assert table.rows().equals(before_rows)


@pytest.mark.rule2
def test_a_reader_listing_at_any_moment_during_a_vacuum_reads_the_same_rows(
    storage: StorageStack, kafka_bootstrap: str, spark: Any, unique_name: str, tmp_path: Path
) -> None:
    """Readers list and read in a loop while the vacuum writes and commits. On S3 the vacuum is MINOR
    with deletes: its two directories become visible together, with T's commit. A rename commits two
    directories one after the other (the window docs/layout.md names), so there the vacuum is MAJOR."""
    table = new_table(storage, unique_name)
    table.write(commits=4, delete_fraction=0.2, rows=2000)
    before = table.rows()
    stop, reads, wrong = threading.Event(), [], []

    def read_in_a_loop() -> None:
        while not stop.is_set():
            rows = table.rows()
            reads.append(len(table.children()))
            if not rows.equals(before):
                wrong.append(rows.num_rows)

    reader = threading.Thread(target=read_in_a_loop, daemon=True)
    reader.start()
    try:
        # Under load one read can outlast the whole vacuum: start it once reads have been seen before it.
        deadline = time.monotonic() + 120
        while len(reads) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        result = vacuum(
            table, table_settings(storage, table, kafka_bootstrap, tmp_path), spark, full=storage.name != "s3"
        )
        committed_at = len(reads)
        deadline = time.monotonic() + 60
        while len(reads) < committed_at + 2 and time.monotonic() < deadline:  # reads after the commit too
            time.sleep(0.05)
    finally:
        stop.set()
        reader.join(60)
    assert result.status == "committed" and len(result.new_directories) == (2 if storage.name == "s3" else 1)
    assert len(reads) >= 5 and max(reads) > min(reads)  # reads before and after the new directories appeared
    assert wrong == [], f"{len(wrong)} of {len(reads)} reads saw other rows"


def _plain(name: str) -> str:
    """A directory name without its ``_vT`` suffix."""
    parsed = parse_directory_name(name)
    assert parsed is not None
    return name.split("_v")[0] if parsed.visibility_txn_id else name


@pytest.mark.rule6
def test_a_vacuum_killed_while_writing_leaves_nothing_a_reader_uses(
    storage: StorageStack, kafka_bootstrap: str, spark: Any, unique_name: str, tmp_path: Path
) -> None:
    table = new_table(storage, unique_name, buckets=8)
    table.write(commits=3, rows=40_000)
    before_rows, before_children = table.rows(), table.children()
    env = {
        **os.environ,
        **storage.environment,
        "ACIDCLEAN_METASTORE_URIS": storage.metastore_uri,
        "ACIDCLEAN_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "ACIDCLEAN_STATE_DIR": str(tmp_path),
        "PYSPARK_PYTHON": sys.executable,
    }
    if storage.name == "s3":
        env.update({"ACIDCLEAN_VACUUM_COMMIT": "visibility-txn", "ACIDCLEAN_VACUUM_VISIBILITY_TXN_ON_HIVE3": "true"})
    job = subprocess.Popen(
        [sys.executable, "-m", "acidclean", "vacuum", table.full_name, "--full", "--master", "local[1]"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        written = _wait_for_a_written_bucket(table, before_children, job, timeout_s=180)
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # the driver, its JVM and the Python workers
        job.wait(30)
    assert written, "the vacuum finished before it could be killed while writing"

    leftovers = table.children() - before_children
    assert len(leftovers) == 1, leftovers
    [leftover] = leftovers
    if storage.name == "s3":  # written in place, invisible while its transaction is open
        parsed = parse_directory_name(leftover)
        assert parsed is not None and parsed.visibility_txn_id, leftover
        txns = ValidTxnList.from_string(storage.metastore.valid_txn_list())
        assert not txns.is_txn_valid(parsed.visibility_txn_id)
    else:
        assert leftover.startswith("_tmp_acidclean_")
    assert table.rows().equals(before_rows)  # a reader now reads exactly what it read before

    if storage.name == "s3":
        # The metastore's housekeeping aborts the dead vacuum's silent transaction (hive.txn.timeout);
        # the next vacuum then claims the aborted output, so its cleanup removes it (rule 6).
        storage.metastore.abort_txn(parsed.visibility_txn_id)
    time.sleep(2.5)  # the killed vacuum's lock goes stale (vacuum_lock_stale_s = 2 s)
    settings = table_settings(storage, table, kafka_bootstrap, tmp_path)
    result = vacuum(table, settings, spark, full=True)
    assert result.status == "committed"
    assert table.rows().equals(before_rows)
    if storage.name == "s3":
        assert result.publish is not None and leftover in result.publish.event.obsolete_directories


@pytest.mark.rule6
def test_a_vacuum_that_fails_while_writing_commits_nothing_and_leaves_only_what_readers_skip(
    storage: StorageStack, kafka_bootstrap: str, spark: Any, unique_name: str, tmp_path: Path
) -> None:
    table = new_table(storage, unique_name, buckets=2)
    table.write(commits=2, rows=100)
    location = table.location
    second = sorted(name for name in table.children() if name.startswith("delta_"))[-1]
    with location.fs.arrow.open_output_stream(location.child(f"{second}/bucket_00001")) as out:
        out.write(b"this is not an ORC file")  # read by a Spark task, not by the driver
    before_children = table.children()
    settings = table_settings(storage, table, kafka_bootstrap, tmp_path)
    with pytest.raises(VacuumError, match=r"UnreadableFileError.*Nothing was committed"):
        vacuum(table, settings, spark)
    leftovers = table.children() - before_children
    if storage.name == "s3":  # written in place under T, which the failure aborted
        txns = ValidTxnList.from_string(storage.metastore.valid_txn_list())
        for name in leftovers:
            parsed = parse_directory_name(name)
            assert parsed is not None and txns.is_txn_aborted(parsed.visibility_txn_id), name
    else:
        assert all(name.startswith("_tmp_acidclean_") for name in leftovers), leftovers


def _wait_for_a_written_bucket(
    table: StorageTable, before: set[str], job: subprocess.Popen[bytes], timeout_s: float
) -> bool:
    location = table.location
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and job.poll() is None:
        for name in table.children() - before:
            below = location.fs.tree_size(location.child(name))
            if below.files >= 1:
                return True
        time.sleep(0.05)
    return False


@pytest.mark.rule5
def test_a_cleaner_killed_mid_delete_then_restarted_finishes_and_deletes_nothing_else(
    storage: StorageStack,
    kafka_bootstrap: str,
    spark: Any,
    unique_name: str,
    tmp_path: Path,
    watched: list[Watcher],
) -> None:
    table = new_table(storage, unique_name)
    table.write(commits=3)
    before_rows, before_children = table.rows(), table.children()
    settings = table_settings(storage, table, kafka_bootstrap, tmp_path).model_copy(update={"cleanup_threads": 1})
    watcher = Watcher(settings)
    watched.append(watcher)
    result = vacuum(table, settings, spark)
    assert result.publish is not None
    event: VacuumCommitted = result.publish.event
    env = {
        **storage.environment,
        "ACIDCLEAN_KAFKA_GROUP_INSTANCE_ID": "cleaner-1",
        "ACIDCLEAN_KAFKA_SESSION_TIMEOUT_MS": "10000",
    }
    crashing = start_cleaner_process(settings, tmp_path / "crash.log", crash_at="mid-delete", extra_env=env)
    restarted = None
    try:
        assert crashing.process.wait(90) == -signal.SIGKILL, crashing.log()
        left = set(event.obsolete_directories) & table.children()
        assert len(left) == len(event.obsolete_directories) - 1  # exactly one was deleted
        restarted = start_cleaner_process(settings, tmp_path / "restart.log", extra_env=env)
        watcher.wait_for(lambda: watcher.done(event), 60, "CleanupDone after the restart")
        assert restarted.stop() == 0, restarted.log()
    finally:
        crashing.stop(5)
        if restarted is not None:
            restarted.stop(5)
    assert table.children() == (before_children - set(event.obsolete_directories)) | set(event.new_directories)
    assert table.rows().equals(before_rows)
    assert watcher.rejected(event) == []
