"""A delay record carrying several waiting vacuums of one key (``DelayedVacuums``), read and written
without the event models.

A cleaner with tens of thousands of vacuums parked behind held locks re-checks every one of them each
cleanup interval. Through the pydantic models, one vacuum's decode, envelope and encode cost 0.3-0.5 ms
of Python, which caps a process at a few thousand parked vacuums. Here a ``DelayedVacuums`` is read
with msgspec into thin views (the few fields a re-check needs) while each vacuum's JSON is kept as raw
bytes, and a not-ready vacuum is written back with those same bytes: a vacuum is parsed by the models
only when it leaves the group (found ready, or refused).

Nothing here decides safety. A group whose bytes do not read exactly as expected gives ``None`` and
the caller decodes it with the models (which refuse it with the reason, or accept it and
:func:`group_of_model` reads it again from the models' own JSON). A vacuum found ready leaves the group
as an ordinary :class:`DelayEnvelope` due at once, checked again and cleaned by the usual path, where
the models validate it in full.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

import msgspec

from acidclean.schemas.common import derived_event_id, event_key
from acidclean.schemas.events import MAX_WAITING_PER_ENVELOPE, DelayedVacuums, DelayEnvelope
from acidclean.shared.bus.records import RawRecord


class LockRef(msgspec.Struct):
    """A lock snapshot entry, read for its id only (its bytes are kept as they are)."""

    lock_id: int


class VacuumView(msgspec.Struct):
    """The fields of a waiting vacuum that a re-check reads (every other field stays in its bytes)."""

    event_id: str
    tenant: str
    table: str
    occurred_at: datetime
    new_directories: list[str]
    lock_snapshot: list[msgspec.Raw]
    partition: str | None = None
    next_txn_id: int | None = None


class WireWaiting(msgspec.Struct, forbid_unknown_fields=True):
    """One :class:`acidclean.schemas.events.WaitingVacuum` on the wire, its vacuum and locks as bytes."""

    vacuum: msgspec.Raw
    attempt: int
    locks_held: list[msgspec.Raw]
    check_error: str | None = None
    stuck: bool = False
    stuck_since: str | None = None
    open_txns: list[int] = []


class WireGroup(msgspec.Struct, forbid_unknown_fields=True):
    """A :class:`acidclean.schemas.events.DelayedVacuums` on the wire (same field names and order)."""

    schema_version: int
    event_id: str
    tenant: str
    table: str
    occurred_at: str
    causation_id: str | None
    correlation_id: None
    due_at: str
    waiting: list[WireWaiting]
    merged_from: list[str] = []
    partition: str | None = None


class WireEnvelope(msgspec.Struct, forbid_unknown_fields=True):
    """A :class:`acidclean.schemas.events.DelayEnvelope` on the wire, its vacuum and locks as bytes."""

    schema_version: int
    event_id: str
    tenant: str
    table: str
    occurred_at: str
    causation_id: str | None
    correlation_id: str
    vacuum: msgspec.Raw
    attempt: int
    due_at: str
    locks_held: list[msgspec.Raw]
    check_error: str | None = None
    stuck: bool = False
    stuck_since: str | None = None
    open_txns: list[int] = []
    partition: str | None = None


_GROUP = msgspec.json.Decoder(WireGroup)
_ENVELOPE = msgspec.json.Decoder(WireEnvelope)
_VIEW = msgspec.json.Decoder(VacuumView)
_LOCK = msgspec.json.Decoder(LockRef)
_ENCODER = msgspec.json.Encoder()


@dataclass(frozen=True)
class Member:
    """One waiting vacuum of a group: its wire entry, its view and its snapshot's lock ids."""

    wire: WireWaiting
    view: VacuumView
    lock_ids: tuple[int, ...]

    @property
    def vacuum_id(self) -> str:
        return self.view.event_id


@dataclass(frozen=True)
class WaitingGroup:
    """A ``DelayedVacuums`` as the cleaner's loop reads it: what the loop and a re-check need."""

    event_id: uuid.UUID
    tenant: str
    table: str
    partition: str | None
    occurred_at: datetime
    due_at: datetime
    members: tuple[Member, ...]
    # Read from a DelayEnvelope (one vacuum): written back as one while it waits alone, and handled by
    # the models' path as soon as it may be ready.
    single: bool = False
    event_type = DelayedVacuums.event_type
    correlation_id = None

    @property
    def key(self) -> str:
        return event_key(self.tenant, self.table, self.partition)

    @property
    def oldest_commit(self) -> datetime:
        return min(member.view.occurred_at for member in self.members)


