"""A delay record carrying several waiting vacuums of one key (``DelayedVacuums``), read and written
without the event models.

A cleaner with tens of thousands of vacuums parked behind held locks re-checks every one of them each
cleanup interval. Through the pydantic models, one vacuum's decode, envelope and encode cost 0.3-0.5 ms
of Python, which caps a process at a few thousand parked vacuums. Here a ``DelayedVacuums`` is read
with msgspec into thin views (the few fields a re-check needs) while each vacuum's JSON is kept as raw
bytes, and a not-ready vacuum is written back with those same bytes: a vacuum is parsed by the models
only when it leaves the group (found ready, or refused).

A ``DelayedVacuums`` whose vacuums all wait on snapshot locks alone carries an ``unchanged`` summary
(the ids of those locks, how many checks found them all still listed, the oldest commits). A check
that finds every one of those locks listed cannot find any vacuum ready: it writes the same entries on
unread (:func:`carry_unchanged`), ``checks`` one higher. Every
:func:`~acidclean.schemas.events.MAX_UNCHANGED_CHECKS` checks or fewer, and whenever a lock is gone,
the vacuums are read and checked in full.

Nothing here decides safety. A group whose bytes do not read exactly as expected gives ``None`` and
the caller decodes it with the models (which refuse it with the reason, or accept it and
:func:`group_of_model` reads it again from the models' own JSON). A vacuum found ready leaves the group
as an ordinary :class:`DelayEnvelope` due at once, checked again and cleaned by the usual path, where
the models validate it in full.
"""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import TypeVar

import msgspec

from acidclean.schemas.common import derived_event_id, event_key
from acidclean.schemas.events import (
    MAX_UNCHANGED_CHECKS,
    MAX_WAITING_PER_ENVELOPE,
    DelayedVacuums,
    DelayEnvelope,
)
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


class VacuumKey(msgspec.Struct):
    """A waiting vacuum's id and key: what a group read without its vacuums still checks of each."""

    event_id: str
    tenant: str
    table: str
    partition: str | None = None


class WireWaiting(msgspec.Struct, forbid_unknown_fields=True):
    """One :class:`acidclean.schemas.events.WaitingVacuum` on the wire, its vacuum and locks as bytes."""

    vacuum: msgspec.Raw
    attempt: int
    locks_held: list[msgspec.Raw]
    check_error: str | None = None
    stuck: bool = False
    stuck_since: str | None = None
    open_txns: list[int] = []


class WireUnchanged(msgspec.Struct, forbid_unknown_fields=True):
    """A :class:`acidclean.schemas.events.UnchangedWaiting` on the wire."""

    lock_ids: list[int]
    checks: int
    oldest_commit: str
    oldest_unstuck_commit: str | None


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
    unchanged: WireUnchanged | None = None
    partition: str | None = None


class WireGroupCarried(WireGroup):
    """A ``DelayedVacuums`` on the wire with each waiting vacuum's entry kept as bytes, unread: what a
    check that carries it on unread reads and writes (:func:`carry_on_unread`)."""

    waiting: list[msgspec.Raw]  # type: ignore[assignment]


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
_GROUP_CARRIED = msgspec.json.Decoder(WireGroupCarried)
_ENVELOPE = msgspec.json.Decoder(WireEnvelope)
_VIEW = msgspec.json.Decoder(VacuumView)
_VACUUM_KEY = msgspec.json.Decoder(VacuumKey)
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
class Unchanged:
    """A group's ``unchanged`` summary, read."""

    lock_ids: tuple[int, ...]
    checks: int
    oldest_commit: datetime
    oldest_unstuck_commit: datetime | None
    wire: WireUnchanged = field(compare=False)


class UnreadableGroup(ValueError):
    """A group's vacuums, read only when a check needed them, are not what a group must hold: the
    models decide (they refuse it with the reason)."""


