"""The audit's fast decoder: the audit topics' records read straight from their bytes with msgspec.

Validating every record with the pydantic event models cost more than reading it from Kafka
(``acidclean audit`` took 3x a bare consume). This module decodes a record into a light, read-only
struct with the same field names as the event it mirrors, so the audit's fold takes either. Each
struct declares every field of its model, with the model's types and limits (strict types, unknown
fields refused, patterns, lengths, ranges, the models' cross-field rules), and the envelope is
checked as :func:`acidclean.shared.bus.codec.decode` checks it (key, ``ce_*`` headers, due time).

:func:`fast_decode` answers only when it is sure: a record it cannot read exactly as the models would
(anything malformed, and a few valid spellings it does not handle, such as upper-case UUIDs, more
than six fractional digits of a second or duplicate headers) gives ``None``, and the caller decodes
it with the models, so that record gets the same rejection and reason as before. The unit tests fold
random streams both ways and check the rows are equal, and that every model field is declared here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Annotated, Any, ClassVar, Literal

import msgspec

from acidclean.schemas.common import PARTITION_PATTERN, TABLE_PATTERN, TENANT_PATTERN, LockSnapshotEntry
from acidclean.schemas.events import MAX_WAITING_PER_ENVELOPE
from acidclean.shared.bus.codec import ATTEMPT as ATTEMPT_HEADER
from acidclean.shared.bus.codec import CAUSATION_ID as CAUSATION_HEADER
from acidclean.shared.bus.codec import (
    CE_ID,
    CE_SOURCE,
    CE_SPECVERSION,
    CE_SUBJECT,
    CE_TIME,
    CE_TYPE,
    CONTENT_TYPE,
    CONTENT_TYPE_HEADER,
    DUE_AT,
    SPECVERSION,
    due_at_ms,
)
from acidclean.shared.bus.codec import CORRELATION_ID as CORRELATION_HEADER


def _anchored(pattern: str) -> str:
    # The models' patterns run on Rust's regex, where ``$`` is the end of the text; in Python's ``re``
    # it also matches before a final newline, which the models refuse.
    return pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern


def _body(pattern: str) -> str:
    return pattern.removeprefix("^").removesuffix("$")


# Canonical lower-case UUIDs only: the text is then what str(uuid.UUID(text)) gives, so ids compare
# as the models' would. Other spellings the models accept go to the models. Checked all at once for
# an event's ids, and tenant, table and partition by one regex over the key they make: a pattern per
# field cost more than the rest of the decoding.
Uuid = Annotated[str, msgspec.Meta(min_length=36, max_length=36)]
Tenant = str
TableName = Annotated[str, msgspec.Meta(max_length=257)]
PartitionSpec = Annotated[str, msgspec.Meta(max_length=4096)]
_TENANT = re.compile(_anchored(TENANT_PATTERN))
_PARTITION = re.compile(_anchored(PARTITION_PATTERN))
_KEY = re.compile(f"{_body(TENANT_PATTERN)}/{_body(TABLE_PATTERN)}(?:/{_body(PARTITION_PATTERN)})?\\Z")
# Every lower-case hex digit to 'x', '-' to itself, any other byte to '?': a canonical UUID becomes
# _UUID_SHAPE (one bytes.translate for all of an event's ids; a regex cost three times as much).
_UUID_BYTES = bytes(
    ord("x") if chr(byte) in "0123456789abcdef" else byte if chr(byte) == "-" else ord("?") for byte in range(256)
)
_UUID_SHAPE = b"xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
NonEmpty = Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]
DirectoryName = Annotated[str, msgspec.Meta(min_length=1, max_length=1024)]
Moment = Annotated[datetime, msgspec.Meta(tz=True)]
# The lock types and states Hive's metastore names; any other word (valid for the models if it matches
# ^[A-Z_]{1,32}$) sends the record to the models.
LockType = Literal["SHARED_READ", "SHARED_WRITE", "EXCLUSIVE", "EXCL_WRITE", "EXCL_DROP", "SEMI_SHARED"]
LockState = Literal["ACQUIRED", "WAITING", "ABORT", "NOT_ACQUIRED", "TIMED_OUT"]
NonNegative = Annotated[int, msgspec.Meta(ge=0)]
Positive = Annotated[int, msgspec.Meta(ge=1)]
# msgspec rounds a seventh fractional digit of a second, pydantic cuts it: such a record goes to the models.
_SUB_MICROSECOND = re.compile(rb"\.\d{7}")


# gc=False: the structs hold only text, numbers, times and lists of them, never a cycle, so the cyclic
# collector need not track the hundreds of thousands an audit keeps (decoding measured 3-5% faster).
class _Strict(msgspec.Struct, forbid_unknown_fields=True, frozen=True, gc=False):
    pass


class WireLock(_Strict, frozen=True):
    lock_id: NonNegative
    lock_type: LockType
    state: LockState
    user: Annotated[str, msgspec.Meta(max_length=1024)]
    host: Annotated[str, msgspec.Meta(max_length=1024)]
    txn_id: NonNegative | None = None
    acquired_at: Moment | None = None

    def model(self) -> LockSnapshotEntry:
        """The validated model, built only for the locks a printed row shows."""
        return LockSnapshotEntry(
            lock_id=self.lock_id,
            txn_id=self.txn_id,
            lock_type=self.lock_type,
            state=self.state,
            user=self.user,
            host=self.host,
            acquired_at=self.acquired_at,
        )


class WireSharedLocation(_Strict, frozen=True):
    table: Annotated[str, msgspec.Meta(pattern=_anchored(TABLE_PATTERN), max_length=257)]
    location: NonEmpty
    partition: Annotated[str, msgspec.Meta(pattern=_anchored(PARTITION_PATTERN), max_length=4096)] | None = None


class WireVacuumedTable(_Strict, frozen=True):
    location: NonEmpty
    table_id: NonNegative | None = None
    create_time: NonNegative | None = None
    partition_create_time: NonNegative | None = None


class WireDirectory(_Strict, frozen=True):
    name: DirectoryName
    file_count: NonNegative
    bytes: NonNegative


class _WireEvent(_Strict, kw_only=True, frozen=True):
    """EventBase's fields. ``schema_version`` and ``event_id`` are required, as on the wire."""

    kind: ClassVar[str] = ""
    schema_version: Literal[1]
    event_id: Uuid
    tenant: Tenant
    table: TableName | None
    partition: PartitionSpec | None = None
    occurred_at: Moment
    causation_id: Uuid | None = None
    correlation_id: Uuid | None = None

    def ids(self) -> str:
        """The ids whose canonical form is still to check, one after the other."""
        return self.event_id + (self.causation_id or "") + (self.correlation_id or "")

    def consistent(self) -> bool:
        """The model's own rules (and UTC times, which the models would convert)."""
        return self.occurred_at.tzinfo is timezone.utc


