"""A bundle member carried on by a check that leaves it as it was, without reading its vacuums into
objects: a group by its ``unchanged`` summary, a vacuum waiting alone by its locks."""

from __future__ import annotations

import uuid
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import datetime

import msgspec

from acidclean.consumers.waiting.group import (
    WaitingGroup,
    read_envelope,
    unchanged_now,
    unchanged_of,
)
from acidclean.consumers.waiting.wire import (
    ENCODER,
    GROUP_CARRIED_DECODER,
    LOCK_DECODER,
    WireWaiting,
    moment_of,
)
from acidclean.consumers.waiting.written import (
    GroupOut,
    build_envelope,
    empty_group_shell,
    one_check_more,
    with_checks,
)
from acidclean.schemas.common import derived_event_id, event_key
from acidclean.schemas.events import (
    MAX_WAITING_PER_ENVELOPE,
    DelayEnvelope,
)
from acidclean.shared.bus.records import RawRecord


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
        wire = GROUP_CARRIED_DECODER.decode(record.value)
        if wire.unchanged is None:
            return None
        if prior_checks:
            wire.unchanged = with_checks(wire.unchanged, wire.unchanged.checks + prior_checks)
        unchanged = unchanged_of(wire.unchanged)
        event_id = uuid.UUID(wire.event_id)
        occurred_at = moment_of(wire.occurred_at)
        due = moment_of(wire.due_at)
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
    successor = one_check_more(wire, next_id, now, due_at)
    shell = empty_group_shell(next_id, wire.tenant, wire.table, wire.partition, now, event_id, due_at)
    shell.attach_wire_value(ENCODER.encode(successor))
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
        waiting_on = [LOCK_DECODER.decode(lock).lock_id for lock in entry.locks_held]
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