@dataclass(frozen=True)
class WaitingGroup:
    """A ``DelayedVacuums`` as the cleaner's loop reads it: what the loop and a re-check need.

    ``members`` (each vacuum's view and lock ids) are read when first asked for: a group that may be
    carried on unread (:attr:`may_carry_unread`) is never read while its locks stay listed.
    """

    event_id: uuid.UUID
    tenant: str
    table: str
    partition: str | None
    occurred_at: datetime
    due_at: datetime
    entries: tuple[WireWaiting, ...]
    # Read from a DelayEnvelope (one vacuum): written back as one while it waits alone, and handled by
    # the models' path as soon as it may be ready.
    single: bool = False
    unchanged: Unchanged | None = None
    # The delay partition its record was read from (None: decoded by the models): a group carried on
    # unread may go on in a bundle of that partition, where its key's records are.
    read_from: int | None = None
    event_type = DelayedVacuums.event_type
    correlation_id = None

    @property
    def key(self) -> str:
        return event_key(self.tenant, self.table, self.partition)

    @property
    def members(self) -> tuple[Member, ...]:
        """Every vacuum, read once; raises :class:`UnreadableGroup` when they do not make a valid group.
        (Not ``functools.cached_property``: on Python 3.11 it takes one lock shared by every instance,
        which the worker threads queued on.)"""
        members: tuple[Member, ...] | None = self.__dict__.get("_members")
        if members is None:
            members = self._read_members()
            self.knows_members(members)
        return members

    def knows_members(self, members: tuple[Member, ...]) -> None:
        """Keep ``members`` as the group's vacuums, read and checked by the caller."""
        self.__dict__["_members"] = members  # a frozen dataclass: the cache bypasses its __setattr__

    def _read_members(self) -> tuple[Member, ...]:
        try:
            members = tuple(_member(entry) for entry in self.entries)
        except (msgspec.ValidationError, msgspec.DecodeError, ValueError) as error:
            raise UnreadableGroup(f"a waiting vacuum does not read: {error}") from error
        problem = _members_problem(self, members)
        if problem is not None:
            raise UnreadableGroup(problem)
        return members

    @property
    def checks(self) -> int:
        """Checks made since the entries were written (each entry's attempt counts the ones before)."""
        return 0 if self.unchanged is None else self.unchanged.checks

    @property
    def may_carry_unread(self) -> bool:
        """Whether a check that finds every lock of the summary listed may write the entries on unread."""
        return self.unchanged is not None and self.unchanged.checks < unchanged_checks_limit(self.key)

    @property
    def oldest_commit(self) -> datetime:
        if self.unchanged is not None:
            return self.unchanged.oldest_commit
        return min(member.view.occurred_at for member in self.members)


def unchanged_checks_limit(key: str) -> int:
    """How many checks in a row may carry a key's group on unread: between half and all of
    ``MAX_UNCHANGED_CHECKS``, spread by key so tables parked together are not all read in full in the
    same interval."""
    half = MAX_UNCHANGED_CHECKS // 2
    return half + zlib.crc32(key.encode()) % (MAX_UNCHANGED_CHECKS - half)


def read_group(record: RawRecord, tenant: str) -> WaitingGroup | None:
    """The group in ``record``, or None when the models must decide (malformed, another tenant, a
    key or id that does not match, a vacuum of another key, a vacuum listed twice)."""
    if not record.value:
        return None
    try:
        wire = _GROUP.decode(record.value)
        occurred_at = _moment(wire.occurred_at)
        due_at = _moment(wire.due_at)
        event_id = uuid.UUID(wire.event_id)
        unchanged = None if wire.unchanged is None else _unchanged(wire.unchanged)
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError):
        return None
    entries = tuple(wire.waiting)
    if wire.schema_version != 1 or wire.tenant != tenant or not entries or len(entries) > MAX_WAITING_PER_ENVELOPE:
        return None
    if record.key != event_key(wire.tenant, wire.table, wire.partition).encode():
        return None
    if str(event_id) != wire.event_id or dict(record.headers).get("ce_id") != wire.event_id.encode():
        return None
    group = WaitingGroup(
        event_id,
        wire.tenant,
        wire.table,
        wire.partition,
        occurred_at,
        due_at,
        entries,
        unchanged=unchanged,
        read_from=record.partition,
    )
    if group.may_carry_unread:
        # Its vacuums are read only if a check needs them (UnreadableGroup: the models decide then);
        # their ids and keys are checked now, so a record mixing keys is refused at once.
        try:
            keys = [_VACUUM_KEY.decode(entry.vacuum) for entry in entries]
        except (msgspec.ValidationError, msgspec.DecodeError):
            return None
        if len({key.event_id for key in keys}) != len(keys) or any(
            (key.tenant, key.table, key.partition) != (wire.tenant, wire.table, wire.partition) for key in keys
        ):
            return None
        return group
    try:
        _ = group.members
    except UnreadableGroup:
        return None
    return group


