"""The events of acidclean (docs/design.md section 5), one pydantic model each.

``VacuumCommitted`` is published by the vacuum job; the cleaner answers with a ``DelayEnvelope``
(locks still held, check again later), a ``CleanupDone`` or a ``CleanupRejected`` (dead letter),
and announces every deletion with a ``CleanupStarted`` before it deletes anything; ingest writers
may publish ``DeltaCommitted``. The initiator publishes ``VacuumRequested``; the vacuum service answers
with ``VacuumStarted`` and, when no vacuum is committed, ``VacuumFailed``. The JSON Schemas under ``schemas/json/`` are
generated from these models (``python -m acidclean.schemas.generate``) and are the published
contract; change a model only in ways that keep every previously valid event valid.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from pydantic import Field, PrivateAttr, model_validator

from acidclean.schemas.common import (
    EventBase,
    LockSnapshotEntry,
    NonEmpty,
    PartitionSpec,
    SharedLocation,
    StrictModel,
    TableName,
    UtcDatetime,
    VacuumedTable,
)
from acidclean.schemas.ledger import CleanupLedger, CleanupUndone

DirectoryName = Annotated[str, Field(min_length=1, max_length=1024)]


class VacuumCommitted(EventBase):
    """A vacuum (compaction) committed its new directory and snapshotted the locks then held.

    Its ``correlation_id`` is its own ``event_id``: every later event of this vacuum points to it.
    """

    event_type = "acidclean.vacuum.committed"

    wire_required = ("schema_version", "event_id", "correlation_id")

    table: TableName = Field(description="The table, as db.table.")
    correlation_id: uuid.UUID = Field(
        default_factory=lambda data: data["event_id"],
        description="Equal to event_id: a vacuum starts its own flow.",
    )
    location: NonEmpty = Field(description="The table or partition location (URI or path).")
    compaction_type: Literal["MINOR", "MAJOR"]
    new_directories: list[DirectoryName] = Field(
        min_length=1, description="Directories the vacuum committed, e.g. base_0000003."
    )
    obsolete_directories: list[DirectoryName] = Field(
        default_factory=list,
        description="Directories the vacuum believes obsolete: a claim the cleaner checks, not an order.",
    )
    highest_write_id: int = Field(ge=0, description="The highest write id the vacuum compacted.")
    lock_snapshot: list[LockSnapshotEntry] = Field(
        description="Locks held on the table or partition right after the new directory was committed."
    )
    vacuum_job_id: NonEmpty = Field(description="The job that ran the vacuum (e.g. the Spark application id).")
    locks_observed: int | None = Field(
        default=None,
        ge=0,
        description="How many locks show_locks listed for the snapshot (equal to the snapshot's length). "
        "An empty snapshot is trusted only when this says 0: the vacuum saw no locks, not lost them.",
    )
    next_txn_id: int | None = Field(
        default=None,
        ge=1,
        description="The metastore's next transaction id when the vacuum committed. Readers that take no "
        "locks (Hive 4 lockless reads) run in transactions below it: the cleaner waits until none is open.",
    )
    request_id: uuid.UUID | None = Field(
        default=None,
        description="The event_id of the VacuumRequested this vacuum answers, or null when it was run by hand.",
    )
    overlapping_directories: list[DirectoryName] = Field(
        default_factory=list,
        description="Directories of another vacuum that readers read together with this vacuum's output over "
        "the same write ids, found right after the commit (a late commit: rows are read twice). Reported for "
        "an operator; nothing is deleted because of it.",
    )
    shared_locations: list[SharedLocation] | None = Field(
        default=None,
        max_length=10000,
        description="The other tables and partitions whose location is this directory or lies inside or around "
        "it, when the vacuum committed (safety rule 8); their locks are in the lock snapshot too. Null when "
        "none (and in events of vacuums that did not resolve them).",
    )
    table_identity: VacuumedTable | None = Field(
        default=None,
        description="Which table the vacuum compacted (safety rule 9): the cleaner deletes nothing when the table "
        "it finds under the name is another one. Null in events of vacuums that did not record it.",
    )

    @model_validator(mode="after")
    def _correlation_is_own_id(self) -> VacuumCommitted:
        if self.correlation_id != self.event_id:
            raise ValueError("a VacuumCommitted's correlation_id must equal its event_id")
        if self.locks_observed is not None and self.locks_observed != len(self.lock_snapshot):
            raise ValueError(
                f"locks_observed ({self.locks_observed}) must equal the lock snapshot's length "
                f"({len(self.lock_snapshot)})"
            )
        return self


class _WaitingEvent(EventBase):
    """A delay record: the cleaner may write its JSON without the models (acidclean.consumers.waiting),
    and the codec then sends those bytes instead of dumping the model."""

    _wire_value: bytes | None = PrivateAttr(default=None)

    def attach_wire_value(self, value: bytes) -> None:
        self._wire_value = value

    @property
    def wire_value(self) -> bytes | None:
        return self._wire_value


class DelayEnvelope(_WaitingEvent):
    """A vacuum whose snapshot locks were still held at the last readyToClean check.

    It is published on the delay topic with the vacuum's key and checked again at ``due_at``. When
    it has waited longer than the cleaner's ``max_wait``, the cleaner sets ``stuck`` (and keeps
    waiting; a live reader's lock is never overridden): ``locks_held`` then names who holds it.
    """

    event_type = "acidclean.cleanup.delayed"

    table: TableName = Field(description="The table, as db.table.")
    correlation_id: uuid.UUID = Field(description="The vacuum's event_id.")
    vacuum: VacuumCommitted = Field(description="The vacuum event, carried unchanged.")
    attempt: int = Field(ge=1, description="readyToClean checks made so far (this one included).")
    due_at: UtcDatetime = Field(description="When to check again. Computed once, never pushed later.")
    locks_held: list[LockSnapshotEntry] = Field(
        description="Locks of the snapshot still listed by the metastore at the last check."
    )
    check_error: str | None = Field(
        default=None,
        max_length=4096,
        description="Why the metastore could not answer (the check failed closed), or null.",
    )
    stuck: bool = Field(default=False, description="Waited longer than the cleaner's max wait.")
    stuck_since: UtcDatetime | None = Field(default=None, description="When it was first reported stuck.")
    open_txns: list[int] = Field(
        default_factory=list,
        max_length=100,
        description="Transactions open since before the vacuum committed, still open at the last check "
        "(readers that take no locks may be using them; at most 100 listed).",
    )

    @model_validator(mode="after")
    def _consistent(self) -> DelayEnvelope:
        vacuum = self.vacuum
        if (self.tenant, self.table, self.partition) != (vacuum.tenant, vacuum.table, vacuum.partition):
            raise ValueError("a DelayEnvelope's tenant, table and partition must be its vacuum's")
        if self.correlation_id != vacuum.event_id:
            raise ValueError("a DelayEnvelope's correlation_id must be its vacuum's event_id")
        if self.stuck != (self.stuck_since is not None):
            raise ValueError("stuck and stuck_since must be set together")
        return self


# At most this many vacuums in one DelayedVacuums: an envelope stays far below Kafka's default
# message.max.bytes (1 MB) however many vacuums of one table wait (a vacuum is about 1 KB).
MAX_WAITING_PER_ENVELOPE = 100


class WaitingVacuum(StrictModel):
    """One vacuum of a :class:`DelayedVacuums`: what a :class:`DelayEnvelope` says of its vacuum."""

    vacuum: VacuumCommitted = Field(description="The vacuum event, carried unchanged.")
    attempt: int = Field(ge=1, description="readyToClean checks made so far (this one included).")
    locks_held: list[LockSnapshotEntry] = Field(
        description="Locks of the snapshot still listed by the metastore at the last check."
    )
    check_error: str | None = Field(
        default=None,
        max_length=4096,
        description="Why the metastore could not answer (the check failed closed), or null.",
    )
    stuck: bool = Field(default=False, description="Waited longer than the cleaner's max wait.")
    stuck_since: UtcDatetime | None = Field(default=None, description="When it was first reported stuck.")
    open_txns: list[int] = Field(
        default_factory=list,
        max_length=100,
        description="Transactions open since before the vacuum committed, still open at the last check.",
    )

    @model_validator(mode="after")
    def _stuck_pair(self) -> WaitingVacuum:
        if self.stuck != (self.stuck_since is not None):
            raise ValueError("stuck and stuck_since must be set together")
        return self


# A re-check that finds every lock of an ``unchanged`` summary still listed carries the vacuums on
# unread at most this many times in a row (fewer for most keys, so tables parked together are not read
# in full in the same interval): then every vacuum is read and checked again in full.
MAX_UNCHANGED_CHECKS = 32


class UnchangedWaiting(StrictModel):
    """What lets a re-check that changes nothing carry a :class:`DelayedVacuums` on without reading its
    vacuums. Written only when every vacuum waits on snapshot locks alone: each has locks held, no
    check error and no open transaction. While every lock in ``lock_ids`` is listed no vacuum can be
    ready, so the next check writes the same entries with ``checks`` one higher."""

    lock_ids: list[int] = Field(
        min_length=1,
        description="The ids of the locks in the vacuums' locks_held (what they wait on), sorted, each once.",
    )
    checks: int = Field(
        ge=0,
        description="Checks since the entries were written that found every one of these locks still "
        "listed. A vacuum's checks so far are its attempt plus this.",
    )
    oldest_commit: UtcDatetime = Field(description="When the oldest of the vacuums committed.")
    oldest_unstuck_commit: UtcDatetime | None = Field(
        description="When the oldest vacuum not yet reported stuck committed; null when every one is."
    )


class DelayedVacuums(_WaitingEvent):
    """Several vacuums of one table (one Kafka key) whose snapshot locks were still held, checked
    together again at ``due_at``: one record on the delay topic instead of one per vacuum.

    The cleaner writes it when two or more vacuums of a key wait after the same check (one alone
    still gets a :class:`DelayEnvelope`). Each vacuum keeps its own attempt count, locks held and
    stuck state; ``merged_from`` names every event the envelope replaces (its ``causation_id`` is
    the first). It has no ``correlation_id``: each waiting vacuum is its own flow.
    """

    event_type = "acidclean.cleanup.delayed-vacuums"

    table: TableName = Field(description="The table, as db.table.")
    due_at: UtcDatetime = Field(description="When to check again. Computed once, never pushed later.")
    waiting: list[WaitingVacuum] = Field(
        min_length=1,
        max_length=MAX_WAITING_PER_ENVELOPE,
        description="The waiting vacuums, oldest first, each with its own last check.",
    )
    merged_from: list[uuid.UUID] = Field(
        default_factory=list,
        description="The events (delay envelopes or vacuums) this envelope carries on, causation_id first.",
    )
    unchanged: UnchangedWaiting | None = Field(
        default=None,
        description="Set when every vacuum waits on locks alone: a check that finds all these locks still "
        "listed may carry the vacuums on without reading them.",
    )

    @model_validator(mode="after")
    def _one_key(self) -> DelayedVacuums:
        ids = set()
        for item in self.waiting:
            vacuum = item.vacuum
            if (vacuum.tenant, vacuum.table, vacuum.partition) != (self.tenant, self.table, self.partition):
                raise ValueError("every vacuum of a DelayedVacuums must have its tenant, table and partition")
            if vacuum.event_id in ids:
                raise ValueError(f"vacuum {vacuum.event_id} is listed twice in one DelayedVacuums")
            ids.add(vacuum.event_id)
        if self.correlation_id is not None:
            raise ValueError("a DelayedVacuums has no correlation_id: each waiting vacuum is its own flow")
        if self.unchanged is not None:
            problem = unchanged_problem(self.unchanged, self.waiting)
            if problem is not None:
                raise ValueError(f"unchanged does not match the waiting vacuums: {problem}")
        return self


def unchanged_problem(summary: UnchangedWaiting, waiting: list[WaitingVacuum]) -> str | None:
    """Why ``summary`` does not describe ``waiting`` (every vacuum waits on locks alone; ids, oldest
    commits), or None."""
    if any(not item.locks_held or item.check_error is not None or item.open_txns for item in waiting):
        return "a vacuum waits on something other than its locks (none held, a check error or open transactions)"
    lock_ids = sorted({lock.lock_id for item in waiting for lock in item.locks_held})
    if summary.lock_ids != lock_ids:
        return f"lock_ids must be {lock_ids}"
    if summary.oldest_commit != min(item.vacuum.occurred_at for item in waiting):
        return "oldest_commit must be when the oldest vacuum committed"
    unstuck = [item.vacuum.occurred_at for item in waiting if not item.stuck]
    if summary.oldest_unstuck_commit != (min(unstuck) if unstuck else None):
        return "oldest_unstuck_commit must be when the oldest vacuum not stuck committed (null if all are)"
    return None


class RemovedDirectory(StrictModel):
    """One directory the cleaner deleted."""

    name: DirectoryName = Field(description="Directory name, a direct child of the location.")
    file_count: int = Field(ge=0)
    bytes: int = Field(ge=0)


class CleanupStarted(EventBase):
    """The cleaner is about to delete these directories: published, and acknowledged, before the first delete.

    If the cleaner dies after deleting but before its ``CleanupDone`` is acknowledged, the restarted
    cleaner finds nothing left to remove; this event is then the only record on the topics of what
    was deleted. Its ``event_id`` is derived from the handled event and the directory names, so a
    replay that announces the same directories publishes the same id.
    """

    event_type = "acidclean.cleanup.started"

    table: TableName = Field(description="The table, as db.table.")
    causation_id: uuid.UUID = Field(description="The event being handled (the vacuum or a delay envelope).")
    correlation_id: uuid.UUID = Field(description="The vacuum's event_id.")
    directories_to_remove: list[RemovedDirectory] = Field(
        min_length=1, description="Directories about to be deleted, with their file count and bytes now."
    )
    attempt: int = Field(ge=1, description="readyToClean checks it took (this one included).")
    cleaner_id: NonEmpty = Field(description="The cleaner process deleting them.")

    @model_validator(mode="after")
    def _distinct_directories(self) -> CleanupStarted:
        names = [directory.name for directory in self.directories_to_remove]
        if len(set(names)) != len(names):
            raise ValueError("a CleanupStarted lists each directory once")
        return self

    @property
    def bytes_to_free(self) -> int:
        return sum(directory.bytes for directory in self.directories_to_remove)


class CleanupDone(EventBase):
    """The obsolete directories of a vacuum are gone (or there was nothing left to remove)."""

    event_type = "acidclean.cleanup.done"

    table: TableName = Field(description="The table, as db.table.")
    correlation_id: uuid.UUID = Field(description="The vacuum's event_id.")
    directories_removed: list[RemovedDirectory]
    time_waited_ms: int = Field(ge=0, description="From the vacuum's commit to the successful check.")
    attempts: int = Field(ge=1, description="readyToClean checks it took.")
    cleaner_id: NonEmpty = Field(description="The cleaner process that did it.")
    dry_run: bool = Field(default=False, description="Nothing was deleted; the list says what would be.")
    note: str | None = Field(
        default=None, max_length=4096, description="Why nothing was removed, e.g. the table was dropped."
    )

    @property
    def bytes_freed(self) -> int:
        return sum(directory.bytes for directory in self.directories_removed)


class RawHeader(StrictModel):
    """One Kafka record header, its value base64-encoded (headers may hold any bytes)."""

    name: str = Field(max_length=1024)
    value_b64: str | None


class SourceRecord(StrictModel):
    """A Kafka record as it was read, bytes base64-encoded.

    Bytes beyond a limit are cut (``truncated``), so that a dead letter always fits in a Kafka
    message: a dead letter too large to publish would stop its consumer for good.
    """

    topic: str = Field(max_length=1024)
    partition: int = Field(ge=0)
    offset: int = Field(ge=0)
    timestamp_ms: int | None = None
    key_b64: str | None
    value_b64: str | None
    headers: list[RawHeader]
    value_size: int | None = Field(default=None, ge=0, description="Size of the original value in bytes.")
    truncated: bool = Field(default=False, description="Some key, value or header bytes were cut.")


RejectionCode = Literal[
    "not_json",  # the value is not UTF-8 JSON, or is empty (a tombstone)
    "invalid_event",  # JSON, but not a valid event of its type
    "unknown_schema_version",
    "unknown_event_type",  # missing or unknown ce_type / ce_specversion
    "key_mismatch",  # the record key disagrees with the body's tenant/table/partition
    "header_mismatch",  # a ce_ or correlation header disagrees with the body
    "unsafe_path",  # docs/design.md section 7 rule 4
    "other_tenant",
    "unknown_table",
    "not_obsolete",  # a claimed directory the rules do not call obsolete (rule 3)
    "invalid_due_time",
    "other",
]


class CleanupRejected(EventBase):
    """A message the cleaner refused, on the dead-letter topic with the reason and the raw record.

    ``table``, ``partition``, ``correlation_id`` and ``causation_id`` are filled in when they could be
    read from the refused message, so the rejection shows up in that table's audit history.
    """

    event_type = "acidclean.cleanup.rejected"

    table: TableName | None = Field(default=None, description="The table, if it could be read.")
    partition: PartitionSpec | None = None
    reason_code: RejectionCode
    reason: str = Field(min_length=1, max_length=8192, description="What was wrong, for an operator.")
    rejected_by: NonEmpty = Field(description="The consumer that refused it.")
    rejected_event_type: str | None = Field(
        default=None, max_length=256, description="The ce_type of the refused message, if any."
    )
    source: SourceRecord


class DeltaCommitted(EventBase):
    """Streaming ingest committed a delta directory."""

    event_type = "acidclean.delta.committed"

    table: TableName = Field(description="The table, as db.table.")
    location: NonEmpty = Field(description="The table or partition location.")
    delta_directory: DirectoryName
    write_id: int = Field(ge=0)
    bytes: int = Field(ge=0)


CompactionType = Literal["MINOR", "MAJOR"]
OneLine = Annotated[str, Field(min_length=1, max_length=4096, pattern=r"^[^\r\n]+$")]


class VacuumFigures(StrictModel):
    """What the initiator counted in a table or partition when it decided to request a vacuum."""

    delta_count: int = Field(ge=0, description="delta_* directories above the base.")
    delete_delta_count: int = Field(ge=0, description="delete_delta_* directories above the base.")
    delta_bytes: int = Field(ge=0, description="Bytes of those delta and delete delta directories.")
    base_bytes: int = Field(ge=0, description="Bytes of the current base (0 when there is none).")
    aborted_txns: int = Field(ge=0, description="Aborted transactions that wrote to the table or partition.")


class VacuumThresholds(StrictModel):
    """The thresholds that applied (Hive's names: hive.compactor.*, or the table's overrides)."""

    delta_num: int = Field(ge=1, description="hive.compactor.delta.num.threshold.")
    delta_pct: float = Field(ge=0, description="hive.compactor.delta.pct.threshold (0.1 is 10 %).")
    aborted_txns: int = Field(ge=1, description="hive.compactor.abortedtxn.threshold.")


class RequestedBy(StrictModel):
    """Which initiator made the request, and what triggered it."""

    initiator_id: NonEmpty = Field(description="The initiator process.")
    trigger: Literal["event", "sweep", "hive_queue"] = Field(
        description="A DeltaCommitted event, the metastore sweep, or a request in Hive's compaction queue."
    )


class VacuumRequested(EventBase):
    """The initiator asks for a vacuum of a table or partition whose thresholds were crossed.

    Its ``event_id`` is the request id and its ``correlation_id`` equals it. The request is in flight
    until its ``VacuumFailed``, or the ``CleanupDone`` (or dead letter) of the ``VacuumCommitted``
    whose ``request_id`` names it; no second request of the same key is made meanwhile.
    """

    event_type = "acidclean.vacuum.requested"

    wire_required = ("schema_version", "event_id", "correlation_id")

    table: TableName = Field(description="The table, as db.table.")
    correlation_id: uuid.UUID = Field(
        default_factory=lambda data: data["event_id"],
        description="Equal to event_id: a request starts its own flow.",
    )
    location: NonEmpty = Field(description="The table or partition location (URI or path).")
    compaction_type: CompactionType
    reason: NonEmpty = Field(description='Why, e.g. "12 deltas >= hive.compactor.delta.num.threshold 10".')
    figures: VacuumFigures
    thresholds: VacuumThresholds
    requested_by: RequestedBy
    requested_at: UtcDatetime = Field(description="When the request was made, UTC.")
    hive_compaction_id: int | None = Field(
        default=None, ge=1, description="The entry of Hive's compaction queue (show_compact id) this request serves."
    )

    @model_validator(mode="after")
    def _correlation_is_own_id(self) -> VacuumRequested:
        if self.correlation_id != self.event_id:
            raise ValueError("a VacuumRequested's correlation_id must equal its event_id")
        return self


class VacuumStarted(EventBase):
    """A vacuum service started the vacuum a request asked for."""

    event_type = "acidclean.vacuum.started"

    table: TableName = Field(description="The table, as db.table.")
    correlation_id: uuid.UUID = Field(description="The request's event_id.")
    vacuum_service_id: NonEmpty = Field(description="The vacuum service process running it.")
    started_at: UtcDatetime = Field(description="When the vacuum started, UTC.")


VacuumFailureCode = Literal[
    "error",  # the vacuum failed; message says why
    "nothing_to_vacuum",  # nothing to do: not an error, but it ends the request
    "table_gone",
    "refused",
]


class VacuumFailed(EventBase):
    """A requested vacuum ended without a commit: the request is no longer in flight."""

    event_type = "acidclean.vacuum.failed"

    table: TableName = Field(description="The table, as db.table.")
    correlation_id: uuid.UUID = Field(description="The request's event_id.")
    reason_code: VacuumFailureCode
    message: OneLine = Field(description="What happened, one line.")
    failed_at: UtcDatetime = Field(description="When it failed, UTC.")


Event = (
    VacuumCommitted
    | DelayEnvelope
    | DelayedVacuums
    | CleanupStarted
    | CleanupDone
    | CleanupRejected
    | DeltaCommitted
    | VacuumRequested
    | VacuumStarted
    | VacuumFailed
    | CleanupLedger
    | CleanupUndone
)
EVENT_CLASSES: tuple[type[EventBase], ...] = (
    VacuumCommitted,
    DelayEnvelope,
    DelayedVacuums,
    CleanupStarted,
    CleanupDone,
    CleanupRejected,
    DeltaCommitted,
    VacuumRequested,
    VacuumStarted,
    VacuumFailed,
    CleanupLedger,
    CleanupUndone,
)
EVENT_CLASS_BY_TYPE: dict[str, type[EventBase]] = {cls.event_type: cls for cls in EVENT_CLASSES}
# The settings.topics field each event is published to.
TOPIC_FIELD: dict[type[EventBase], str] = {
    VacuumCommitted: "vacuum_committed",
    DelayEnvelope: "cleanup_delay",
    DelayedVacuums: "cleanup_delay",
    CleanupStarted: "cleanup_done",  # on the done topic, so it stays in order with its CleanupDone
    CleanupDone: "cleanup_done",
    CleanupRejected: "dead_letter",
    DeltaCommitted: "delta_committed",
    # A request's whole life on one topic, keyed like the others: one key's events stay in order.
    VacuumRequested: "vacuum_requests",
    VacuumStarted: "vacuum_requests",
    VacuumFailed: "vacuum_requests",
    CleanupLedger: "cleanup_ledger",  # a cleanup's files and their undo, beside the done topic (schemas/ledger.py)
    CleanupUndone: "cleanup_ledger",
}