class WireVacuumCommitted(_WireEvent, kw_only=True, frozen=True):
    kind: ClassVar[str] = "vacuum"
    table: TableName
    correlation_id: Uuid
    location: NonEmpty
    compaction_type: Literal["MINOR", "MAJOR"]
    new_directories: Annotated[list[DirectoryName], msgspec.Meta(min_length=1)]
    obsolete_directories: list[DirectoryName] = []
    highest_write_id: NonNegative
    lock_snapshot: list[WireLock]
    vacuum_job_id: NonEmpty
    locks_observed: NonNegative | None = None
    next_txn_id: Positive | None = None
    request_id: Uuid | None = None
    overlapping_directories: list[DirectoryName] = []
    shared_locations: Annotated[list[WireSharedLocation], msgspec.Meta(max_length=10000)] | None = None
    table_identity: WireVacuumedTable | None = None

    def ids(self) -> str:
        return self.event_id + (self.causation_id or "") + (self.request_id or "")  # correlation_id must equal it

    def consistent(self) -> bool:
        return (
            self.occurred_at.tzinfo is timezone.utc
            and self.correlation_id == self.event_id
            and (self.locks_observed is None or self.locks_observed == len(self.lock_snapshot))
        )


class WireDelayEnvelope(_WireEvent, kw_only=True, frozen=True):
    kind: ClassVar[str] = "delay"
    table: TableName
    correlation_id: Uuid
    vacuum: WireVacuumCommitted
    attempt: Positive
    due_at: Moment
    locks_held: list[WireLock]
    check_error: Annotated[str, msgspec.Meta(max_length=4096)] | None = None
    stuck: bool = False
    stuck_since: Moment | None = None
    open_txns: Annotated[list[int], msgspec.Meta(max_length=100)] = []

    def ids(self) -> str:
        # correlation_id must equal the vacuum's id, checked with the vacuum's
        return self.event_id + (self.causation_id or "") + self.vacuum.ids()

    def consistent(self) -> bool:
        vacuum = self.vacuum
        return (
            self.occurred_at.tzinfo is timezone.utc
            and self.due_at.tzinfo is timezone.utc
            and vacuum.consistent()
            and self.tenant == vacuum.tenant
            and self.table == vacuum.table
            and self.partition == vacuum.partition
            and self.correlation_id == vacuum.event_id
            and self.stuck == (self.stuck_since is not None)
            and (self.stuck_since is None or self.stuck_since.tzinfo is timezone.utc)
        )