def _members_problem(group: WaitingGroup, members: tuple[Member, ...]) -> str | None:
    """Why ``members`` cannot be the vacuums of ``group``, or None."""
    if len({member.vacuum_id for member in members}) != len(members):
        return "a vacuum is listed twice"
    if any(
        (m.view.tenant, m.view.table, m.view.partition) != (group.tenant, group.table, group.partition) for m in members
    ):
        return "a vacuum of another tenant, table or partition"
    if group.unchanged is not None:
        expected = summary_of(group.entries, [facts_of(member) for member in members], checks=group.unchanged.checks)
        if expected is None or _unchanged(expected) != group.unchanged:
            return "its unchanged summary does not match its vacuums"
    return None


def _unchanged(wire: WireUnchanged) -> Unchanged:
    if not wire.lock_ids or wire.checks < 0 or wire.lock_ids != sorted(set(wire.lock_ids)):
        raise ValueError("unchanged.lock_ids must be sorted and unique, checks not negative")
    unstuck = None if wire.oldest_unstuck_commit is None else _moment(wire.oldest_unstuck_commit)
    return Unchanged(tuple(wire.lock_ids), wire.checks, _moment(wire.oldest_commit), unstuck, wire)


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
    group = WaitingGroup(event_id, wire.tenant, wire.table, wire.partition, occurred_at, due_at, (entry,), True)
    group.knows_members((member,))
    return group


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
    group = WaitingGroup(
        event.event_id,
        event.tenant,
        event.table,
        event.partition,
        event.occurred_at,
        event.due_at,
        tuple(wire.waiting),
        unchanged=None if wire.unchanged is None else _unchanged(wire.unchanged),
    )
    group.knows_members(tuple(_member(entry) for entry in wire.waiting))  # the models checked them
    return group


@dataclass(frozen=True)
class EntryFacts:
    """What an entry's part of an ``unchanged`` summary needs: the ids of its locks held and when its
    vacuum committed."""

    held_lock_ids: tuple[int, ...]
    committed_at: datetime


def facts_of(member: Member) -> EntryFacts:
    """A member's facts as its entry says them."""
    held = tuple(_LOCK.decode(lock).lock_id for lock in member.wire.locks_held)
    return EntryFacts(held, member.view.occurred_at)


def summary_of(entries: Sequence[WireWaiting], facts: Sequence[EntryFacts], *, checks: int = 0) -> WireUnchanged | None:
    """The ``unchanged`` summary of these entries, or None when one of them waits on something other
    than its locks (none held, a check error or open transactions)."""
    if any(
        not fact.held_lock_ids or entry.check_error is not None or entry.open_txns
        for entry, fact in zip(entries, facts, strict=True)
    ):
        return None
    unstuck = [fact.committed_at for entry, fact in zip(entries, facts, strict=True) if not entry.stuck]
    return WireUnchanged(
        lock_ids=sorted({lock_id for fact in facts for lock_id in fact.held_lock_ids}),
        checks=checks,
        oldest_commit=iso(min(fact.committed_at for fact in facts)),
        oldest_unstuck_commit=iso(min(unstuck)) if unstuck else None,
    )


