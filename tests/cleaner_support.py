"""Helpers for the cleaner's integration, end-to-end and benchmark tests on the real stack.

They stand in for the producers, on purpose: a table is created in the real metastore with its
location in a test directory, committed transactions give the delta ids (Hive 2 names deltas by
transaction id), real ACID ORC files are written with ``shared/acid``'s writer, a "vacuum" writes its
new directory under a temporary name and renames it, snapshots the real locks and publishes
``VacuumCommitted``. Readers take real SHARED_READ locks in real transactions.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
from confluent_kafka import Consumer, TopicPartition

from acidclean.consumers.audit import waiting_delays
from acidclean.consumers.cleaner_process import CleanerOptions, CleanerProcess
from acidclean.schemas.common import LockSnapshotEntry
from acidclean.schemas.events import (
    CleanupDone,
    CleanupRejected,
    CleanupStarted,
    DelayedVacuums,
    DelayEnvelope,
    Event,
    VacuumCommitted,
)
from acidclean.shared.acid.id_lists import MetastoreKind
from acidclean.shared.acid.names import delta_name
from acidclean.shared.acid.write_ids import ValidTxnList
from acidclean.shared.bus.bundle import is_bundle, unpack
from acidclean.shared.bus.codec import decode
from acidclean.shared.bus.producer import KafkaEventBus
from acidclean.shared.bus.records import RawRecord, raw_record
from acidclean.shared.bus.topics import ensure_topics
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.lock_entries import snapshot_entry
from acidclean.shared.metastore import LockRequestComponent
from acidclean.shared.orc.writer import insert_events, write_bucket_file
from acidclean.shared.settings import Settings, load_settings
from acidclean.shared.storage import open_location
from acidclean.shared.vacuum_marker import VACUUM_MARKER, VacuumMarker

TENANT = "acme"
OTHER_TENANT = "globex"
DB = "cleaner_it"
ROWS = pa.table({"id": pa.array([1, 2], pa.int32()), "v": pa.array(["a", "b"])})


def cleaner_settings(
    kafka_bootstrap: str,
    metastore_uri: str,
    root: Path,
    prefix: str,
    *,
    interval_ms: int = 300,
    threads: int = 2,
    tenant: str = TENANT,
    max_wait_s: float = 3600.0,
    partitions: int = 2,
    bundle_min: int = 8,
    bundle_spread_ms: int = 10,
) -> Settings:
    """Settings for one test: its own topics (prefix), group, and allowed roots under ``root``."""
    return load_settings(
        environ={},
        overrides={
            "kafka": {"bootstrap.servers": kafka_bootstrap},
            "metastore_uris": metastore_uri,
            "topic_prefix": f"{prefix}.",
            "topic_partitions": partitions,
            "group_id": f"{prefix}-cleaner",
            "tenant": tenant,
            "allowed_roots": {TENANT: [str(root / TENANT)], OTHER_TENANT: [str(root / OTHER_TENANT)]},
            "cleanup_interval_ms": interval_ms,
            "cleanup_threads": threads,
            "max_wait_s": max_wait_s,
            "metastore_timeout_s": 3.0,
            "cleanup_bundle_min": bundle_min,
            "cleanup_bundle_spread_ms": bundle_spread_ms,
        },
    )


def settings_environment(settings: Settings) -> dict[str, str]:
    """The same settings as ACIDCLEAN_* variables, for a cleaner run as a subprocess."""
    import json

    return {
        "ACIDCLEAN_KAFKA_BOOTSTRAP": settings.bootstrap_servers,
        "ACIDCLEAN_METASTORE_URIS": settings.metastore_uris,
        "ACIDCLEAN_TOPIC_PREFIX": settings.topic_prefix,
        "ACIDCLEAN_TOPIC_PARTITIONS": str(settings.topic_partitions),
        "ACIDCLEAN_GROUP_ID": settings.group_id,
        "ACIDCLEAN_TENANT": settings.tenant,
        "ACIDCLEAN_ALLOWED_ROOTS": json.dumps(settings.allowed_roots),
        "ACIDCLEAN_CLEANUP_INTERVAL_MS": str(settings.cleanup_interval_ms),
        "ACIDCLEAN_CLEANUP_THREADS": str(settings.cleanup_threads),
        "ACIDCLEAN_CLEANUP_BUNDLE_MIN": str(settings.cleanup_bundle_min),
        "ACIDCLEAN_CLEANUP_BUNDLE_SPREAD_MS": str(settings.cleanup_bundle_spread_ms),
        "ACIDCLEAN_MAX_WAIT_S": str(settings.max_wait_s),
        "ACIDCLEAN_METASTORE_TIMEOUT_S": str(settings.metastore_timeout_s),
    }


# -- tables and vacuums ------------------------------------------------------------------------------


@dataclass
class Table:
    """A transactional table (or one partition of it) whose directory the test controls."""

    metastore: HiveMetastore
    db: str
    name: str
    location: Path
    partition: str | None = None
    write_ids: list[int] = field(default_factory=list)
    tenant: str = TENANT

    @property
    def full_name(self) -> str:
        return f"{self.db}.{self.name}"

    @property
    def location_uri(self) -> str:
        return "file:" + str(self.location)

    def children(self) -> list[str]:
        return sorted(os.listdir(self.location)) if self.location.exists() else []

    def _directory(self, name: str) -> tuple[pafs.FileSystem, str]:
        """The file system and path of the table's child directory ``name``."""
        return pafs.LocalFileSystem(), str(self.location / name)

    def commit_deltas(self, count: int) -> list[str]:
        """``count`` committed transactions, each writing one delta with two rows."""
        names = []
        for _ in range(count):
            txn = self.metastore.open_txn()
            write_id = self.metastore.allocate_write_id(txn, self.db, self.name)
            name = delta_name(write_id, write_id, 0)
            write_bucket_file(*self._directory(name), 0, insert_events(ROWS, write_id))
            self.metastore.commit_txn(txn)
            self.write_ids.append(write_id)
            names.append(name)
        return names

    def write_compacted(self, new_name: str, write_ids: list[int], marker: VacuumMarker | None = None) -> None:
        """The vacuum's output, written under a temporary name with the vacuum's marker and renamed
        into place (atomic)."""
        fs, temporary = self._directory(f"_tmp_{new_name}")
        self._write_compacted_files(fs, temporary, write_ids, marker)
        os.rename(temporary, self.location / new_name)

    @staticmethod
    def _write_compacted_files(
        fs: pafs.FileSystem, directory: str, write_ids: list[int], marker: VacuumMarker | None
    ) -> None:
        rows = pa.concat_tables([ROWS] * len(write_ids))
        original = pa.array([w for w in write_ids for _ in range(ROWS.num_rows)], pa.int64())
        write_bucket_file(fs, directory, 0, insert_events(rows, max(write_ids), original_write_ids=original))
        if marker is not None:
            with fs.open_output_stream(f"{directory}/{VACUUM_MARKER}") as out:
                out.write(marker.to_bytes())

    def lock_snapshot(self) -> list[LockSnapshotEntry]:
        """The locks the metastore lists on the table now (what the vacuum records)."""
        return [snapshot_entry(lock) for lock in self.metastore.show_locks(self.db, self.name)]

    def minor_vacuum(self, obsolete: list[str] | None = None, **changes: Any) -> VacuumCommitted:
        """Compact every delta written so far into one delta; returns the event to publish."""
        low, high = min(self.write_ids), max(self.write_ids)
        new = delta_name(low, high)
        singles = [delta_name(w, w, 0) for w in self.write_ids]
        event_id = uuid.uuid4()
        job = f"test-{uuid.uuid4().hex[:8]}"
        marker = VacuumMarker(str(event_id), job, self.full_name, self.partition, high)
        self.write_compacted(new, self.write_ids, marker)
        snapshot = self.lock_snapshot()
        fields: dict[str, Any] = dict(
            event_id=event_id,
            tenant=self.tenant,
            table=self.full_name,
            partition=self.partition,
            occurred_at=datetime.now(timezone.utc),
            location=self.location_uri,
            compaction_type="MINOR",
            new_directories=[new],
            obsolete_directories=singles if obsolete is None else obsolete,
            highest_write_id=high,
            lock_snapshot=snapshot,
            locks_observed=len(snapshot),
            next_txn_id=ValidTxnList.from_string(self.metastore.valid_txn_list()).high_watermark + 1,
            vacuum_job_id=job,
        )
        fields.update(changes)
        return VacuumCommitted(**fields)


