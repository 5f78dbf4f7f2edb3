"""What one batch of work collects before it is published: the outcomes to send, the cleanups to
announce, and the records of the vacuums it parks (still waiting after their check), which
:mod:`acidclean.consumers.batch_writer` merges by key and packs into bundles at the batch's end.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from acidclean.consumers.batch_tables import BatchTables
from acidclean.consumers.lock_views import LockViews, SharedCheck
from acidclean.consumers.remover import CheckedDirectory
from acidclean.consumers.rules.obsolete import CleanupPlan
from acidclean.consumers.rules.readiness import Readiness
from acidclean.consumers.waiting import (
    EntryFacts,
    Member,
    UnreadableGroup,
    WaitingGroup,
    WireUnchanged,
    WireWaiting,
    still_waiting,
    unchanged_checks_limit,
)
from acidclean.consumers.work import StorageLocationLike
from acidclean.schemas.common import EventBase
from acidclean.schemas.events import (
    MAX_UNCHANGED_CHECKS,
    DelayedVacuums,
    DelayEnvelope,
    RemovedDirectory,
    VacuumCommitted,
)
from acidclean.shared.bus.bundle import CarriedBundle, PrebuiltRecord, Republished
from acidclean.shared.bus.codec import fit_field
from acidclean.shared.metastore import TableIdentity

if TYPE_CHECKING:
    from acidclean.consumers.table_check import TableLockCheck


@dataclass(eq=False)
class PreparedCleanup:
    """A cleanup checked and planned, whose ``CleanupStarted`` is published with its batch's before any
    delete; ``planned`` (the directories with their sizes) is measured with the batch's, by run_prepared."""

    processed: VacuumCommitted | DelayEnvelope
    storage: StorageLocationLike
    plan: CleanupPlan
    planned: tuple[RemovedDirectory, ...]
    locks: TableLockCheck
    table: TableIdentity | None = None  # the table checked; confirmed again just before the deletes (rule 9)
    checked: tuple[CheckedDirectory, ...] = ()  # each directory's files as listed with the batch's measure


@dataclass(frozen=True)
class Outgoing:
    topic: str
    event: EventBase | PrebuiltRecord
    after: Callable[[], None]  # metrics and the log line, once the broker has it


class OutcomeBatch:
    """The tables one worker handles together: their shared metastore answers, the cleanups whose
    announcements go out together (:meth:`CleanupHandler.run_prepared`) and every outcome, published in
    one ``publish_many`` with one wait for the acknowledgements (:meth:`CleanupHandler.flush_batch`)."""

    def __init__(self, views: LockViews, tables: int, read_by_ms: int = 0) -> None:
        # One table alone keeps the table-filtered show_locks; several share one unfiltered call unless
        # the calls measured so far say one call per table costs less (a metastore holding many locks),
        # or a lock list fresh enough for this batch is at hand anyway.
        fresh = views.has_lock_view(read_by_ms)
        # An unfiltered list serves every batch while it is fresh: weigh it by the tables the last one
        # served, or the current one so far (a list answering fresh vacuums it keeps waiting lives long).
        current = views.current_lock_view
        served = max(tables, views.tables_per_lock_view, current.served if current is not None else 0)
        self.per_table = not fresh and not (served > 1 and views.lock_call_costs.prefer_unfiltered(served))
        # Asked only when used: for every table unless per_table, else for the transaction rule's tables.
        self.check = SharedCheck(views, read_by_ms)
        self.tables: list[TableLockCheck] = []
        self.prepared: list[PreparedCleanup] = []
        self.known = BatchTables()  # the tables about to be cleaned, asked for together (prefetch)
        self.outbox: list[Outgoing] = []
        # Published event id -> ids of the outcomes it carries (a group's delays, a group's ready vacuums).
        self.carried_by: dict[str, set[str]] = {}
        self.bundles: list[BundleCheck] = []  # the checks of the bundles of this batch
        # Keys with records in more than one work of the batch (two bundles, a bundle and a record):
        # a bundle with one of them is checked member by member, so the table goes on in one bundle.
        self.shared_keys: set[bytes] = set()

    def close(self) -> None:
        """Let go of everything the batch holds, once its outcomes are flushed. Each table's check
        refers back to its batch: without this, every batch (its outcomes, the bundles it wrote, up to
        512 KB each) lived until the cyclic collector found it, and its full collections of that much
        held the interpreter for 0.4-0.7 s every 15 s at 100,000 parked vacuums."""
        self.tables, self.prepared, self.outbox, self.bundles = [], [], [], []
        self.known = BatchTables()
        self.carried_by, self.shared_keys = {}, set()

    def carry(self, published: EventBase | PrebuiltRecord, outcome_id: object) -> None:
        """``published`` carries (part of) the outcome whose event id is ``outcome_id``."""
        self.carried_by.setdefault(str(published.event_id), set()).add(str(outcome_id))

    def carry_all(self, published: EventBase | PrebuiltRecord, outcome_ids: Iterable[str]) -> None:
        """``published`` carries (part of) each of the outcomes ``outcome_ids``."""
        self.carried_by.setdefault(str(published.event_id), set()).update(outcome_ids)