def unchanged_now(group: WaitingGroup, held_ids: AbstractSet[int], now: datetime, max_wait_s: float) -> bool:
    """Whether a check now, with ``held_ids`` listed, leaves every vacuum of ``group`` as it was: every
    lock they wait on still listed (so none is ready) and none about to be reported stuck."""
    unchanged = group.unchanged
    if unchanged is None or not group.may_carry_unread:
        return False
    if (
        unchanged.oldest_unstuck_commit is not None
        and (now - unchanged.oldest_unstuck_commit).total_seconds() >= max_wait_s
    ):
        return False
    return all(lock_id in held_ids for lock_id in unchanged.lock_ids)


def carry_unchanged(group: WaitingGroup, *, checked_at: datetime, due_at: datetime) -> GroupOut:
    """The next ``DelayedVacuums`` of a group a check left unchanged: its entries as they were, with
    ``unchanged.checks`` one higher. Its id is derived from the group's, so a replay of the same check
    publishes the same id."""
    assert group.unchanged is not None
    event_id = derived_event_id(group.event_id, "unchanged")
    wire = _one_check_more(
        WireGroup(
            schema_version=1,
            event_id=str(group.event_id),
            tenant=group.tenant,
            table=group.table,
            partition=group.partition,
            occurred_at="",
            causation_id=None,
            correlation_id=None,
            due_at="",
            waiting=list(group.entries),
            unchanged=group.unchanged.wire,
        ),
        event_id,
        checked_at,
        due_at,
    )
    return GroupOut(_group_shell(wire, event_id, group.event_id, checked_at, due_at), group.entries, wire.unchanged)


_Group = TypeVar("_Group", WireGroup, WireGroupCarried)


def counting_prior_checks(group: WaitingGroup, prior_checks: int) -> WaitingGroup:
    """``group`` as read from a bundle that checks carried on whole ``prior_checks`` times since it was
    written: its summary's ``checks`` counts them, so it is read in full as often as if each check had
    carried it on alone (a vacuum waiting alone counts them in its attempt)."""
    unchanged = group.unchanged
    if prior_checks <= 0:
        return group
    if unchanged is None:
        if not group.single:
            return group
        entries = tuple(msgspec.structs.replace(entry, attempt=entry.attempt + prior_checks) for entry in group.entries)
        return replace(group, entries=entries)
    checks = unchanged.checks + prior_checks
    counted = replace(unchanged, checks=checks, wire=_with_checks(unchanged.wire, checks))
    return replace(group, unchanged=counted)


def _with_checks(summary: WireUnchanged, checks: int) -> WireUnchanged:
    return WireUnchanged(
        lock_ids=summary.lock_ids,
        checks=checks,
        oldest_commit=summary.oldest_commit,
        oldest_unstuck_commit=summary.oldest_unstuck_commit,
    )


def _one_check_more(previous: _Group, next_id: uuid.UUID, checked_at: datetime, due_at: datetime) -> _Group:
    """The record that carries ``previous`` (a group with an ``unchanged`` summary) on after one more
    check that left it as it was: the same entries, ``checks`` one higher, caused by ``previous``."""
    summary = previous.unchanged
    assert summary is not None
    return type(previous)(
        schema_version=1,
        event_id=str(next_id),
        tenant=previous.tenant,
        table=previous.table,
        partition=previous.partition,
        occurred_at=iso(checked_at),
        causation_id=previous.event_id,
        correlation_id=None,
        due_at=iso(due_at),
        waiting=previous.waiting,
        merged_from=[previous.event_id],
        unchanged=WireUnchanged(
            lock_ids=summary.lock_ids,
            checks=summary.checks + 1,
            oldest_commit=summary.oldest_commit,
            oldest_unstuck_commit=summary.oldest_unstuck_commit,
        ),
    )


@dataclass(frozen=True)
class CarriedOn:
    """A group a check carried on unread without reading its entries: its next record, the group as
    read (without entries) and how many vacuums it carries."""

    out: GroupOut
    group: WaitingGroup
    vacuums: int