@dataclass
class UriTable(Table):
    """A :class:`Table` on any storage (``uri``: ``hdfs://``, ``s3a://``...). Its compacted directory
    is written in place: a test fixture, no reader lists it meanwhile."""

    uri: str = ""

    @property
    def location_uri(self) -> str:
        return self.uri

    def children(self) -> list[str]:
        storage = open_location(self.uri)
        if not storage.fs.exists(storage.path):
            return []
        return sorted(entry.name for entry in storage.fs.list_dir(storage.path))

    def _directory(self, name: str) -> tuple[pafs.FileSystem, str]:
        storage = open_location(self.uri)
        return storage.fs.arrow, storage.child(name)

    def write_compacted(self, new_name: str, write_ids: list[int], marker: VacuumMarker | None = None) -> None:
        self._write_compacted_files(*self._directory(new_name), write_ids, marker)


def create_uri_table(metastore: HiveMetastore, database_uri: str, name: str, *, db: str = DB) -> UriTable:
    """A transactional table at ``database_uri/name`` on any storage the metastore reaches."""
    metastore.create_database(db, database_uri)
    uri = f"{database_uri.rstrip('/')}/{name}"
    metastore.create_transactional_table(db, name, [("id", "int"), ("v", "string")], buckets=1, location=uri)
    return UriTable(metastore, db, name, Path("/nonexistent"), uri=uri)


