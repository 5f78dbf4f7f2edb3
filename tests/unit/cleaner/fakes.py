"""In-memory fakes of the cleaner's protocols: metastore, file system, consumer, clock, executor."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

# The project's shared event factories (tests/unit/events); T0 and lock are re-exported for the tests here.
from events.factories import T0 as T0
from events.factories import lock as lock
from events.factories import vacuum as factory_vacuum

from acidclean.consumers.handler import CleanupHandler
from acidclean.consumers.lock_views import LockView
from acidclean.consumers.loop import CleanerLoop, LoopConfig
from acidclean.consumers.metrics import CleanerMetrics
from acidclean.consumers.rules.paths import TenantRoots
from acidclean.consumers.table_check import TableLockCheck
from acidclean.consumers.work import CleanerTopics, HandlerConfig, Outcome, Work
from acidclean.schemas.common import EventBase
from acidclean.schemas.events import CleanupDone, CleanupStarted, DelayedVacuums, DelayEnvelope, Event, VacuumCommitted
from acidclean.shared.acid.id_lists import MetastoreKind
from acidclean.shared.bus.bundle import MAX_BUNDLE_RECORDS
from acidclean.shared.bus.codec import decode, encode
from acidclean.shared.bus.memory import InMemoryBus
from acidclean.shared.bus.records import RawRecord
from acidclean.shared.errors import MetastoreError, TableNotFoundError
from acidclean.shared.metastore import LockInfo, TableInfo
from acidclean.shared.storage import Entry, ListedFile, StorageError, TreeSize
from acidclean.shared.vacuum_marker import VACUUM_MARKER, VacuumMarker

LONG_MAX = 9223372036854775807
TOPICS = CleanerTopics("acid.vacuum.committed", "acid.cleanup.delay", "acid.cleanup.done", "acid.cleanup.dead-letter")


class FakeClock:
    """A clock tests move by hand; both the datetime and the epoch-millisecond views."""

    def __init__(self, start: datetime = T0) -> None:
        self.current = start

    def now(self) -> datetime:
        return self.current

    def now_ms(self) -> int:
        return int(self.current.timestamp() * 1000)

    def advance(self, seconds: float) -> None:
        self.current += timedelta(seconds=seconds)


# -- storage ------------------------------------------------------------------------------------------


class FakeFileSystem:
    """Directories, files (with sizes) and symbolic links as sets of absolute paths."""

    def __init__(self) -> None:
        self.dirs: set[str] = {"/"}
        self.files: dict[str, int] = {}
        self.contents: dict[str, bytes] = {}
        self.links: dict[str, str] = {}  # link path -> target
        self.deleted: list[str] = []
        self.fail_delete: set[str] = set()
        self.listings = 0
        self.born: dict[str, int] = {}  # file -> when it was written: its identity (an inode)
        self.writes = 0
        self.file_listings = 0

    def add_dir(self, path: str, files: dict[str, int] | None = None) -> None:
        parts = path.strip("/").split("/")
        for index in range(1, len(parts) + 1):
            self.dirs.add("/" + "/".join(parts[:index]))
        for name, size in (files or {}).items():
            self.put_file(f"{path}/{name}", size)

    def put_file(self, path: str, size: int) -> None:
        """Write ``path`` (again): a new file, with a new identity, whatever was there before."""
        self.add_dir(path.rsplit("/", 1)[0])
        self.files[path] = size
        self.writes += 1
        self.born[path] = self.writes

    def add_acid_dirs(self, location: str, names: Iterable[str], bucket_bytes: int = 100) -> None:
        for name in names:
            self.add_dir(f"{location}/{name}", {"bucket_00000": bucket_bytes, "_orc_acid_version": 1})

    def children(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        names = {p[len(prefix) :].split("/")[0] for p in (*self.dirs, *self.files, *self.links) if p.startswith(prefix)}
        return sorted(names)

    def list_dir(self, path: str) -> list[Entry]:
        self.listings += 1
        if path not in self.dirs:
            raise StorageError(f"directory {path} does not exist")
        entries = []
        for name in self.children(path):
            full = f"{path.rstrip('/')}/{name}"
            if full in self.links:
                entries.append(Entry(name, True, 0, True))
            elif full in self.dirs:
                entries.append(Entry(name, True, 0))
            else:
                entries.append(Entry(name, False, self.files[full]))
        return entries

    def exists(self, path: str) -> bool:
        return path in self.dirs or path in self.files or path in self.links

    def tree_size(self, path: str) -> TreeSize:
        target = self.links.get(path, path)
        files = {p: s for p, s in self.files.items() if p.startswith(target.rstrip("/") + "/")}
        return TreeSize(len(files), sum(files.values()))

    def delete_dir(self, path: str) -> None:
        if path in self.fail_delete:
            raise StorageError(f"cannot delete {path}: permission denied")
        self.deleted.append(path)
        target = self.links.get(path, path)  # a real delete through a link would empty the target
        prefix = target.rstrip("/") + "/"
        self.dirs = {d for d in self.dirs if d != target and not d.startswith(prefix)}
        self.files = {f: s for f, s in self.files.items() if not f.startswith(prefix)}
        self.links.pop(path, None)

    def rename(self, source: str, target: str) -> None:
        raise NotImplementedError

    def make_dirs(self, path: str) -> None:
        self.add_dir(path)

    def read_file(self, path: str) -> bytes | None:
        if path not in self.files:
            return None
        return self.contents.get(path, b"")

    def write_file(self, path: str, data: bytes) -> None:
        self.put_file(path, len(data))
        self.contents[path] = data

    def list_files(self, path: str) -> list[ListedFile]:
        self.file_listings += 1
        if path in self.links:
            raise StorageError(f"{path} is a symbolic link")
        prefix = path.rstrip("/") + "/"
        return [
            ListedFile(name[len(prefix) :], size, f"born={self.born.get(name, 0)}")
            for name, size in sorted(self.files.items())
            if name.startswith(prefix)
        ]

    def delete_files(self, path: str, names: list[str]) -> None:
        if path in self.fail_delete:
            raise StorageError(f"cannot delete {path}: permission denied")
        for name in names:
            self.files.pop(f"{path.rstrip('/')}/{name}", None)

    def delete_empty_dir(self, path: str) -> bool:
        if path in self.fail_delete:
            raise StorageError(f"cannot delete {path}: permission denied")
        prefix = path.rstrip("/") + "/"
        if any(name.startswith(prefix) for name in self.files):
            return False
        self.deleted.append(path)
        self.dirs = {d for d in self.dirs if d != path and not d.startswith(prefix)}
        return True

    def mark_vacuum_output(self, event: VacuumCommitted) -> None:
        """Write the marker the vacuum of ``event`` leaves in each of its new directories that exists."""
        location = event.location.removeprefix("file://").removeprefix("file:")
        marker = VacuumMarker(
            str(event.event_id),
            event.vacuum_job_id,
            event.table,
            event.partition,
            event.highest_write_id,
            written_at=event.occurred_at.isoformat(),  # just before the rename, as the vacuum writes it
        )
        for name in event.new_directories:
            directory = f"{location.rstrip('/')}/{name}"
            if directory in self.dirs:
                self.write_file(f"{directory}/{VACUUM_MARKER}", marker.to_bytes())

    def real_path(self, path: str) -> str:
        for link, target in self.links.items():
            if path == link or path.startswith(link + "/"):
                return target + path[len(link) :]
        return path


@dataclass
class FakeLocation:
    fs: FakeFileSystem
    path: str

    def child(self, name: str) -> str:
        return f"{self.path.rstrip('/')}/{name}"


def opener(fs: FakeFileSystem) -> Callable[[str], FakeLocation]:
    def open_storage(uri: str) -> FakeLocation:
        path = uri.removeprefix("file://").removeprefix("file:")
        return FakeLocation(fs, path)

    return open_storage


# -- metastore ----------------------------------------------------------------------------------------


class FakeMetastore:
    """Tables with locations, a lock list and a valid id list; ``down`` makes every call fail."""

    def __init__(self, kind: MetastoreKind = MetastoreKind.HIVE2) -> None:
        self._kind = kind
        self.tables: dict[tuple[str, str, str | None], str] = {}
        self.locks: list[LockInfo] = []
        self.high_watermark = 100
        self.open_ids: list[int] = []
        self.aborted_ids: list[int] = []
        self.txn_high_watermark = 100
        self.open_txns: list[int] = []
        self.aborted_txns: list[int] = []
        self.down = False
        self.calls: Counter[str] = Counter()
        self.created: dict[tuple[str, str], int] = {}  # each table's create time (its identity on Hive 2 and 3)

    @property
    def kind(self) -> MetastoreKind:
        return self._kind

    def add_table(self, table: str, location: str, partition: str | None = None) -> None:
        db, name = table.split(".")
        self.tables[(db, name, partition)] = location
        self.created.setdefault((db, name), 1_700_000_000)

    def recreate_table(self, table: str) -> None:
        """The table dropped and created again under its name and location: a later create time."""
        db, name = table.split(".")
        self.created[(db, name)] += 1

    def take_lock(
        self,
        lock_id: int,
        table: str,
        partition: str | None = None,
        state: str = "ACQUIRED",
        acquired_at: datetime = T0 - timedelta(minutes=1),
    ) -> LockInfo:
        """A reader's SHARED_READ lock; by default acquired a minute before the factories' vacuums."""
        db, name = table.split(".")
        acquired_ms = int(acquired_at.timestamp() * 1000) if state == "ACQUIRED" else None
        info = LockInfo(lock_id, 3, db, name, partition, "SHARED_READ", state, "alice", "reader-1", acquired_ms, 1)
        self.locks.append(info)
        return info

    def release(self, lock_id: int) -> None:
        self.locks = [lock for lock in self.locks if lock.lock_id != lock_id]

    def _call(self, name: str) -> None:
        self.calls[name] += 1
        if self.down:
            raise MetastoreError(f"cannot reach the Hive Metastore ({name})")

    def get_table(self, db: str, table: str, partition: str | None = None) -> TableInfo:
        self._call("get_table")
        location = self.tables.get((db, table, partition))
        if location is None:
            raise TableNotFoundError(f"get_table({db}.{table}): not found")
        created = self.created.get((db, table))
        return TableInfo(db, table, location, {"transactional": "true"}, (), (), 1, (), partition, create_time=created)

    def get_tables(self, db: str, tables: Sequence[str]) -> dict[str, TableInfo]:
        self._call("get_tables")
        known = {(table_db, name): location for (table_db, name, partition), location in self.tables.items()}
        return {
            table: TableInfo(
                db,
                table,
                location,
                {"transactional": "true"},
                self.partition_keys(db, table),
                (),
                1,
                (),
                None,
                create_time=self.created.get((db, table)),
            )
            for table in tables
            if (location := self.tables.get((db, table, None), known.get((db, table)))) is not None
        }

    def get_all_tables(self, db: str) -> list[str]:
        self._call("get_all_tables")
        return sorted({name for (table_db, name, _) in self.tables if table_db == db})

    def partition_keys(self, db: str, table: str) -> tuple[str, ...]:
        """The keys of the table's first registered partition, or none: an unpartitioned table."""
        for table_db, name, partition in sorted(self.tables, key=lambda key: (key[0], key[1], key[2] or "")):
            if (table_db, name) == (db, table) and partition is not None:
                return tuple(pair.split("=")[0] for pair in partition.split("/"))
        return ()

    def partition_locations(self, table: TableInfo, count: bool = True) -> dict[str, str]:
        if count:
            self._call("get_partitions")
        return {
            partition: location
            for (table_db, name, partition), location in self.tables.items()
            if (table_db, name) == (table.db, table.table) and partition is not None
        }

    def partitions_located(self, table: TableInfo, names: Sequence[str]) -> dict[str, str]:
        self._call("get_partitions_by_names")
        return {name: where for name, where in self.partition_locations(table, count=False).items() if name in names}

    def partition_info(self, table: TableInfo, partition: str | None) -> TableInfo:
        if partition is None:
            return table
        self._call("get_partition")
        location = self.tables.get((table.db, table.table, partition))
        if location is None:
            raise TableNotFoundError(f"get_partition({table.db}.{table.table}, {partition}): not found")
        created = table.create_time
        return TableInfo(
            table.db, table.table, location, dict(table.parameters), (), (), 1, (), partition, create_time=created
        )

    def valid_write_ids_of(self, tables: Sequence[tuple[str, str]], txn_list: str) -> list[str]:
        """As the real client: the transaction list itself on Hive 2 (no call), one call on Hive 3."""
        if self._kind is MetastoreKind.HIVE2:
            return [f"{db}.{table}:{txn_list}" for db, table in tables]
        self._call("valid_write_ids")
        return [self._write_ids_text(db, table) for db, table in tables]

    def valid_write_ids(self, db: str, table: str) -> str:
        self._call("valid_write_ids")
        return self._write_ids_text(db, table)

    def _write_ids_text(self, db: str, table: str) -> str:
        min_open = min(self.open_ids) if self.open_ids else LONG_MAX
        return (
            f"{db}.{table}:{self.high_watermark}:{min_open}:{','.join(map(str, self.open_ids))}:"
            f"{','.join(map(str, self.aborted_ids))}"
        )

    def valid_txn_list(self) -> str:
        """Open and aborted transactions: on Hive 2 the same ids as the write id list."""
        self._call("valid_txn_list")
        if self._kind is MetastoreKind.HIVE2:
            open_txns, aborted, hwm = self.open_ids, self.aborted_ids, self.high_watermark
        else:
            open_txns, aborted, hwm = self.open_txns, self.aborted_txns, self.txn_high_watermark
        min_open = min(open_txns) if open_txns else LONG_MAX
        return f"{hwm}:{min_open}:{','.join(map(str, open_txns))}:{','.join(map(str, aborted))}"

    def show_locks(
        self, db: str | None = None, table: str | None = None, partition: str | None = None
    ) -> list[LockInfo]:
        self._call("show_locks")
        return [
            lock
            for lock in self.locks
            if (db is None or lock.db == db)
            and (table is None or lock.table == table)
            and (partition is None or lock.partition == partition)
        ]