class WireWaitingVacuum(_Strict, kw_only=True, frozen=True):
    vacuum: WireVacuumCommitted
    attempt: Positive
    locks_held: list[WireLock]
    check_error: Annotated[str, msgspec.Meta(max_length=4096)] | None = None
    stuck: bool = False
    stuck_since: Moment | None = None
    open_txns: Annotated[list[int], msgspec.Meta(max_length=100)] = []


class WireUnchangedWaiting(_Strict, frozen=True):
    lock_ids: Annotated[list[int], msgspec.Meta(min_length=1)]
    checks: NonNegative
    oldest_commit: Moment
    oldest_unstuck_commit: Moment | None

    def describes(self, waiting: Sequence[WireWaitingVacuum]) -> bool:
        """What :func:`acidclean.schemas.events.unchanged_problem` checks, and UTC times (the models
        would convert others)."""
        lock_ids: set[int] = set()
        for item in waiting:
            if not item.locks_held or item.check_error is not None or item.open_txns:
                return False
            lock_ids.update(lock.lock_id for lock in item.locks_held)
        unstuck = [item.vacuum.occurred_at for item in waiting if not item.stuck]
        oldest_unstuck = self.oldest_unstuck_commit
        return (
            self.lock_ids == sorted(lock_ids)
            and self.oldest_commit.tzinfo is timezone.utc
            and (oldest_unstuck is None or oldest_unstuck.tzinfo is timezone.utc)
            and self.oldest_commit == min(item.vacuum.occurred_at for item in waiting)
            and oldest_unstuck == (min(unstuck) if unstuck else None)
        )


class WireDelayedVacuums(_WireEvent, kw_only=True, frozen=True):
    kind: ClassVar[str] = "delayed"
    table: TableName
    due_at: Moment
    waiting: Annotated[list[WireWaitingVacuum], msgspec.Meta(min_length=1, max_length=MAX_WAITING_PER_ENVELOPE)]
    merged_from: list[Uuid] = []
    unchanged: WireUnchangedWaiting | None = None

    def ids(self) -> str:
        # correlation_id must be absent (consistent() checks it); each vacuum's ids are checked with it
        return (
            self.event_id
            + (self.causation_id or "")
            + "".join(self.merged_from)
            + "".join(item.vacuum.ids() for item in self.waiting)
        )

    def consistent(self) -> bool:
        key = (self.tenant, self.table, self.partition)
        vacuums = set()
        for item in self.waiting:
            vacuum = item.vacuum
            if (
                not vacuum.consistent()
                or (vacuum.tenant, vacuum.table, vacuum.partition) != key
                or item.stuck != (item.stuck_since is not None)
                or (item.stuck_since is not None and item.stuck_since.tzinfo is not timezone.utc)
            ):
                return False
            vacuums.add(vacuum.event_id)
        return (
            self.correlation_id is None
            and len(vacuums) == len(self.waiting)
            and self.occurred_at.tzinfo is timezone.utc
            and self.due_at.tzinfo is timezone.utc
            and (self.unchanged is None or self.unchanged.describes(self.waiting))
        )


class WireCleanupStarted(_WireEvent, kw_only=True, frozen=True):
    kind: ClassVar[str] = "started"
    table: TableName
    causation_id: Uuid
    correlation_id: Uuid
    directories_to_remove: Annotated[list[WireDirectory], msgspec.Meta(min_length=1)]
    attempt: Positive
    cleaner_id: NonEmpty

    def consistent(self) -> bool:
        names = {directory.name for directory in self.directories_to_remove}
        return self.occurred_at.tzinfo is timezone.utc and len(names) == len(self.directories_to_remove)


class WireCleanupDone(_WireEvent, kw_only=True, frozen=True):
    kind: ClassVar[str] = "done"
    table: TableName
    correlation_id: Uuid
    directories_removed: list[WireDirectory]
    time_waited_ms: NonNegative
    attempts: Positive
    cleaner_id: NonEmpty
    dry_run: bool = False
    note: Annotated[str, msgspec.Meta(max_length=4096)] | None = None


class WireRawHeader(_Strict, frozen=True):
    name: Annotated[str, msgspec.Meta(max_length=1024)]
    value_b64: str | None


