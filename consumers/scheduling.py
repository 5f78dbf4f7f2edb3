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


# Records due further apart than this are not written in one bundle (see runs_due_together).
BUNDLE_DUE_SPREAD_MS = 10
# A cohort of fewer records than this goes in its neighbour's bundle (see cohorts_by_carries): each
# bundle is a record and a check every interval, which a few members' carries do not pay for.
BUNDLE_COHORT_MIN = 8


def runs_due_together(
    items: Sequence[T],
    due_ms: Callable[[T], int],
    spread_ms: int = BUNDLE_DUE_SPREAD_MS,
    key: Callable[[T], object] | None = None,
) -> list[list[T]]:
    """``items`` in due order, cut into runs of those due within ``spread_ms`` of their run's first;
    with ``key``, the items of one key all in the run of the latest-due of them.

    A bundle is due when its last member is. One bundle for the waiting records of a whole batch kept
    the first checked of them waiting for the last, and gave the whole batch one due time: one interval
    later all its records came due at once and queued behind each other, interval after interval (the
    queue was the re-check lateness). A bundle per run is due when its own records are, so the bundles
    of a batch come due as spread out as their checks were.

    A table with records in two bundles of one batch (parked by separate checks) must go on in one
    bundle, whose next check merges them into one record. Cut by due time alone, its two records
    (due as far apart as the batch's checks of the two bundles were) went into two bundles again, and
    both came back together in the next batch, interval after interval: each check of such a bundle
    read all its members. Moved to the later run, a record is due a little later (by at most what the
    batch's checks took), never earlier, and a key's items are next to each other in their run (a run
    cut into several bundles by their size keeps them in one)."""
    runs: list[list[T]] = []
    first_ms = 0
    for item in sorted(items, key=due_ms):
        item_due_ms = due_ms(item)
        if not runs or item_due_ms - first_ms > spread_ms:
            runs.append([])
            first_ms = item_due_ms
        runs[-1].append(item)
    if key is None:
        return runs
    last_run = {key(item): index for index, run in enumerate(runs) for item in run}
    kept: list[dict[object, list[T]]] = [{} for _ in runs]
    for run in runs:
        for item in run:
            item_key = key(item)
            kept[last_run[item_key]].setdefault(item_key, []).append(item)
    return [[item for same_key in run.values() for item in same_key] for run in kept if run]


def cohorts_by_carries(
    items: Sequence[T],
    carries_left: Callable[[T], int | None],
    key: Callable[[T], object],
    *,
    width: int,
    min_size: int,
) -> list[list[T]]:
    """One run of a partition's waiting records (:func:`runs_due_together`) cut into the bundles' worth
    of records that may be carried on whole for about as long as each other.

    A bundle is carried on whole until its member with the fewest carries left must be read in full;
    that check then reads every member. Packed by due time alone, a bundle mixed members a few checks
    from their limit with members a whole limit away, so most checks of it read all its members for
    the sake of one. Here the records whose summary lets them be carried (``carries_left`` above 0)
    are sorted by it and cut where a record has ``width`` or more carries left than its cohort's first
    (a cohort of fewer than ``min_size`` goes with its neighbour below, or above for the first); the
    records that cannot be carried whole (``carries_left`` None or 0, or a key with several records,
    which its next check merges) go on together, apart, so they do not take the summary of the
    others' bundle. A key's records stay in one cohort."""
    by_key: dict[object, list[T]] = {}
    for item in items:
        by_key.setdefault(key(item), []).append(item)
    summarised: list[tuple[int, list[T]]] = []
    unsummarised: list[T] = []
    for same_key in by_key.values():
        left = carries_left(same_key[0]) if len(same_key) == 1 else None
        if left is None or left <= 0:
            unsummarised.extend(same_key)
        else:
            summarised.append((left, same_key))
    summarised.sort(key=lambda entry: entry[0])
    cohorts: list[list[T]] = []
    first_left = 0
    for left, same_key in summarised:
        if not cohorts or left - first_left >= width:
            cohorts.append([])
            first_left = left
        cohorts[-1].extend(same_key)
    kept: list[list[T]] = []
    for cohort in cohorts:
        if (kept and len(cohort) < min_size) or (kept and len(kept[-1]) < min_size):
            kept[-1].extend(cohort)
        else:
            kept.append(cohort)
    if unsummarised:
        kept.append(unsummarised)
    return kept