def refuse_batch_lookups(db: str, tables: Sequence[str]) -> dict[str, TableInfo]:
    """A ``get_tables`` that fails: the cleaner then asks for each table on its own."""
    raise MetastoreError("metastore refused get_table_objects_by_name: simulated")


# -- the handler rig ----------------------------------------------------------------------------------


def record_of(event: EventBase, topic: str = TOPICS.vacuum_committed, partition: int = 0, offset: int = 0) -> RawRecord:
    out = encode(event)
    return RawRecord(topic, partition, offset, out.key, out.value, tuple(out.headers))


@dataclass
class Rig:
    """A handler over fakes, with the bus, file system and metastore exposed to the test."""

    fs: FakeFileSystem = field(default_factory=FakeFileSystem)
    metastore: FakeMetastore = field(default_factory=FakeMetastore)
    bus: InMemoryBus = field(default_factory=InMemoryBus)
    clock: FakeClock = field(default_factory=FakeClock)
    metrics: CleanerMetrics = field(default_factory=CleanerMetrics)
    tenant: str = "acme"
    roots: dict[str, list[str]] = field(
        default_factory=lambda: {"acme": ["/warehouse"], "globex": ["/warehouse/globex", "/globex"]}
    )
    dry_run: bool = False
    interval_ms: int = 2000
    max_wait_s: float = 3600.0
    # Write each handled vacuum's marker into its new directories that exist, as its vacuum would
    # have; the tests of forged events turn it off.
    mark_vacuum_output: bool = True
    bundle_min: int = 8  # HandlerConfig.bundle_min: waiting tables of one partition a bundle needs
    bundle_compressed: bool = True  # HandlerConfig.bundle_compressed
    bundle_max: int = MAX_BUNDLE_RECORDS  # HandlerConfig.bundle_max

    def __post_init__(self) -> None:
        self.handler = CleanupHandler(
            HandlerConfig(
                tenant=self.tenant,
                cleaner_id="cleaner-test",
                interval_ms=self.interval_ms,
                max_wait_s=self.max_wait_s,
                topics=TOPICS,
                dry_run=self.dry_run,
                lock_retry_wait_s=0.0,  # retries at once: the histories replay many outages a second
                bundle_min=self.bundle_min,
                bundle_compressed=self.bundle_compressed,
                bundle_max=self.bundle_max,
            ),
            metastore=lambda: self.metastore,
            bus=lambda: self.bus,
            open_storage=opener(self.fs),
            roots=TenantRoots.build(self.tenant, self.roots, self.fs.real_path),
            metrics=self.metrics,
            clock=self.clock,
        )

    def work(self, event: Any, offset: int = 0) -> Work:
        topic = TOPICS.cleanup_delay if event.event_type == "acidclean.cleanup.delayed" else TOPICS.vacuum_committed
        return Work(record_of(event, topic, 0, offset), event)

    def handle(self, event: Any, locks: TableLockCheck | None = None) -> Outcome:
        """Handle one event as a group of one: its delay envelope is flushed before returning."""
        work = self.work(event)
        if self.mark_vacuum_output:
            vacuum = event.vacuum if isinstance(event, DelayEnvelope) else event
            if isinstance(vacuum, VacuumCommitted):
                self.fs.mark_vacuum_output(vacuum)
        group = locks or self.handler.lock_check(work)
        outcome = self.handler.handle(work, group)
        self.handler.flush_delays(group)
        return outcome

    def published(self, topic: str) -> list[Event]:
        return self.bus.events(topic)

    def dones(self) -> list[CleanupDone]:
        return [event for event in self.published(TOPICS.cleanup_done) if isinstance(event, CleanupDone)]

    def starts(self) -> list[CleanupStarted]:
        return [event for event in self.published(TOPICS.cleanup_done) if isinstance(event, CleanupStarted)]

    def deleted_names(self) -> list[str]:
        return sorted(path.rsplit("/", 1)[1] for path in self.fs.deleted)