class WireSourceRecord(_Strict, frozen=True):
    topic: Annotated[str, msgspec.Meta(max_length=1024)]
    partition: NonNegative
    offset: NonNegative
    key_b64: str | None
    value_b64: str | None
    headers: list[WireRawHeader]
    timestamp_ms: int | None = None
    value_size: NonNegative | None = None
    truncated: bool = False


RejectionCode = Literal[
    "not_json",
    "invalid_event",
    "unknown_schema_version",
    "unknown_event_type",
    "key_mismatch",
    "header_mismatch",
    "unsafe_path",
    "other_tenant",
    "unknown_table",
    "not_obsolete",
    "invalid_due_time",
    "other",
]


class WireCleanupRejected(_WireEvent, kw_only=True, frozen=True):
    kind: ClassVar[str] = "rejected"
    table: TableName | None = None
    reason_code: RejectionCode
    reason: Annotated[str, msgspec.Meta(min_length=1, max_length=8192)]
    rejected_by: NonEmpty
    rejected_event_type: Annotated[str, msgspec.Meta(max_length=256)] | None = None
    source: WireSourceRecord


class WireVacuumFigures(_Strict, frozen=True):
    delta_count: NonNegative
    delete_delta_count: NonNegative
    delta_bytes: NonNegative
    base_bytes: NonNegative
    aborted_txns: NonNegative


class WireVacuumThresholds(_Strict, frozen=True):
    delta_num: Positive
    delta_pct: Annotated[float, msgspec.Meta(ge=0)]
    aborted_txns: Positive


class WireRequestedBy(_Strict, frozen=True):
    initiator_id: NonEmpty
    trigger: Literal["event", "sweep", "hive_queue"]


class WireVacuumRequested(_WireEvent, kw_only=True, frozen=True):
    kind: ClassVar[str] = "requested"
    table: TableName
    correlation_id: Uuid
    location: NonEmpty
    compaction_type: Literal["MINOR", "MAJOR"]
    reason: NonEmpty
    figures: WireVacuumFigures
    thresholds: WireVacuumThresholds
    requested_by: WireRequestedBy
    requested_at: Moment
    hive_compaction_id: Positive | None = None

    def ids(self) -> str:
        return self.event_id + (self.causation_id or "")  # correlation_id must equal it

    def consistent(self) -> bool:
        return (
            self.occurred_at.tzinfo is timezone.utc
            and self.requested_at.tzinfo is timezone.utc
            and self.correlation_id == self.event_id
        )


class WireVacuumStarted(_WireEvent, kw_only=True, frozen=True):
    kind: ClassVar[str] = "running"
    table: TableName
    correlation_id: Uuid
    vacuum_service_id: NonEmpty
    started_at: Moment

    def consistent(self) -> bool:
        return self.occurred_at.tzinfo is timezone.utc and self.started_at.tzinfo is timezone.utc


VacuumFailureCode = Literal["error", "nothing_to_vacuum", "table_gone", "refused"]
_ONE_LINE = re.compile(r"[^\r\n]+\Z")


class WireVacuumFailed(_WireEvent, kw_only=True, frozen=True):
    kind: ClassVar[str] = "failed"
    table: TableName
    correlation_id: Uuid
    reason_code: VacuumFailureCode
    message: NonEmpty
    failed_at: Moment

    def consistent(self) -> bool:
        return (
            self.occurred_at.tzinfo is timezone.utc
            and self.failed_at.tzinfo is timezone.utc
            and _ONE_LINE.fullmatch(self.message) is not None
        )


