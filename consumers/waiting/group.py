"""A ``DelayedVacuums`` (or a ``DelayEnvelope``, as a group of one) read as a :class:`WaitingGroup`, and
its ``unchanged`` summary: what a check that finds its locks all listed needs to carry it on unread."""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime

import msgspec

from acidclean.consumers.waiting.wire import (
    ENVELOPE_DECODER,
    GROUP_DECODER,
    LOCK_DECODER,
    VACUUM_KEY_DECODER,
    Member,
    WireUnchanged,
    WireWaiting,
    iso,
    member_of,
    moment_of,
)
from acidclean.schemas.common import event_key
from acidclean.schemas.events import (
    MAX_UNCHANGED_CHECKS,
    MAX_WAITING_PER_ENVELOPE,
    DelayedVacuums,
)
from acidclean.shared.bus.records import RawRecord


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
            members = tuple(member_of(entry) for entry in self.entries)
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
        wire = GROUP_DECODER.decode(record.value)
        occurred_at = moment_of(wire.occurred_at)
        due_at = moment_of(wire.due_at)
        event_id = uuid.UUID(wire.event_id)
        unchanged = None if wire.unchanged is None else unchanged_of(wire.unchanged)
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
            keys = [VACUUM_KEY_DECODER.decode(entry.vacuum) for entry in entries]
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
        if expected is None or unchanged_of(expected) != group.unchanged:
            return "its unchanged summary does not match its vacuums"
    return None


def unchanged_of(wire: WireUnchanged) -> Unchanged:
    if not wire.lock_ids or wire.checks < 0 or wire.lock_ids != sorted(set(wire.lock_ids)):
        raise ValueError("unchanged.lock_ids must be sorted and unique, checks not negative")
    unstuck = None if wire.oldest_unstuck_commit is None else moment_of(wire.oldest_unstuck_commit)
    return Unchanged(tuple(wire.lock_ids), wire.checks, moment_of(wire.oldest_commit), unstuck, wire)


def read_envelope(record: RawRecord, tenant: str) -> WaitingGroup | None:
    """A DelayEnvelope read as a group of one (``single``), or None when the models must decide."""
    if not record.value:
        return None
    try:
        wire = ENVELOPE_DECODER.decode(record.value)
        occurred_at = moment_of(wire.occurred_at)
        due_at = moment_of(wire.due_at)
        entry = WireWaiting(
            vacuum=wire.vacuum,
            attempt=wire.attempt,
            locks_held=wire.locks_held,
            check_error=wire.check_error,
            stuck=wire.stuck,
            stuck_since=wire.stuck_since,
            open_txns=wire.open_txns,
        )
        member = member_of(entry)
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


def group_of_model(event: DelayedVacuums) -> WaitingGroup:
    """A group the models accepted (when :func:`read_group` did not): read again from their JSON."""
    wire = GROUP_DECODER.decode(event.model_dump_json())
    group = WaitingGroup(
        event.event_id,
        event.tenant,
        event.table,
        event.partition,
        event.occurred_at,
        event.due_at,
        tuple(wire.waiting),
        unchanged=None if wire.unchanged is None else unchanged_of(wire.unchanged),
    )
    group.knows_members(tuple(member_of(entry) for entry in wire.waiting))  # the models checked them
    return group


@dataclass(frozen=True)
class EntryFacts:
    """What an entry's part of an ``unchanged`` summary needs: the ids of its locks held and when its
    vacuum committed."""

    held_lock_ids: tuple[int, ...]
    committed_at: datetime


def facts_of(member: Member) -> EntryFacts:
    """A member's facts as its entry says them."""
    held = tuple(LOCK_DECODER.decode(lock).lock_id for lock in member.wire.locks_held)
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
