"""The records a check writes for vacuums still waiting: a ``DelayEnvelope`` for one alone, the
``DelayedVacuums`` of a key's several, and a group carried on with its summary's checks counted,
all built without the models (a model shell carries the bytes)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TypeVar

import msgspec

from acidclean.consumers.waiting.group import (
    EntryFacts,
    WaitingGroup,
    facts_of,
    summary_of,
)
from acidclean.consumers.waiting.wire import (
    ENCODER,
    Member,
    WireEnvelope,
    WireGroup,
    WireGroupCarried,
    WireUnchanged,
    WireWaiting,
    iso,
    member_of,
    vacuum_id_of,
)
from acidclean.schemas.common import derived_event_id
from acidclean.schemas.events import (
    MAX_WAITING_PER_ENVELOPE,
    DelayedVacuums,
    DelayEnvelope,
)


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
    shell.attach_wire_value(ENCODER.encode(wire))
    return shell


def carry_unchanged(group: WaitingGroup, *, checked_at: datetime, due_at: datetime) -> GroupOut:
    """The next ``DelayedVacuums`` of a group a check left unchanged: its entries as they were, with
    ``unchanged.checks`` one higher. Its id is derived from the group's, so a replay of the same check
    publishes the same id."""
    assert group.unchanged is not None
    event_id = derived_event_id(group.event_id, "unchanged")
    wire = one_check_more(
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
    return GroupOut(group_shell(wire, event_id, group.event_id, checked_at, due_at), group.entries, wire.unchanged)


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
    counted = replace(unchanged, checks=checks, wire=with_checks(unchanged.wire, checks))
    return replace(group, unchanged=counted)


def with_checks(summary: WireUnchanged, checks: int) -> WireUnchanged:
    return WireUnchanged(
        lock_ids=summary.lock_ids,
        checks=checks,
        oldest_commit=summary.oldest_commit,
        oldest_unstuck_commit=summary.oldest_unstuck_commit,
    )


def one_check_more(previous: _Group, next_id: uuid.UUID, checked_at: datetime, due_at: datetime) -> _Group:
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
        members = [member_of(entry) for entry in entries]
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
        shell = group_shell(wire, event_id, sources[0], checked_at, due_at)
        outs.append(GroupOut(shell, tuple(chunk), wire.unchanged))
    return outs


def group_shell(
    wire: WireGroup, event_id: uuid.UUID, source: uuid.UUID, checked_at: datetime, due_at: datetime
) -> DelayedVacuums:
    """The model shell of ``wire`` (for the codec's headers and the logs), carrying its bytes."""
    shell = empty_group_shell(event_id, wire.tenant, wire.table, wire.partition, checked_at, source, due_at)
    shell.attach_wire_value(ENCODER.encode(wire))
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
