"""Benchmarks on the real storages, each against a reference measured in the same run.

1. Cleanups per second on the S3 stack (an S3 API server, a Hive 3.1.3 metastore with S3A): one
   cleaner process against a single-threaded loop making the same metastore calls, listings, marker
   reads and deletes with the same S3 client, without Kafka. Also the S3 requests per cleanup, by kind,
   counted by the server, for both.
2. Vacuum throughput on HDFS and on S3: the whole vacuum (MAJOR) against one Python process reading
   every input file with pyarrow and writing each bucket as one ORC file on the same storage.

Run: ``pytest tests/bench/bench_storage.py -m bench -s``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.orc as pa_orc
import pytest
from bench_cleaner import reference_clean
from cleaner_support import TENANT, Watcher, create_uri_table, publish, start_cleaner_process
from cpu_use import CpuWindow, listening_pid
from storage_support import StorageStack

from acidclean.producers.ingest import IngestRequest, create_table, ingest
from acidclean.producers.plan import CompactionType
from acidclean.producers.publish import Publisher
from acidclean.producers.vacuum import VacuumRequest, outbox_for, run_vacuum
from acidclean.shared.acid.names import parse_bucket_file
from acidclean.shared.settings import Settings, load_settings
from acidclean.shared.storage import StorageLocation, open_location

pytestmark = pytest.mark.bench

TABLES = int(os.environ.get("ACIDCLEAN_BENCH_S3_TABLES", "30"))  # lock-free tables a run of the S3 cleanups bench
DELTAS, ROWS, BUCKETS, RUNS = 20, 400_000, 2, 3
MB = 1024 * 1024


def _settings(storage: StorageStack, kafka_bootstrap: str, prefix: str, state: Path, roots: list[str]) -> Settings:
    return load_settings(
        environ={},
        overrides={
            "metastore_uris": storage.metastore_uri,
            "kafka": {"bootstrap.servers": kafka_bootstrap},
            "topic_prefix": f"{prefix}.",
            "topic_partitions": 4,
            "state_dir": str(state),
            "tenant": TENANT,
            "allowed_roots": {TENANT: roots},
            "group_id": f"{prefix}-cleaner",
            "cleanup_interval_ms": 500,
            "cleanup_threads": 4,
            # The S3 stack's metastore is Hive 3.1: auto refuses _vT there; this bench's readers parse it.
            **(
                {"vacuum_commit": "visibility-txn", "vacuum_visibility_txn_on_hive3": True}
                if storage.name == "s3"
                else {}
            ),
        },
    )


def _requests(storage: StorageStack) -> dict[str, int]:
    from acidclean.deploy.local.s3 import s3_requests

    assert storage.request_log is not None
    return dict(s3_requests(storage.request_log))


def _per_cleanup(before: dict[str, int], after: dict[str, int], cleanups: int) -> str:
    grown = {kind: (count - before.get(kind, 0)) / cleanups for kind, count in sorted(after.items())}
    return ", ".join(f"{kind} {count:.1f}" for kind, count in grown.items() if count)


def test_s3_cleanups_per_second_against_a_single_threaded_loop(
    s3_stack: StorageStack, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    database = f"{s3_stack.warehouse}/bench_{unique_name}.db"
    settings = _settings(s3_stack, kafka_bootstrap, unique_name, tmp_path, [database])
    metastore = s3_stack.metastore
    ours = [
        create_uri_table(metastore, database, f"{unique_name}c{i}", db=f"bench_{unique_name}")
        for i in range(TABLES + 1)
    ]
    theirs = [
        create_uri_table(metastore, database, f"{unique_name}r{i}", db=f"bench_{unique_name}") for i in range(TABLES)
    ]
    for table in ours + theirs:
        table.commit_deltas(3)
    warm, ours = ours[0], ours[1:]
    warm_vacuum = warm.minor_vacuum()
    our_vacuums = [table.minor_vacuum() for table in ours]
    their_vacuums = [table.minor_vacuum() for table in theirs]

    assert s3_stack.s3_endpoint is not None
    services = {
        "s3 server": listening_pid(s3_stack.s3_endpoint.endpoint_url),
        "metastore": listening_pid(s3_stack.metastore_uri),
        "broker": listening_pid(kafka_bootstrap),
    }
    before = _requests(s3_stack)
    reference_cpu = CpuWindow({"loop": os.getpid(), **services}).start()
    started = time.perf_counter()
    for table, vacuum in zip(theirs, their_vacuums, strict=True):
        assert reference_clean(metastore, table, vacuum) == 3
    reference_s = time.perf_counter() - started
    reference_cpu.stop()
    reference_requests = _per_cleanup(before, _requests(s3_stack), TABLES)

    watcher = Watcher(settings, fetch_wait_ms=500)  # as bench_cleaner: a 10 ms wait costs the broker CPU
    cleaner = start_cleaner_process(
        settings, tmp_path / "cleaner.log", cleaner_id="bench", extra_env=s3_stack.environment
    )
    try:
        publish(settings, warm_vacuum)
        watcher.wait_for(lambda: watcher.done(warm_vacuum), 60, "the warm-up cleanup")
        before = _requests(s3_stack)
        cleaner_cpu = CpuWindow({"cleaner": cleaner.process.pid, **services}).start()
        published_at = datetime.now(timezone.utc)
        publish(settings, *our_vacuums)
        watcher.wait_for(lambda: all(watcher.done(v) for v in our_vacuums), 180, "every CleanupDone")
        cleaner_cpu.stop()
        last = max(watcher.done(v)[0].occurred_at for v in our_vacuums)
        cleaner_s = (last - published_at).total_seconds()
        cleaner_requests = _per_cleanup(before, _requests(s3_stack), TABLES)
    finally:
        cleaner.stop()
        watcher.close()
    assert all(table.children() == v.new_directories for table, v in zip(ours, our_vacuums, strict=True))
    ours_rate, ref_rate = TABLES / cleaner_s, TABLES / reference_s
    print(
        f"\n[bench] S3 cleanups/s, {TABLES} lock-free tables x 3 deltas, 4 threads: cleaner {ours_rate:.1f}/s "
        f"({cleaner_s:.2f} s) vs single-threaded loop {ref_rate:.1f}/s ({reference_s:.2f} s): "
        f"ratio {ours_rate / ref_rate:.2f}\n"
        f"[bench] S3 requests per cleanup, cleaner: {cleaner_requests}\n"
        f"[bench] S3 requests per cleanup, loop:    {reference_requests}\n"
        # Which part is the limit: the S3 server (moto, Python) shares the box's cores with the rest.
        f"[bench] CPU, cleaner's run: {cleaner_cpu.summary()}\n"
        f"[bench] CPU, loop's run:    {reference_cpu.summary()}"
    )


def _input_files(location: StorageLocation) -> dict[int, list[str]]:
    by_bucket: dict[int, list[str]] = {}
    for entry in location.fs.list_dir(location.path):
        if not entry.name.startswith("delta_"):
            continue
        for child in location.fs.list_dir(location.child(entry.name)):
            bucket = parse_bucket_file(child.name)
            if bucket is not None:
                by_bucket.setdefault(bucket, []).append(location.child(f"{entry.name}/{child.name}"))
    return by_bucket


def _reference(location: StorageLocation) -> Callable[[], None]:
    """One process: read every file of a bucket with pyarrow, write the bucket as one ORC file, all on
    the same storage as the table."""
    by_bucket = _input_files(location)
    fs, out = location.fs.arrow, location.child("_reference_output")

    def run() -> None:
        location.fs.delete_dir(out)
        for bucket, paths in by_bucket.items():
            tables = []
            for path in paths:
                with fs.open_input_file(path) as source:
                    tables.append(pa_orc.ORCFile(source).read())
            with fs.open_output_stream(f"{out}/bucket_{bucket:05d}") as sink:
                pa_orc.write_table(pa.concat_tables(tables), sink, compression="zlib")

    return run


@pytest.mark.parametrize("storage_name", ["hdfs", "s3"])
def test_vacuum_throughput_on_hdfs_and_s3_against_single_process_pyarrow(
    storage_name: str,
    request: pytest.FixtureRequest,
    kafka_bootstrap: str,
    spark: Any,
    unique_name: str,
    tmp_path: Path,
) -> None:
    storage: StorageStack = request.getfixturevalue(f"{storage_name}_stack")
    db = f"bench_{storage_name}"
    storage.metastore.create_database(db, f"{storage.warehouse}/{db}.db")
    create_table(
        storage.metastore, db, unique_name, [("id", "bigint"), ("v", "string"), ("amount", "double")], buckets=BUCKETS
    )
    ingest(storage.metastore, IngestRequest(db, unique_name, ROWS // DELTAS, DELTAS))
    location = open_location(storage.metastore.get_table(db, unique_name).location)
    input_bytes = sum(
        location.fs.tree_size(location.child(e.name)).bytes
        for e in location.fs.list_dir(location.path)
        if e.name.startswith("delta_")
    )
    settings = _settings(storage, kafka_bootstrap, unique_name, tmp_path, [location.uri])
    publisher = Publisher(settings)

    def vacuum() -> None:
        result = run_vacuum(
            VacuumRequest(f"{db}.{unique_name}", None, CompactionType.MAJOR, allow_uncleaned=True),
            settings=settings,
            metastore=storage.metastore,
            spark=lambda: spark,
            publisher=publisher,
            outbox=outbox_for(settings),
        )
        assert result.status == "committed" and result.rows_written == ROWS
        for directory in result.new_directories:  # back to the state before the vacuum
            location.fs.delete_dir(location.child(directory))

    reference = _reference(location)
    reference(), vacuum()  # warm-up
    best = [float("inf"), float("inf")]
    for _ in range(RUNS):
        for index, work in enumerate((reference, vacuum)):
            started = time.perf_counter()
            work()
            best[index] = min(best[index], time.perf_counter() - started)
    print(
        f"\n[bench] vacuum on {storage_name}: {DELTAS} deltas, {ROWS} rows, {input_bytes / MB:.1f} MB: vacuum "
        f"{best[1]:.2f} s ({input_bytes / MB / best[1]:.1f} MB/s), single-process pyarrow read+write "
        f"{best[0]:.2f} s ({input_bytes / MB / best[0]:.1f} MB/s): ratio {best[0] / best[1]:.2f} of the reference"
    )
    assert best[0] / best[1] > 0.1  # a generous floor; the ratio is reported