def carry_on_unread(
    record: RawRecord,
    tenant: str,
    held_ids: AbstractSet[int],
    now: datetime,
    max_wait_s: float,
    due_at: datetime,
    prior_checks: int = 0,
) -> CarriedOn | None:
    """The next ``DelayedVacuums`` of the group in ``record`` if a check now leaves it unchanged
    (:func:`unchanged_now`), written on with its entries' bytes unread; None when its entries must be
    read: no summary, its check limit reached, a lock gone, a vacuum near or past the max wait (a stuck
    vacuum is counted by the full check), or a record that does not read exactly as a group of
    ``tenant`` must. Cheaper than :func:`read_group` then :func:`carry_unchanged`: no entry is parsed
    into objects. Only ever "still waiting": whatever its vacuums are, they are read in full by the
    check that may clean them. ``prior_checks``: checks that carried the record on whole in its
    bundle, which its own ``checks`` does not count yet (:func:`counting_prior_checks`)."""
    if not record.value:
        return None
    try:
        wire = _GROUP_CARRIED.decode(record.value)
        if wire.unchanged is None:
            return None
        if prior_checks:
            wire.unchanged = _with_checks(wire.unchanged, wire.unchanged.checks + prior_checks)
        unchanged = _unchanged(wire.unchanged)
        event_id = uuid.UUID(wire.event_id)
        occurred_at = _moment(wire.occurred_at)
        due = _moment(wire.due_at)
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError):
        return None
    if wire.schema_version != 1 or wire.tenant != tenant or not wire.waiting:
        return None
    if len(wire.waiting) > MAX_WAITING_PER_ENVELOPE:
        return None
    if record.key != event_key(wire.tenant, wire.table, wire.partition).encode():
        return None
    if str(event_id) != wire.event_id or dict(record.headers).get("ce_id") != wire.event_id.encode():
        return None
    if (now - unchanged.oldest_commit).total_seconds() >= max_wait_s:
        return None  # a vacuum may be stuck: the full check counts it
    group = WaitingGroup(
        event_id,
        wire.tenant,
        wire.table,
        wire.partition,
        occurred_at,
        due,
        (),
        unchanged=unchanged,
        read_from=record.partition,
    )
    if not unchanged_now(group, held_ids, now, max_wait_s):
        return None
    next_id = derived_event_id(event_id, "unchanged")
    successor = _one_check_more(wire, next_id, now, due_at)
    shell = empty_group_shell(next_id, wire.tenant, wire.table, wire.partition, now, event_id, due_at)
    shell.attach_wire_value(_ENCODER.encode(successor))
    return CarriedOn(GroupOut(shell, (), successor.unchanged), group, len(wire.waiting))


@dataclass(frozen=True)
class EnvelopeCarried:
    """A vacuum waiting alone that a check carried on: its next envelope, when it committed and the
    locks it waits on (all listed)."""

    envelope: DelayEnvelope
    committed_at: datetime
    lock_ids: tuple[int, ...]