def create_table(
    metastore: HiveMetastore,
    root: Path,
    name: str,
    *,
    partition: str | None = None,
    tenant: str = TENANT,
    db: str = DB,
) -> Table:
    """A transactional table with its location under ``root/tenant``; optionally one partition."""
    metastore.create_database(db)
    location = root / tenant / f"{db}.db" / name
    location.mkdir(parents=True, exist_ok=True)
    metastore.create_transactional_table(
        db,
        name,
        [("id", "int"), ("v", "string")],
        buckets=1,
        location="file:" + str(location),
        partition_keys=[("ds", "string")] if partition else (),
    )
    if partition:
        uri = metastore.add_partition(db, name, partition)
        location = Path(uri.removeprefix("file:"))
        location.mkdir(parents=True, exist_ok=True)
    return Table(metastore, db, name, location, partition, tenant=tenant)


@dataclass
class Reader:
    """A query holding a SHARED_READ lock inside a transaction, as Hive's readers do."""

    metastore: HiveMetastore
    txn_id: int
    lock_id: int

    def release(self) -> None:
        self.metastore.commit_txn(self.txn_id)


def start_reader(metastore: HiveMetastore, table: Table, *, partition_level: bool = False) -> Reader:
    txn = metastore.open_txn()
    component = LockRequestComponent(table.db, table.name, table.partition if partition_level else None)
    result = metastore.lock([component], txn_id=txn)
    assert result.acquired, result
    return Reader(metastore, txn, result.lock_id)


# -- Kafka -----------------------------------------------------------------------------------------


def publish(settings: Settings, *events: Any) -> None:
    """Publish events to the topics they belong on (acknowledged before returning)."""
    with KafkaEventBus(settings.kafka) as bus:
        bus.publish_many(
            [
                (settings.topic("cleanup_delay" if isinstance(event, DelayEnvelope) else "vacuum_committed"), event)
                for event in events
            ]
        )