# -- consumer -----------------------------------------------------------------------------------------


class FakeErrorMessage:
    """What librdkafka's consume() returns for a client or group error (a failed join, say)."""

    def __init__(self, error: KafkaError) -> None:
        self._error = error

    def error(self) -> KafkaError:
        return self._error


class FakeMessage:
    def __init__(self, record: RawRecord) -> None:
        self.record = record

    def topic(self) -> str:
        return self.record.topic

    def partition(self) -> int:
        return self.record.partition

    def offset(self) -> int:
        return self.record.offset

    def key(self) -> bytes | None:
        return self.record.key

    def value(self) -> bytes | None:
        return self.record.value

    def headers(self) -> list[tuple[str, bytes | None]]:
        return list(self.record.headers)

    def timestamp(self) -> tuple[int, int]:
        return (0, 0)

    def error(self) -> None:
        return None


class FakeConsumer:
    """A broker log per partition and librdkafka's consumer semantics that the loop relies on:
    paused partitions deliver nothing, ``seek`` moves the position, ``resume`` fetches from it,
    commits are refused for partitions not assigned."""

    def __init__(self, clock: FakeClock, partitions: int = 2, *, eager: bool = False) -> None:
        self.clock = clock
        self.partitions = partitions
        self.eager = eager  # the classic range assignor: assign() and unassign, not their incremental forms
        self.errors: list[KafkaError] = []  # delivered by the next poll(), before any record
        self.logs: dict[tuple[str, int], list[RawRecord]] = {}
        self.positions: dict[tuple[str, int], int] = {}
        self.committed: dict[tuple[str, int], int] = {}
        self.assigned: set[tuple[str, int]] = set()
        self.paused: set[tuple[str, int]] = set()
        self.callbacks: dict[str, Any] = {}
        self.commit_calls: list[list[tuple[str, int, int]]] = []
        self.pause_calls: list[tuple[str, int]] = []
        self.seeks: list[tuple[str, int, int]] = []
        self.deliveries: Counter[tuple[str, int, int]] = Counter()  # times each record was handed to the loop
        self.closed = False
        self.consume_timeouts: list[float] = []

    def append(self, topic: str, partition: int, event: EventBase) -> RawRecord:
        log = self.logs.setdefault((topic, partition), [])
        out = encode(event)
        record = RawRecord(topic, partition, len(log), out.key, out.value, tuple(out.headers))
        log.append(record)
        return record

    def append_raw(self, topic: str, partition: int, key: bytes | None, value: bytes | None) -> RawRecord:
        log = self.logs.setdefault((topic, partition), [])
        record = RawRecord(topic, partition, len(log), key, value, ())
        log.append(record)
        return record

    # consumer API
    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        self.callbacks = callbacks

    def rebalance_assign(self, partitions: Sequence[tuple[str, int]]) -> None:
        self.callbacks["on_assign"](self, [TopicPartition(t, p) for t, p in partitions])

    def rebalance_revoke(self, partitions: Sequence[tuple[str, int]]) -> None:
        self.callbacks["on_revoke"](self, [TopicPartition(t, p) for t, p in partitions])
        for partition in partitions:
            self.assigned.discard(partition)

    def rebalance_lost(self, partitions: Sequence[tuple[str, int]]) -> None:
        self.callbacks["on_lost"](self, [TopicPartition(t, p) for t, p in partitions])
        for partition in partitions:
            self.assigned.discard(partition)

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        if self.eager:
            raise KafkaException(KafkaError(KafkaError._STATE, "incremental_assign() under the EAGER protocol"))
        self._take(partitions)

    def assign(self, partitions: list[TopicPartition]) -> None:
        if not self.eager:
            raise KafkaException(KafkaError(KafkaError._STATE, "assign() under the COOPERATIVE protocol"))
        assert not self.assigned, "an eager rebalance revokes every partition before it assigns"
        self._take(partitions)

    def _take(self, partitions: list[TopicPartition]) -> None:
        for item in partitions:
            key = (item.topic, item.partition)
            self.assigned.add(key)
            self.positions[key] = self.committed.get(key, 0)

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[FakeMessage]:
        # librdkafka's consume(n, timeout) blocks for the whole timeout unless n records arrive:
        # the loop must wait in poll() and only drain with consume(n, 0).
        assert timeout == 0, "consume() with a timeout would delay records fetched meanwhile; wait with poll()"
        batch: list[FakeMessage] = []
        for key in sorted(self.assigned):
            if key in self.paused:
                continue
            log = self.logs.get(key, [])
            while self.positions[key] < len(log) and len(batch) < num_messages:
                batch.append(FakeMessage(log[self.positions[key]]))
                self.deliveries[(*key, self.positions[key])] += 1
                self.positions[key] += 1
        if not batch:
            self.clock.advance(max(timeout, 0.001))
        return batch

    def poll(self, timeout: float = -1) -> FakeMessage | FakeErrorMessage | None:
        """One record (or error), or None after the timeout (which the fake clock then skips)."""
        self.consume_timeouts.append(timeout)
        if self.errors:
            return FakeErrorMessage(self.errors.pop(0))
        for key in sorted(self.assigned):
            log = self.logs.get(key, [])
            if key not in self.paused and self.positions[key] < len(log):
                self.deliveries[(*key, self.positions[key])] += 1
                self.positions[key] += 1
                return FakeMessage(log[self.positions[key] - 1])
        self.clock.advance(max(timeout, 0.001))
        return None

    def pause(self, partitions: list[TopicPartition]) -> None:
        for item in partitions:
            self.paused.add((item.topic, item.partition))
            self.pause_calls.append((item.topic, item.partition))

    def resume(self, partitions: list[TopicPartition]) -> None:
        for item in partitions:
            self.paused.discard((item.topic, item.partition))

    def seek(self, partition: TopicPartition) -> None:
        key = (partition.topic, partition.partition)
        assert key in self.assigned, "seek on a partition that is not assigned"
        self.positions[key] = partition.offset
        self.seeks.append((partition.topic, partition.partition, partition.offset))

    def commit(self, message: Any = None, offsets: Any = None, asynchronous: bool = True) -> None:
        calls = []
        for item in offsets or []:
            key = (item.topic, item.partition)
            assert key in self.assigned, f"commit for {key}, which this consumer does not own"
            self.committed[key] = item.offset
            calls.append((item.topic, item.partition, item.offset))
        self.commit_calls.append(calls)

    def close(self) -> None:
        self.closed = True