def carry_envelope_on(
    record: RawRecord,
    tenant: str,
    held_ids: AbstractSet[int],
    now: datetime,
    max_wait_s: float,
    due_at: datetime,
    prior_checks: int = 0,
) -> EnvelopeCarried | None:
    """The next ``DelayEnvelope`` of the vacuum waiting alone in ``record`` if a check now leaves it as
    it was: every lock it waits on still listed (lock ids are never reused, so its snapshot's locks
    listed now are exactly those), no check error, no open transaction, not near the max wait. None
    when it must be checked in full (or does not read as an envelope of ``tenant`` must). Only ever
    "still waiting". ``prior_checks``: checks that carried its bundle on whole since it was written
    (its attempt counts them too)."""
    group = read_envelope(record, tenant)
    if group is None:
        return None
    [member] = group.members
    entry = member.wire
    if entry.check_error is not None or entry.open_txns or entry.stuck or not entry.locks_held:
        return None
    if (now - member.view.occurred_at).total_seconds() >= max_wait_s:
        return None
    try:
        waiting_on = [_LOCK.decode(lock).lock_id for lock in entry.locks_held]
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    if not all(lock_id in held_ids for lock_id in waiting_on) or not set(waiting_on) <= set(member.lock_ids):
        return None
    following = WireWaiting(vacuum=entry.vacuum, attempt=entry.attempt + prior_checks + 1, locks_held=entry.locks_held)
    envelope = build_envelope(
        tenant=group.tenant,
        table=group.table,
        partition=group.partition,
        entry=following,
        source=group.event_id,
        checked_at=now,
        due_at=due_at,
    )
    return EnvelopeCarried(envelope, member.view.occurred_at, tuple(waiting_on))


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
    held_ids: AbstractSet[int] | None,
    check_error: str | None,
    open_txns: Sequence[int],
    now: datetime,
    max_wait_s: float,
    checks: int = 0,
) -> WireWaiting:
    """The member's entry after one more check that found it not ready: the locks of its snapshot
    still listed (or, when the metastore could not answer, the ones last known), its open transactions,
    and stuck once it has waited longer than ``max_wait_s``. ``checks``: the checks its group's
    ``unchanged`` summary counted beyond the entry's attempt."""
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
        attempt=wire.attempt + checks + 1,
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
    unchanged: WireUnchanged | None = None  # its summary, when its vacuums wait on snapshot locks alone


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
    facts: Sequence[EntryFacts] | None = None,
    summaries: bool = True,
) -> list[GroupOut]:
    """The ``DelayedVacuums`` records of one key's waiting vacuums, at most
    :data:`MAX_WAITING_PER_ENVELOPE` each, each with its ``unchanged`` summary when its vacuums wait on
    locks alone. Ids are derived from the sources and the vacuums, so a replay of the same check
    publishes the same ids, and no other check does: two checks with the same first source (a vacuum
    delivered again and merged with the record that already carries it) would otherwise write the same
    id, and a later record would be taken for a copy of an earlier one (a bundle of it skipped as
    read, its vacuums lost). ``vacuum_ids`` and ``facts``: the entries' vacuum ids and facts when the
    caller already has them (else they are read from the entries)."""
    outs = []
    also = ";from:" + ",".join(sorted(str(source) for source in sources[1:])) if len(sources) > 1 else ""
    if vacuum_ids is None or facts is None:
        members = [_member(entry) for entry in entries]
        vacuum_ids = [member.vacuum_id for member in members]
        facts = [facts_of(member) for member in members]
    for start in range(0, len(entries), MAX_WAITING_PER_ENVELOPE):
        chunk = entries[start : start + MAX_WAITING_PER_ENVELOPE]
        ids = vacuum_ids[start : start + MAX_WAITING_PER_ENVELOPE]
        event_id = derived_event_id(sources[0], "delayed-vacuums:" + ",".join(sorted(ids)) + also)
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
            unchanged=summary_of(chunk, facts[start : start + MAX_WAITING_PER_ENVELOPE]) if summaries else None,
        )
        shell = _group_shell(wire, event_id, sources[0], checked_at, due_at)
        outs.append(GroupOut(shell, tuple(chunk), wire.unchanged))
    return outs


def _group_shell(
    wire: WireGroup, event_id: uuid.UUID, source: uuid.UUID, checked_at: datetime, due_at: datetime
) -> DelayedVacuums:
    """The model shell of ``wire`` (for the codec's headers and the logs), carrying its bytes."""
    shell = empty_group_shell(event_id, wire.tenant, wire.table, wire.partition, checked_at, source, due_at)
    shell.attach_wire_value(_ENCODER.encode(wire))
    return shell


def empty_group_shell(
    event_id: uuid.UUID,
    tenant: str,
    table: str,
    partition: str | None,
    occurred_at: datetime,
    causation_id: uuid.UUID | None,
    due_at: datetime,
) -> DelayedVacuums:
    """A ``DelayedVacuums`` built without validation and without its vacuums: what the logs, the
    codec's headers and the outcome bookkeeping read of one. Every field is given: model_construct
    would otherwise call the default factories, which pydantic inspects on every call."""
    return DelayedVacuums.model_construct(
        schema_version=1,
        event_id=event_id,
        tenant=tenant,
        table=table,
        partition=partition,
        occurred_at=occurred_at,
        causation_id=causation_id,
        correlation_id=None,
        due_at=due_at,
        waiting=[],
        merged_from=[],
        unchanged=None,
    )