@dataclass(frozen=True)
class _Alone:
    """A record that is not a bundle, read as a bundle of itself."""

    record: RawRecord

    @property
    def members(self) -> tuple[RawRecord, ...]:
        return (self.record,)


class Watcher:
    """Reads the cleaner's output topics from the beginning in a background thread."""

    def __init__(self, settings: Settings, fetch_wait_ms: int = 10) -> None:
        """``fetch_wait_ms``: how long the broker may hold an empty fetch. 10 ms sees records at once,
        at a cost: over the 12 partitions of a benchmark's topics the broker used 0.17-0.2 of the box's
        2 cores answering it while nothing was written (2026-11-29)."""
        ensure_topics(settings, ("vacuum_committed", "cleanup_delay", "cleanup_done", "dead_letter"))
        self.settings = settings
        self.events: list[tuple[str, Event, float]] = []
        self._stop = threading.Event()
        self._consumer = Consumer(
            {
                "bootstrap.servers": settings.bootstrap_servers,
                "group.id": f"watch-{uuid.uuid4().hex}",
                "enable.auto.commit": "false",
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": str(fetch_wait_ms),
            }
        )
        self._topics = {settings.topic(name): name for name in ("cleanup_delay", "cleanup_done", "dead_letter")}
        metadata = self._consumer.list_topics(timeout=10)
        self._assignment = [
            TopicPartition(topic, p, 0) for topic in self._topics for p in metadata.topics[topic].partitions
        ]
        self._consumer.assign(self._assignment)
        self._read_to: dict[tuple[str, int], int] = {}  # next offset to read, per partition
        self.bundles: list[RawRecord] = []  # the bundle records read (their members are in events)
        # The done topic's CleanupDone events by their vacuum's event id, in the order read: ``done`` is a
        # lookup, so a benchmark waiting on thousands of vacuums does not scan every event for each.
        self._done_by_vacuum: dict[uuid.UUID, list[CleanupDone]] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for message in self._consumer.consume(100, 0.05):
                if message.error():
                    continue
                record = raw_record(message)
                bundle = unpack(record) if is_bundle(record.headers) else None
                if bundle is not None:
                    self.bundles.append(record)
                # A bundle's members are read as if each had been published alone.
                members = (bundle or _Alone(record)).members
                events = [decode(item, rejected_by="watcher", tenant=TENANT) for item in members]
                kind = self._topics[message.topic()]
                with self._lock:
                    self.events.extend((kind, event, time.time()) for event in events)
                    for event in events:
                        if kind == "cleanup_done" and isinstance(event, CleanupDone):
                            self._done_by_vacuum.setdefault(event.correlation_id, []).append(event)
                    self._read_to[(message.topic(), message.partition())] = message.offset() + 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._consumer.close()

    def records(self, kind: str) -> list[Any]:
        """Every event read from one topic, as it was on the topic (a DelayedVacuums stays one)."""
        with self._lock:
            return [event for topic, event, _ in self.events if topic == kind]

    def of(self, kind: str, vacuum: VacuumCommitted | None = None) -> list[Any]:
        with self._lock:
            found = [event for topic, event, _ in self.events if topic == kind]
        # A DelayedVacuums parks several vacuums of one table: each shows as its own delay envelope.
        found = [
            item
            for event in found
            for item in (waiting_delays(event) if isinstance(event, DelayedVacuums) else [event])
        ]
        if vacuum is not None:
            found = [event for event in found if getattr(event, "correlation_id", None) == vacuum.event_id]
        return found

    def done(self, vacuum: VacuumCommitted) -> list[CleanupDone]:
        with self._lock:
            return list(self._done_by_vacuum.get(vacuum.event_id, ()))

    def started(self, vacuum: VacuumCommitted) -> list[CleanupStarted]:
        """The CleanupStarted announcements (on the done topic) of ``vacuum``."""
        return [event for event in self.of("cleanup_done", vacuum) if isinstance(event, CleanupStarted)]

    def delays(self, vacuum: VacuumCommitted) -> list[DelayEnvelope]:
        return self.of("cleanup_delay", vacuum)

    def rejected(self, vacuum: VacuumCommitted) -> list[CleanupRejected]:
        return self.of("dead_letter", vacuum)

    def arrival(self, event_id: uuid.UUID) -> float | None:
        with self._lock:
            return next((at for _, event, at in self.events if getattr(event, "event_id", None) == event_id), None)

    def catch_up(self, timeout_s: float = 30.0) -> None:
        """Wait until every record now on the watched topics has been read (the thread reads behind
        the broker: a test that checks right after a process died must not see a partial log). The
        ends are asked of a second client: the watcher's own is busy in its thread."""
        probe = Consumer(
            {"bootstrap.servers": self.settings.bootstrap_servers, "group.id": f"probe-{uuid.uuid4().hex}"}
        )
        try:
            ends = {
                (tp.topic, tp.partition): probe.get_watermark_offsets(tp, timeout=10, cached=False)[1]
                for tp in self._assignment
            }
        finally:
            probe.close()

        def read_to_end() -> bool:
            with self._lock:
                return all(self._read_to.get(where, 0) >= end for where, end in ends.items())

        self.wait_for(read_to_end, timeout_s, "the watcher to read what the topics hold")

    def wait_for(self, condition: Callable[[], Any], timeout_s: float = 30.0, what: str = "condition") -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = condition()
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


