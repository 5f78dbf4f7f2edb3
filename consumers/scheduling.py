"""When a waiting vacuum is checked again, and what the delay envelope that carries it says.

A vacuum whose snapshot locks are still held goes to the delay topic in a :class:`DelayEnvelope`
due one cleanup interval after the check. The due time is computed once, here, and travels in the
envelope (and its ``x-due-at`` header): a crash, restart or rebalance re-reads it and never pushes it
later. Every envelope of the delay topic carries the same delay, so per partition due times come
nearly in offset order (out of order by as much as a batch takes to publish, as several threads and
processes write: the loop hands each over at its own due time).

Pure functions of the clock value they are given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TypeVar

from acidclean.consumers.rules.readiness import Readiness
from acidclean.schemas.common import derived_event_id
from acidclean.schemas.events import DelayEnvelope, VacuumCommitted
from acidclean.shared.bus.codec import fit_field

T = TypeVar("T")

# A due time further ahead than this many intervals is not one acidclean wrote: an envelope is due
# one interval after the check that wrote it (a group's shared due time is never further), so only
# clock skew between cleaner hosts or a bad record puts it further. Read, it is clamped to one
# interval from now instead of holding its whole delay partition (every record behind it) until
# then. Three intervals leave two intervals of skew unclamped (4 s by default; NTP keeps hosts
# within milliseconds) and bound what a bad record can cost its partition to a few intervals.
# Clamping early is never unsafe: a due time only says when to ask again, and the re-check asks the
# metastore (the lock snapshot decides), so the worst an early check costs is one show_locks.
MAX_DUE_AHEAD_INTERVALS = 3
# The poll loop never blocks longer than this, far below max.poll.interval.ms (300 s by default), so
# a paused partition never costs the process its group membership.
IDLE_POLL_CAP_S = 0.5
# While work is in flight the loop polls in short slices to commit finished offsets promptly.
BUSY_POLL_CAP_S = 0.02


def checks_made(processed: VacuumCommitted | DelayEnvelope) -> int:
    """readyToClean checks made before this one (0 for a fresh vacuum)."""
    return processed.attempt if isinstance(processed, DelayEnvelope) else 0


def vacuum_of(processed: VacuumCommitted | DelayEnvelope) -> VacuumCommitted:
    return processed.vacuum if isinstance(processed, DelayEnvelope) else processed


def next_due(now: datetime, interval_ms: int) -> datetime:
    """The due time of an envelope written at ``now``: one cleanup interval later."""
    return now + timedelta(milliseconds=interval_ms)


def is_stuck(vacuum: VacuumCommitted, now: datetime, max_wait_s: float) -> bool:
    """Waited longer than ``max_wait_s`` since the vacuum committed."""
    return (now - vacuum.occurred_at).total_seconds() >= max_wait_s


def delay_envelope(
    processed: VacuumCommitted | DelayEnvelope,
    readiness: Readiness,
    *,
    now: datetime,
    interval_ms: int,
    max_wait_s: float,
    due: datetime | None = None,
) -> DelayEnvelope:
    """The envelope that parks ``processed`` until one interval from ``now``.

    Its id is derived from the processed event's id, so a cleaner that crashed after publishing it
    and runs the same check again publishes the same id (readers drop the duplicate). ``due`` lets a
    caller give several envelopes of one table the same due time, so they are checked together.
    """
    vacuum = vacuum_of(processed)
    previous = processed if isinstance(processed, DelayEnvelope) else None
    stuck = is_stuck(vacuum, now, max_wait_s)
    stuck_since = None
    if stuck:
        stuck_since = previous.stuck_since if previous is not None and previous.stuck_since is not None else now
    error = readiness.check_error  # e.g. 40 failed deletes: cut to fit, or the envelope would be invalid
    return DelayEnvelope(
        event_id=derived_event_id(processed.event_id, "delay"),
        tenant=vacuum.tenant,
        table=vacuum.table,
        partition=vacuum.partition,
        occurred_at=now,
        causation_id=processed.event_id,
        correlation_id=vacuum.event_id,
        vacuum=vacuum,
        attempt=checks_made(processed) + 1,
        due_at=due if due is not None else next_due(now, interval_ms),
        locks_held=list(readiness.locks_held),
        check_error=error if error is None else fit_field(DelayEnvelope, "check_error", error),
        stuck=stuck,
        stuck_since=stuck_since,
        open_txns=list(readiness.open_txns[:100]),
    )


def due_time_problem(due_ms: int) -> str | None:
    """Why a delay record's due time is not a time at all, or None. A plausible time too far ahead
    is not refused but clamped (:func:`clamp_due_ms`)."""
    if due_ms < 0:
        return f"x-due-at {due_ms} is negative"
    return None


def clamp_due_ms(due_ms: int, now_ms: int, interval_ms: int) -> int | None:
    """``now + interval`` for a due time more than :data:`MAX_DUE_AHEAD_INTERVALS` intervals ahead,
    else None (the due time is plausible and is kept)."""
    if due_ms - now_ms > MAX_DUE_AHEAD_INTERVALS * interval_ms:
        return now_ms + interval_ms
    return None


def poll_timeout_s(now_ms: int, next_due_ms: int | None, *, busy: bool) -> float:
    """How long the next poll may block: until the earliest paused head is due, capped.

    Never negative, never longer than :data:`IDLE_POLL_CAP_S` (so max.poll.interval.ms is never at
    risk), and short while work is in flight so finished offsets are committed promptly.
    """
    cap = BUSY_POLL_CAP_S if busy else IDLE_POLL_CAP_S
    if next_due_ms is None:
        return cap
    return max(0.0, min(cap, (next_due_ms - now_ms) / 1000))


# The default of cleanup_bundle_spread_ms: how long a due delay record of one table alone waits for its
# partition's others due within it (the loop's gather, LoopConfig.gather_ms).
BUNDLE_DUE_SPREAD_MS = 10


def in_due_order_by_key(items: Sequence[T], due_ms: Callable[[T], int], key: Callable[[T], object]) -> list[T]:
    """``items`` in due order, each key's items next to each other (in due order) where the key's
    first-due item falls: a table with records in two bundles of one batch (parked by separate checks)
    goes on in one bundle (unless a size limit falls between them), whose next check merges them into
    one record."""
    by_key: dict[object, list[T]] = {}
    for item in sorted(items, key=due_ms):
        by_key.setdefault(key(item), []).append(item)
    return [item for same_key in by_key.values() for item in same_key]