def read_group(record: RawRecord, tenant: str) -> WaitingGroup | None:
    """The group in ``record``, or None when the models must decide (malformed, another tenant, a
    key or id that does not match, a vacuum of another key, a vacuum listed twice)."""
    if not record.value:
        return None
    try:
        wire = _GROUP.decode(record.value)
        occurred_at = _moment(wire.occurred_at)
        due_at = _moment(wire.due_at)
        members = tuple(_member(entry) for entry in wire.waiting)
        event_id = uuid.UUID(wire.event_id)
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError):
        return None
    if wire.schema_version != 1 or wire.tenant != tenant or not members or len(members) > MAX_WAITING_PER_ENVELOPE:
        return None
    if record.key != event_key(wire.tenant, wire.table, wire.partition).encode():
        return None
    if str(event_id) != wire.event_id or dict(record.headers).get("ce_id") != wire.event_id.encode():
        return None
    ids = {member.vacuum_id for member in members}
    if len(ids) != len(members) or any(
        (m.view.tenant, m.view.table, m.view.partition) != (wire.tenant, wire.table, wire.partition) for m in members
    ):
        return None
    return WaitingGroup(event_id, wire.tenant, wire.table, wire.partition, occurred_at, due_at, members)


def read_envelope(record: RawRecord, tenant: str) -> WaitingGroup | None:
    """A DelayEnvelope read as a group of one (``single``), or None when the models must decide."""
    if not record.value:
        return None
    try:
        wire = _ENVELOPE.decode(record.value)
        occurred_at = _moment(wire.occurred_at)
        due_at = _moment(wire.due_at)
        entry = WireWaiting(
            vacuum=wire.vacuum,
            attempt=wire.attempt,
            locks_held=wire.locks_held,
            check_error=wire.check_error,
            stuck=wire.stuck,
            stuck_since=wire.stuck_since,
            open_txns=wire.open_txns,
        )
        member = _member(entry)
        event_id = uuid.UUID(wire.event_id)
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError):
        return None
    view = member.view
    if wire.schema_version != 1 or wire.tenant != tenant or wire.correlation_id != view.event_id:
        return None
    if (view.tenant, view.table, view.partition) != (wire.tenant, wire.table, wire.partition):
        return None
    if record.key != event_key(wire.tenant, wire.table, wire.partition).encode():
        return None
    if str(event_id) != wire.event_id or dict(record.headers).get("ce_id") != wire.event_id.encode():
        return None
    return WaitingGroup(event_id, wire.tenant, wire.table, wire.partition, occurred_at, due_at, (member,), True)


def build_envelope(
    *,
    tenant: str,
    table: str,
    partition: str | None,
    entry: WireWaiting,
    source: uuid.UUID,
    checked_at: datetime,
    due_at: datetime,
) -> DelayEnvelope:
    """The DelayEnvelope of a vacuum waiting alone, written without the models (what
    :func:`acidclean.consumers.scheduling.delay_envelope` makes from the envelope ``source``)."""
    vacuum_id = vacuum_id_of(entry)
    event_id = derived_event_id(source, "delay")
    wire = WireEnvelope(
        schema_version=1,
        event_id=str(event_id),
        tenant=tenant,
        table=table,
        partition=partition,
        occurred_at=iso(checked_at),
        causation_id=str(source),
        correlation_id=vacuum_id,
        vacuum=entry.vacuum,
        attempt=entry.attempt,
        due_at=iso(due_at),
        locks_held=entry.locks_held,
        check_error=entry.check_error,
        stuck=entry.stuck,
        stuck_since=entry.stuck_since,
        open_txns=entry.open_txns,
    )
    # Every field given: model_construct would otherwise call the default factories, and pydantic
    # inspects each factory's signature on every call (a text signature parsed with ast for ``list``).
    shell = DelayEnvelope.model_construct(
        schema_version=1,
        event_id=event_id,
        tenant=tenant,
        table=table,
        partition=partition,
        occurred_at=checked_at,
        causation_id=source,
        correlation_id=uuid.UUID(vacuum_id),
        vacuum=None,
        attempt=entry.attempt,
        due_at=due_at,
        locks_held=[],
        check_error=entry.check_error,
        stuck=entry.stuck,
        stuck_since=None,
        open_txns=[],
    )
    shell.attach_wire_value(_ENCODER.encode(wire))
    return shell


def group_of_model(event: DelayedVacuums) -> WaitingGroup:
    """A group the models accepted (when :func:`read_group` did not): read again from their JSON."""
    wire = _GROUP.decode(event.model_dump_json())
    return WaitingGroup(
        event.event_id,
        event.tenant,
        event.table,
        event.partition,
        event.occurred_at,
        event.due_at,
        tuple(_member(entry) for entry in wire.waiting),
    )