class InlineExecutor(Executor):
    """Runs submitted work at once, on the caller's thread."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:
            future.set_exception(error)
        return future


def decoded(records: Iterable[RawRecord]) -> list[Event]:
    return [decode(record, rejected_by="test", tenant="acme") for record in records]


# -- events -------------------------------------------------------------------------------------------

LOCATION = "/warehouse/sales.db/orders/ds=2025-03-14"


def vacuum(**changes: Any) -> VacuumCommitted:
    """The shared factory's minor vacuum (delta_1_3 over three single deltas on tenant acme's
    sales.orders, partition ds=2025-03-14, reader lock 7), claiming all three singles obsolete."""
    claims = ["delta_0000001_0000001_0000", "delta_0000002_0000002_0000", "delta_0000003_0000003_0000"]
    return factory_vacuum(**{"obsolete_directories": claims, **changes})


def loop_over(rig: Rig, consumer: FakeConsumer, executor: Any = None, **config: Any) -> CleanerLoop:
    """A loop over the vacuum topic's partitions 0 and 1 and the delay topic's 0, assigned and subscribed."""
    vacuum_topic, delay_topic = TOPICS.vacuum_committed, TOPICS.cleanup_delay
    loop = CleanerLoop(
        consumer,
        rig.handler,
        LoopConfig(
            vacuum_topic=vacuum_topic,
            delay_topic=delay_topic,
            tenant="acme",
            cleaner_id="c1",
            interval_ms=2000,
            **config,
        ),
        executor=executor or InlineExecutor(),
        metrics=rig.metrics,
        clock=rig.clock,
    )
    loop.subscribe()
    consumer.rebalance_assign([(vacuum_topic, 0), (vacuum_topic, 1), (delay_topic, 0)])
    return loop


def run_for(loop: CleanerLoop, rig: Rig, seconds: float) -> None:
    end = rig.clock.now_ms() + seconds * 1000
    while rig.clock.now_ms() < end:
        loop.step()


def waiting_vacuum_ids(events: Iterable[Any]) -> list[uuid.UUID]:
    """The vacuums parked by delay records: a DelayEnvelope's, and every one a DelayedVacuums carries."""
    ids: list[uuid.UUID] = []
    for event in events:
        if isinstance(event, DelayEnvelope):
            ids.append(event.vacuum.event_id)
        elif isinstance(event, DelayedVacuums):
            ids.extend(item.vacuum.event_id for item in event.waiting)
    return ids


def serve_list_asked_now(rig: Rig) -> LockView:
    """Ask for a lock list and a transaction list now and let them answer every batch they may (those
    whose events were all read before they were asked), however old they grow: the oldest lists the
    handler's contract allows."""
    kept = rig.handler.lock_view(rig.clock.now_ms())
    kept.all_locks()
    kept.transactions()
    newest = rig.handler.lock_views.lock_view

    def oldest_allowed(read_by_ms: int) -> LockView:
        return kept if kept.asked_ms > read_by_ms else newest(read_by_ms)

    rig.handler.lock_views.lock_view = oldest_allowed  # type: ignore[method-assign]
    return kept