# A delay envelope built for a vacuum and not yet published: (the event checked, the answer, the envelope).
PendingEnvelope = tuple[VacuumCommitted | DelayEnvelope, Readiness, DelayEnvelope]


# A bundle's member that a check would carry on unread with fewer checks than this left before its
# entries must be read is read in full by that check instead. A bundle is carried on whole only as
# many checks as its nearest member has left, and its members' limits are spread over 16-31 by key:
# without this, some member of a large bundle would always be about to reach its limit, and nearly
# every check of the bundle would go member by member.
READ_IN_FULL_WITHIN = MAX_UNCHANGED_CHECKS // 4


@dataclass(frozen=True)
class StillWaiting:
    """A vacuum of a DelayedVacuums still waiting after a check, for the key's next DelayedVacuums."""

    source: uuid.UUID  # the record it came in
    key: tuple[str, str, str | None]  # tenant, table, partition
    entry: WireWaiting
    checked_at: datetime
    due_at: datetime
    newly_stuck: bool
    outcome_id: str  # the id of the Outcome event of the work it came from
    vacuum_id: str
    facts: EntryFacts  # for the next record's unchanged summary
    single: bool = False  # read from a DelayEnvelope: written back as one while it waits alone


@dataclass(frozen=True)
class UnchangedGroup:
    """A DelayedVacuums a check left unchanged (every lock it waits on still listed): written on unread,
    unless other vacuums of its key wait in the same batch (then its vacuums are read and merged)."""

    group: WaitingGroup
    checked_at: datetime
    due_at: datetime
    held_ids: AbstractSet[int]  # the table's locks the check listed
    vacuums: int | None = None  # how many it carries, when its entries were not read (else theirs)


@dataclass(frozen=True)
class BundleCheck:
    """One bundle's check: the groups it carries on unread (each with its next record) and the members
    it publishes again on their own, to be read in full by their tables' lanes."""

    partition: int  # the delay partition it was read from, where its members' keys belong
    outcome_id: str
    carried: list[DelayOut]  # the members carried on, each as its next record
    spilled: list[Republished]
    absorbed: int = 0  # members that took their tables' fresh vacuums in (their records are the tables')
    whole: CarriedBundle | None = None  # the bundle carried on whole (nothing else then)
    keys: tuple[str, ...] = ()  # its members' keys, when carried on whole


@dataclass(frozen=True)
class DelayOut:
    """One delay record a batch writes: its event, the outcomes it carries besides its own, the delay
    partition its key's records are read from (None: not known), when its check started, its oldest
    vacuum's commit, and what to do once the broker has it (metrics and logs)."""

    event: DelayedVacuums | DelayEnvelope
    outcome_ids: tuple[str, ...]
    read_from: int | None
    checked_at: datetime
    oldest_commit: datetime
    published: Callable[[], None]
    # When its vacuums wait on snapshot locks alone: those locks, and how many more checks may carry
    # it on unread (what it adds to its bundle's summary).
    whole: WholePart | None = None


@dataclass(frozen=True)
class WholePart:
    lock_ids: Sequence[int]
    carries_left: int


def whole_part(key: str, unchanged: WireUnchanged | None) -> WholePart | None:
    """What a group with this summary adds to its bundle's summary."""
    if unchanged is None:
        return None
    return WholePart(unchanged.lock_ids, unchanged_checks_limit(key) - unchanged.checks)


def still_waiting_entry(
    group: WaitingGroup,
    member: Member,
    outcome_id: str,
    held_ids: AbstractSet[int] | None,
    error: str | None,
    open_txns: tuple[int, ...],
    now: datetime,
    due: datetime,
    max_wait_s: float,
) -> StillWaiting:
    """A member a check found not ready, for the key's next record."""
    entry = still_waiting(
        member,
        held_ids=None if error is not None else held_ids,
        check_error=None if error is None else fit_field(DelayEnvelope, "check_error", error),
        open_txns=open_txns,
        now=now,
        max_wait_s=max_wait_s,
        checks=group.checks,
    )
    held = () if error is not None or held_ids is None else tuple(i for i in member.lock_ids if i in held_ids)
    return StillWaiting(
        group.event_id,
        (group.tenant, group.table, group.partition),
        entry,
        now,
        due,
        entry.stuck and not member.wire.stuck,
        outcome_id,
        member.vacuum_id,
        EntryFacts(held, member.view.occurred_at),
        group.single,
    )


def unchanged_members(item: UnchangedGroup, max_wait_s: float) -> list[StillWaiting] | None:
    """An unchanged group's vacuums as the check found them (all still waiting), to be merged with
    the other vacuums of their key; None if they do not read (the group is then carried on unread
    alone, and the models decide at its next full check)."""
    group = item.group
    try:
        members = group.members
    except UnreadableGroup:
        return None
    outcome_id = str(group.event_id)
    return [
        still_waiting_entry(
            group, member, outcome_id, item.held_ids, None, (), item.checked_at, item.due_at, max_wait_s
        )
        for member in members
    ]