def vacuum_id_of(entry: WireWaiting) -> str:
    """The event id of an entry's vacuum."""
    return _VIEW.decode(entry.vacuum).event_id


def _member(entry: WireWaiting) -> Member:
    view = _VIEW.decode(entry.vacuum)
    return Member(entry, view, tuple(_LOCK.decode(lock).lock_id for lock in view.lock_snapshot))


def _moment(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone")
    return moment.astimezone(timezone.utc)


def iso(moment: datetime) -> str:
    """A UTC time as the models write it."""
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def still_waiting(
    member: Member,
    *,
    held_ids: set[int] | None,
    check_error: str | None,
    open_txns: Sequence[int],
    now: datetime,
    max_wait_s: float,
) -> WireWaiting:
    """The member's entry after one more check that found it not ready: the locks of its snapshot
    still listed (or, when the metastore could not answer, the ones last known), its open transactions,
    and stuck once it has waited longer than ``max_wait_s``."""
    wire = member.wire
    if held_ids is None:
        held = wire.locks_held
    else:
        snapshot = zip(member.view.lock_snapshot, member.lock_ids, strict=True)
        held = [raw for raw, lock_id in snapshot if lock_id in held_ids]
    stuck = (now - member.view.occurred_at).total_seconds() >= max_wait_s
    stuck_since = (wire.stuck_since or iso(now)) if stuck else None
    return WireWaiting(
        vacuum=wire.vacuum,
        attempt=wire.attempt + 1,
        locks_held=held,
        check_error=check_error,
        stuck=stuck,
        stuck_since=stuck_since,
        open_txns=list(open_txns[:100]),
    )


def entry_of_envelope(envelope: DelayEnvelope) -> WireWaiting:
    """A classic delay envelope's vacuum as a group entry (its vacuum encoded once, by the models)."""
    return WireWaiting(
        vacuum=msgspec.Raw(envelope.vacuum.model_dump_json().encode()),
        attempt=envelope.attempt,
        locks_held=[msgspec.Raw(entry.model_dump_json().encode()) for entry in envelope.locks_held],
        check_error=envelope.check_error,
        stuck=envelope.stuck,
        stuck_since=None if envelope.stuck_since is None else iso(envelope.stuck_since),
        open_txns=list(envelope.open_txns),
    )


@dataclass(frozen=True)
class GroupOut:
    """A ``DelayedVacuums`` built without the models: the model shell (for the codec's headers and the
    logs) carries the bytes to publish."""

    event: DelayedVacuums | DelayEnvelope
    entries: tuple[WireWaiting, ...]


def build_groups(
    *,
    tenant: str,
    table: str,
    partition: str | None,
    entries: Sequence[WireWaiting],
    sources: Sequence[uuid.UUID],
    checked_at: datetime,
    due_at: datetime,
    vacuum_ids: Sequence[str] | None = None,
) -> list[GroupOut]:
    """The ``DelayedVacuums`` records of one key's waiting vacuums, at most
    :data:`MAX_WAITING_PER_ENVELOPE` each. Ids are derived from the first source and the vacuums, so a
    replay of the same check publishes the same ids. ``vacuum_ids``: the entries' vacuum ids when the
    caller already has them (else they are read from the entries)."""
    outs = []
    if vacuum_ids is None:
        vacuum_ids = [vacuum_id_of(entry) for entry in entries]
    for start in range(0, len(entries), MAX_WAITING_PER_ENVELOPE):
        chunk = entries[start : start + MAX_WAITING_PER_ENVELOPE]
        ids = vacuum_ids[start : start + MAX_WAITING_PER_ENVELOPE]
        event_id = derived_event_id(sources[0], "delayed-vacuums:" + ",".join(sorted(ids)))
        wire = WireGroup(
            schema_version=1,
            event_id=str(event_id),
            tenant=tenant,
            table=table,
            partition=partition,
            occurred_at=iso(checked_at),
            causation_id=str(sources[0]),
            correlation_id=None,
            due_at=iso(due_at),
            waiting=list(chunk),
            merged_from=[str(source) for source in sources],
        )
        shell = DelayedVacuums.model_construct(
            schema_version=1,
            event_id=event_id,
            tenant=tenant,
            table=table,
            partition=partition,
            occurred_at=checked_at,
            causation_id=sources[0],
            correlation_id=None,
            due_at=due_at,
            waiting=[],
            merged_from=list(sources),
        )
        shell.attach_wire_value(_ENCODER.encode(wire))
        outs.append(GroupOut(shell, tuple(chunk)))
    return outs
