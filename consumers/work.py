"""What the cleaner's parts share: its settings, the ports it reaches the world through, one unit of
work (a consumed record, of one :class:`WorkKind`, decided once where the record is decoded) and the
outcome of handling it.

Everything the cleaner touches is reached through small protocols (metastore, storage, bus, clock), so
unit tests run it against fakes. The metastore and bus factories return one client per thread.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Literal, Protocol

from acidclean.consumers.bundles import WaitingBundle
from acidclean.consumers.crash_points import CrashPoints, NoCrashes
from acidclean.consumers.metrics import CleanerMetrics
from acidclean.consumers.rules.paths import TenantRoots
from acidclean.consumers.waiting import WaitingGroup
from acidclean.schemas.common import EventBase
from acidclean.schemas.events import CleanupRejected, DelayEnvelope, RemovedDirectory, VacuumCommitted
from acidclean.shared.acid.id_lists import MetastoreKind
from acidclean.shared.bus.bundle import MAX_BUNDLE_RECORDS
from acidclean.shared.bus.protocol import EventBus
from acidclean.shared.bus.records import RawRecord
from acidclean.shared.metastore import LockInfo, TableInfo
from acidclean.shared.storage import FileSystem
from acidclean.shared.storage.trash import TrashPolicy

if TYPE_CHECKING:
    from acidclean.consumers.outcome_batch import PreparedCleanup

# "rejoined": a fresh vacuum that rode with its table's bundle and was not absorbed by its check: the
# loop hands it back to its table's lane, to be checked there in full (nothing was published for it).
OutcomeKind = Literal["cleaned", "delayed", "dead_lettered", "table_dropped", "dry_run", "dropped", "rejoined"]


class CleanerMetastore(Protocol):
    """The metastore calls the cleaner makes (a subset of :class:`acidclean.shared.metastore.Metastore`)."""

    @property
    def kind(self) -> MetastoreKind: ...

    def get_table(self, db: str, table: str, partition: str | None = None) -> TableInfo: ...

    def get_tables(self, db: str, tables: Sequence[str]) -> dict[str, TableInfo]: ...

    def partition_info(self, table: TableInfo, partition: str | None) -> TableInfo: ...

    def partitions_located(self, table: TableInfo, names: Sequence[str]) -> dict[str, str]: ...

    def partition_locations(self, table: TableInfo) -> dict[str, str]: ...

    def valid_write_ids_of(self, tables: Sequence[tuple[str, str]], txn_list: str) -> list[str]: ...

    def valid_txn_list(self) -> str: ...

    def show_locks(
        self, db: str | None = None, table: str | None = None, partition: str | None = None
    ) -> list[LockInfo]: ...


class StorageLocationLike(Protocol):
    """What :func:`acidclean.shared.storage.open_location` returns."""

    @property
    def fs(self) -> FileSystem: ...

    @property
    def path(self) -> str: ...

    def child(self, name: str) -> str: ...


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    """Wall-clock time, UTC."""

    def now(self) -> datetime:
        return datetime.now(timezone.utc)


@dataclass(frozen=True)
class CleanerTopics:
    vacuum_committed: str
    cleanup_delay: str
    cleanup_done: str
    dead_letter: str
    cleanup_ledger: str = "acid.cleanup.ledger"


@dataclass(frozen=True)
class HandlerConfig:
    tenant: str
    cleaner_id: str
    interval_ms: int
    max_wait_s: float
    topics: CleanerTopics
    dry_run: bool = False
    lock_check_attempts: int = 3
    lock_retry_wait_s: float = 0.05  # before a metastore call's second attempt, doubled each time (10x at most)
    wait_for_open_txns: bool = True
    # Waiting tables' DelayedVacuums carried on unread go on in bundles (one Kafka record for many
    # tables of one delay partition) once a batch has at least bundle_min of one partition.
    bundle_min: int = 8
    bundle_max: int = MAX_BUNDLE_RECORDS
    bundle_compressed: bool = True  # bundles' members compressed (acidclean.shared.bus.bundle)
    # Parts of the bundle machinery switched off, to measure each against the rest (issue 50, item 2)
    parts_off: frozenset[str] = frozenset()
    trash: TrashPolicy = field(default_factory=TrashPolicy)  # where removed files go (acidclean.shared.storage.trash)


@dataclass
class CleanerContext:
    """The settings and ports every part of the cleaner reaches the world through (one per handler)."""

    config: HandlerConfig
    metastore: Callable[[], CleanerMetastore]
    bus: Callable[[], EventBus]
    open_storage: Callable[[str], StorageLocationLike]
    roots: TenantRoots
    metrics: CleanerMetrics
    clock: Clock = field(default_factory=SystemClock)
    crash: CrashPoints = field(default_factory=NoCrashes)

    def now_ms(self) -> int:
        return int(self.clock.now().timestamp() * 1000)


class WorkKind(enum.Enum):
    """The five kinds of work the loop hands over, each handled by its own part of the cleaner."""

    VACUUM = "vacuum"  # a fresh VacuumCommitted: check, then clean or park (consumers/cleanup.py)
    ENVELOPE = "envelope"  # a due DelayEnvelope (one parked vacuum, read by the models): as a vacuum
    GROUP = "group"  # a due DelayedVacuums (or a DelayEnvelope read without the models): consumers/parked.py
    BUNDLE = "bundle"  # a due bundle of parked tables' records: consumers/bundle_check.py
    REFUSED = "refused"  # a record the decoder refused: dead-lettered as it is


def kind_of(event: VacuumCommitted | DelayEnvelope | WaitingGroup | WaitingBundle | CleanupRejected) -> WorkKind:
    """The kind of a decoded event (asked once, when its :class:`Work` is made)."""
    if isinstance(event, VacuumCommitted):
        return WorkKind.VACUUM
    if isinstance(event, DelayEnvelope):
        return WorkKind.ENVELOPE
    if isinstance(event, WaitingGroup):
        return WorkKind.GROUP
    if isinstance(event, WaitingBundle):
        return WorkKind.BUNDLE
    return WorkKind.REFUSED


@dataclass(frozen=True)
class Work:
    """One consumed record the loop handed over: its event (or the decoder's refusal) and position."""

    record: RawRecord
    event: VacuumCommitted | DelayEnvelope | WaitingGroup | WaitingBundle | CleanupRejected
    generation: int = 0
    due_ms: int = 0
    received_ms: int = 0  # when the loop read it (for the lateness breakdown in debug logs)
    kind: WorkKind = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", kind_of(self.event))

    @property
    def partition(self) -> tuple[str, int]:
        return (self.record.topic, self.record.partition)

    @property
    def offset(self) -> int:
        return self.record.offset

    @property
    def lane(self) -> str:
        """Works of one lane run one after the other; one table's events share a lane."""
        event = self.event
        if isinstance(event, CleanupRejected):
            return "\x00dead-letters"
        if isinstance(event, WaitingBundle):
            return event.lane  # its own: each member goes on in its table's lane if it must be read
        return f"{event.tenant}/{event.table.lower()}"

    @property
    def fresh_read_ms(self) -> int | None:
        """When the loop read a fresh vacuum (its batch's lists may be older, see
        :meth:`acidclean.consumers.lock_views.LockViews.kept_waiting_by_last_list`); None for a delay
        record, whose batch's lists are always new enough for it."""
        return self.received_ms if self.kind is WorkKind.VACUUM else None


@dataclass(frozen=True)
class Outcome:
    """What handling an event published (already acknowledged by the broker, unless a dry run)."""

    kind: OutcomeKind
    event: EventBase
    removed: tuple[RemovedDirectory, ...] = ()
    deferred: bool = False  # published later with its group (CleanupHandler.flush_delays / flush_batch)
    # A cleanup planned and waiting for its batch's announcement (CleanupHandler.run_prepared), not an outcome yet.
    prepared: PreparedCleanup | None = None
