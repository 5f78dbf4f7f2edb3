"""What the cleaner's loop knows of one assigned partition, and when its held records are released.

A partition's records fetched before their due time are *held*, in offset order, up to the read-ahead
(``held_per_partition``, ``held_bytes``); each is handed over at its own due time, except that a
table's records go in offset order, and (``gather_ms``) a due record of one table alone waits for the
partition's others due within the gather window. The committable offset never passes a held record.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import datetime

from acidclean.consumers.bundles import WaitingBundle
from acidclean.consumers.waiting import WaitingGroup
from acidclean.consumers.work import Work
from acidclean.schemas.events import DelayEnvelope, VacuumCommitted


@dataclass(frozen=True)
class TrackedRecord:
    """A record read and not yet finished: since when it is due, and its vacuum (for the gauges)."""

    due_ms: int
    committed_at_s: float | None  # the vacuum's commit time (epoch seconds); None for a dead letter


@dataclass
class PartitionState:
    """What the loop knows about one assigned partition (changed only on the loop's thread)."""

    generation: int
    accepting: bool = True
    seen_until: int | None = None  # every offset below was handed over, held or skipped
    in_flight: set[int] = field(default_factory=set)
    # Of those, the joiners: records waiting for their key's next delay record. Neither kind stops the
    # delay partitions from being read (that is what brings their records): fresh vacuums that wait
    # count against max_queued only for reading more fresh vacuums, and delay records that wait (at
    # most one per key) not at all.
    joiners: int = 0
    held: deque[Work] = field(default_factory=deque)  # fetched, not yet due, in offset order
    held_bytes: int = 0  # the size of their values
    held_keys: Counter[str] = field(default_factory=Counter)  # the keys of the waiting groups held
    dropping: bool = False  # held is full: later records are left to be fetched again after the resume
    # Holding a head not yet due while the fetch goes on (from the first hold, or again once half the
    # read-ahead was free): the consumer is paused only once the read-ahead is full.
    reading_ahead: bool = False
    backlogged: bool = False  # paused because the lanes hold max_queued records: resumed once they drain
    # The held head's due time: nothing of the partition is handed over before it ("paused" for the
    # loop, whether or not the consumer still fetches; after a rewind, the retry time).
    paused_until_ms: int | None = None
    committed: int | None = None
    # Every record read and not finished, by offset, kept across rewinds (a re-read keeps the first
    # due time): what the overdue and oldest-pending gauges see of a stalled partition.
    tracked: dict[int, TrackedRecord] = field(default_factory=dict)

    def committable(self) -> int | None:
        """The next offset to read after a restart: below it, every record is done."""
        if self.seen_until is None:
            return None
        floor = min(self.in_flight) if self.in_flight else self.seen_until
        if self.held:
            floor = min(floor, self.held[0].offset)
        return floor


def keep_held(state: PartitionState, work: Work) -> None:
    state.held.append(work)
    state.held_bytes += len(work.record.value or b"")
    if isinstance(work.event, WaitingGroup):
        state.held_keys[work.event.key] += 1


def take_due(state: PartitionState, now: int, gather_ms: int = 0) -> list[Work]:
    """Take the held records due by ``now`` out of ``state.held``, in offset order: each at its own due
    time, not after the records ahead of it. Several threads and processes write to one delay
    partition, each record due one interval after the check that wrote it, so the log's due times are
    a little out of order (by as much as a batch takes to publish): handed over in offset order alone,
    a record waited for a later-due one ahead of it (most of the re-check lateness at 100,000 parked
    vacuums). A table's own records still go in offset order: one waits for its table's earlier record
    (a bundle carries many tables and is checked on its own). See :func:`release_times` for
    ``gather_ms``."""
    due: list[Work] = []
    kept: deque[Work] = deque()
    for work, release_ms in zip(state.held, release_times(state.held, gather_ms), strict=True):
        if release_ms <= now:
            due.append(work)
            state.held_bytes -= len(work.record.value or b"")
            if isinstance(work.event, WaitingGroup):
                _unheld_key(state, work.event.key)
        else:
            kept.append(work)
    state.held = kept
    return due


def next_release_ms(held: deque[Work], gather_ms: int = 0) -> int:
    """When :func:`take_due` next takes one of ``held`` (not empty)."""
    return min(release_times(held, gather_ms))


def release_times(held: deque[Work], gather_ms: int) -> list[int]:
    """When each of ``held`` may be handed over: at its due time, but no sooner than its table's earlier
    records (a table's records go in offset order).

    ``gather_ms`` > 0: the records due within ``gather_ms`` of the earliest one form a run, handed over
    together once the last single-table record of the run is due (a bundle never makes the others
    wait); the records after the run go at their own times until they are the run. Records of one
    table alone, written by different batches a little apart (a slow first fetch, two threads), are
    then checked in one batch and packed into one bundle; without it they stayed apart for good, each
    batch with too few to bundle, each due at its own time. The cost is at most ``gather_ms`` of
    lateness for the run's first records, never an early hand-over."""
    table_ready: dict[str, int] = {}
    ready: list[int] = []
    for work in held:
        at = work.due_ms
        table_key = _table_key(work)
        if table_key is not None:
            at = table_ready[table_key] = max(at, table_ready.get(table_key, at))
        ready.append(at)
    if gather_ms <= 0 or not ready:
        return ready
    # Only the first run matters (what is handed over next): one pass, no sort, for every wake-up.
    last_alone = min(ready)
    window_end = last_alone + gather_ms
    for work, at in zip(held, ready, strict=True):
        if at <= window_end and not isinstance(work.event, WaitingBundle):
            last_alone = max(last_alone, at)
    return [max(at, last_alone) if at <= window_end else at for at in ready]


def _table_key(work: Work) -> str | None:
    """The table whose records must go in offset order (None for a bundle: it holds many)."""
    if isinstance(work.event, WaitingBundle):
        return None
    key = work.record.key
    return None if key is None else key.decode("utf-8", "replace")


def _unheld_key(state: PartitionState, key: str) -> None:
    left = state.held_keys[key] - 1
    if left > 0:
        state.held_keys[key] = left
    else:
        del state.held_keys[key]


def committed_at(event: VacuumCommitted | DelayEnvelope | WaitingGroup | WaitingBundle) -> datetime:
    """When the (oldest) vacuum of an event committed."""
    if isinstance(event, WaitingGroup | WaitingBundle):
        return event.oldest_commit
    return (event.vacuum if isinstance(event, DelayEnvelope) else event).occurred_at