WireEvent = (
    WireVacuumCommitted
    | WireDelayEnvelope
    | WireDelayedVacuums
    | WireCleanupStarted
    | WireCleanupDone
    | WireCleanupRejected
    | WireVacuumRequested
    | WireVacuumStarted
    | WireVacuumFailed
)
# The wire struct of each event model, by the model's class name (the tests check they declare the same fields).
WIRE_STRUCTS: dict[str, type[WireEvent]] = {
    "VacuumCommitted": WireVacuumCommitted,
    "DelayEnvelope": WireDelayEnvelope,
    "DelayedVacuums": WireDelayedVacuums,
    "CleanupStarted": WireCleanupStarted,
    "CleanupDone": WireCleanupDone,
    "CleanupRejected": WireCleanupRejected,
    "VacuumRequested": WireVacuumRequested,
    "VacuumStarted": WireVacuumStarted,
    "VacuumFailed": WireVacuumFailed,
}
_DECODERS: dict[str, msgspec.json.Decoder[Any]] = {
    name: msgspec.json.Decoder(struct) for name, struct in WIRE_STRUCTS.items()
}
# The headers decode() reads or checks. A record with any other header, or one header twice, goes to
# the models (they ignore other headers, but checking that they are UTF-8 here would cost more than it saves).
_KNOWN_HEADERS = frozenset(
    {
        CE_SPECVERSION,
        CE_ID,
        CE_SOURCE,
        CE_TYPE,
        CE_TIME,
        CE_SUBJECT,
        CONTENT_TYPE_HEADER,
        CORRELATION_HEADER,
        CAUSATION_HEADER,
        DUE_AT,
        ATTEMPT_HEADER,
    }
)
_SPECVERSION = SPECVERSION.encode()
_DUE_KINDS = frozenset({"delay", "delayed"})  # the events whose x-due-at header must state their due_at
MAX_VALID_KEYS = 1_000_000  # one per table or partition seen; past it, keys are checked every time
_CONTENT_TYPE = CONTENT_TYPE.encode()


def fast_decode(
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] | None,
    decoders: Mapping[bytes, tuple[str, msgspec.json.Decoder[Any]]],
    valid_keys: set[str],
) -> WireEvent | None:
    """The event of a record, decoded without the models, or None when the models must decide.

    ``decoders`` maps the ``ce_type`` values that belong on the record's topic to their model's name
    and decoder (see :func:`decoders_for`). ``valid_keys`` remembers the keys (tenant, table and
    partition) already found valid, so each is checked once: give each reader its own set. None is
    also the answer for every malformed record.
    """
    if not value or not headers:
        return None
    found = dict(headers)
    if len(found) != len(headers) or not found.keys() <= _KNOWN_HEADERS:
        return None
    get = found.get
    decoder = decoders.get(get(CE_TYPE) or b"")
    if (
        decoder is None
        or get(CE_SPECVERSION) != _SPECVERSION
        or get(CONTENT_TYPE_HEADER, _CONTENT_TYPE) != _CONTENT_TYPE
        or _SUB_MICROSECOND.search(value)
    ):
        return None
    try:
        event: WireEvent = decoder[1].decode(value)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    tenant, table, partition = event.tenant, event.table, event.partition
    if table is None:
        expected_key = tenant
        if not _TENANT.fullmatch(tenant) or (partition is not None and not _PARTITION.fullmatch(partition)):
            return None
    else:
        expected_key = tenant + "/" + table if partition is None else f"{tenant}/{table}/{partition}"
        if expected_key not in valid_keys:
            if "/" in tenant or "/" in table or not _KEY.fullmatch(expected_key):
                return None  # (the key's regex must see tenant and table whole: neither may hold a '/')
            if len(valid_keys) < MAX_VALID_KEYS:
                valid_keys.add(expected_key)
    ids = event.ids()
    if ids.encode().translate(_UUID_BYTES) != _UUID_SHAPE * (len(ids) // 36) or not event.consistent():
        return None
    key_bytes = expected_key.encode()
    correlation, causation = event.correlation_id, event.causation_id
    if (
        key != key_bytes
        or get(CE_SUBJECT) != key_bytes
        or get(CE_ID) != event.event_id.encode()
        or get(CORRELATION_HEADER) != (None if correlation is None else correlation.encode())
        or get(CAUSATION_HEADER) != (None if causation is None else causation.encode())
    ):
        return None
    source = get(CE_SOURCE)
    if not source or not (source.isascii() or _utf8(source)):
        return None
    ce_time = get(CE_TIME)
    if ce_time is None:
        return None
    try:
        moment = datetime.fromisoformat(ce_time.decode().replace("Z", "+00:00"))
    except ValueError:  # UnicodeDecodeError is one
        return None
    if moment.tzinfo is None or moment != event.occurred_at:
        return None
    if event.kind in _DUE_KINDS:  # (a class attribute: cheaper than isinstance)
        delayed: Any = event
        due = get(DUE_AT)
        if due is None or len(due) != 8 or int.from_bytes(due, "big", signed=True) != due_at_ms(delayed.due_at):
            return None
    return event


def decoders_for(event_types: Mapping[str, str]) -> dict[bytes, tuple[str, msgspec.json.Decoder[Any]]]:
    """The decoder argument of :func:`fast_decode`, from ``{ce_type: model class name}``."""
    return {ce_type.encode(): (name, _DECODERS[name]) for ce_type, name in event_types.items() if name in _DECODERS}


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
