"""The cleaner loop's gauges, read from the metrics thread: partitions paused, bytes held, the oldest
vacuum seen waiting, and how overdue the most overdue unfinished record is.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Protocol

from acidclean.consumers.partition_state import PartitionState, TrackedRecord, committed_at
from acidclean.consumers.work import Work
from acidclean.schemas.events import CleanupRejected

Partition = tuple[str, int]


class MillisClock(Protocol):
    def now_ms(self) -> int: ...


class LoopGauges:
    """What the gauges read of the loop's partitions, and the oldest vacuum seen waiting per lane."""

    def __init__(self, states: Mapping[Partition, PartitionState], clock: MillisClock, interval_ms: int) -> None:
        self._states = states
        self._clock = clock
        self._interval_ms = interval_ms
        self._pending: dict[str, tuple[float, float]] = {}  # lane -> (oldest committed at, last seen)
        self._pending_lock = threading.Lock()

    def forget_lane(self, lane: str) -> None:
        """A lane's vacuum was cleaned (or given up): it no longer counts as waiting."""
        with self._pending_lock:
            self._pending.pop(lane, None)

    def note_pending(self, work: Work) -> None:
        """Remember the oldest vacuum seen waiting, per lane (not per vacuum: memory stays per table)."""
        if isinstance(work.event, CleanupRejected):
            return
        committed, now = committed_at(work.event).timestamp(), self._clock.now_ms() / 1000
        horizon = now - max(60.0, 3 * self._interval_ms / 1000)
        with self._pending_lock:
            known = self._pending.get(work.lane)
            if known is not None and known[1] >= horizon:
                committed = min(committed, known[0])
            self._pending[work.lane] = (committed, now)

    def paused_count(self) -> float:
        return float(sum(1 for state in list(self._states.values()) if state.paused_until_ms is not None))

    def held_bytes(self) -> float:
        """Bytes of delay records held until due, over every partition (read from the metrics thread)."""
        return float(sum(state.held_bytes for state in list(self._states.values())))

    def oldest_pending_s(self) -> float:
        """Age of the oldest vacuum seen waiting: read and not finished (however long ago, e.g. behind a
        stalled head), or seen recently (entries expire when another process owns it)."""
        now = self._clock.now_ms() / 1000
        horizon = now - max(60.0, 3 * self._interval_ms / 1000)
        with self._pending_lock:
            for key in [key for key, (_, seen) in self._pending.items() if seen < horizon]:
                del self._pending[key]
            committed = [committed for committed, _ in self._pending.values()]
        committed += [item.committed_at_s for item in self._tracked() if item.committed_at_s is not None]
        oldest = min(committed, default=None)
        return 0.0 if oldest is None else max(0.0, now - oldest)

    def overdue_s(self) -> float:
        """How long the most overdue record read and not finished has been due: held past its due time,
        waiting for a retry after an unacknowledged outcome, or still being handled. About zero while
        the cleaner keeps up, whatever the locks make vacuums wait; alert when it exceeds a few intervals."""
        now = self._clock.now_ms()
        dues = [item.due_ms for item in self._tracked()]
        return max(0.0, (now - min(dues, default=now)) / 1000)

    def _tracked(self) -> list[TrackedRecord]:
        """A copy of every partition's unfinished records (called from the metrics thread)."""
        while True:
            try:
                return [item for state in list(self._states.values()) for item in list(state.tracked.values())]
            except RuntimeError:  # changed size while copied by the loop's thread: copy again
                continue