# -- running a cleaner -------------------------------------------------------------------------------


@contextmanager
def running_cleaner(
    settings: Settings, options: CleanerOptions | None = None, **kwargs: Any
) -> Iterator[CleanerProcess]:
    """A cleaner in a background thread of this process, stopped (gracefully) on exit."""
    cleaner = CleanerProcess(settings, options or CleanerOptions(cleaner_id=f"it-{uuid.uuid4().hex[:6]}"), **kwargs)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            cleaner.run()
        except BaseException as error:  # surfaced to the test below
            errors.append(error)

    thread = threading.Thread(target=run, name="cleaner", daemon=True)
    thread.start()
    try:
        yield cleaner
    finally:
        cleaner.stop()
        thread.join(60)
        assert not thread.is_alive(), "the cleaner did not stop within 60 s"
        if errors:
            raise errors[0]


@dataclass
class CleanerSubprocess:
    """A cleaner run as ``acidclean cleaner`` in a subprocess (stopped by its pid)."""

    process: subprocess.Popen[bytes]
    log_file: Path

    def stop(self, timeout_s: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait(10)

    def log(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""


def start_cleaner_process(
    settings: Settings,
    log_file: Path,
    *,
    crash_at: str | None = None,
    cleaner_id: str = "e2e",
    extra_env: dict[str, str] | None = None,
    args: tuple[str, ...] = (),
) -> CleanerSubprocess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACIDCLEAN_")}
    env.update(settings_environment(settings))
    env.update(extra_env or {})
    if crash_at:
        env["ACIDCLEAN_CRASH_AT"] = crash_at
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from acidclean.cli import main; main()",
                "cleaner",
                "--cleaner-id",
                cleaner_id,
                *args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    return CleanerSubprocess(process, log_file)


def metastore_kind(metastore: HiveMetastore) -> MetastoreKind:
    return metastore.kind


class CountingMetastore:
    """Real metastore clients that count the calls the cleaner makes."""

    def __init__(self, uris: str) -> None:
        self.uris = uris
        self.calls: Counter[str] = Counter()

    def client(self) -> Any:
        counter = self.calls
        real = HiveMetastore(self.uris, 3.0)

        class Counting:
            kind = property(lambda _self: real.kind)

            def __getattr__(self, name: str) -> Any:
                attribute = getattr(real, name)
                if callable(attribute):

                    def call(*args: Any, **kwargs: Any) -> Any:
                        counter[name] += 1
                        return attribute(*args, **kwargs)

                    return call
                return attribute

        return Counting()
