"""When may a vacuum take over another vacuum's lock: judged by one clock, never two hosts' clocks.

A vacuum lock whose holder stopped heartbeating belongs to a dead (or paused) vacuum. How long it has
been silent must be measured by a single clock. The metastore stamps every heartbeat with its own time,
and it stamps the taker's own waiting lock the same way when the taker heartbeats it, so the difference
of the two stamps is the holder's silence by the metastore's clock alone. Where that stamp is missing,
the taker watches the holder's heartbeat value itself: unchanged across ``stale_s`` of the taker's
``time.monotonic()`` means silent that long. Comparing the taker's wall clock with a heartbeat time
is never done: a host whose clock runs a few minutes fast would take over a live vacuum.

Pure: the caller passes the listing and both clocks' readings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from acidclean.shared.metastore import LockInfo


@dataclass(frozen=True)
class Silence:
    """A holder judged silent for ``seconds`` by ``clock`` (``metastore`` or ``monotonic``)."""

    lock: LockInfo
    seconds: float
    clock: str


def _beat_ms(lock: LockInfo) -> int:
    return lock.last_heartbeat_ms or lock.acquired_at_ms or 0


class TakeoverJudge:
    """Remembers, per holder, when this taker first saw its current heartbeat value."""

    def __init__(self, stale_s: float) -> None:
        self.stale_s = stale_s
        self._first_seen: dict[int, tuple[int, float]] = {}  # lock id -> (heartbeat value, monotonic time)

    def stale(self, holders: Sequence[LockInfo], metastore_now_ms: int | None, monotonic_s: float) -> list[Silence]:
        """The holders silent for more than ``stale_s``. ``metastore_now_ms`` is a time the metastore
        stamped (the taker's own lock's last heartbeat, just renewed), or None when it gave none."""
        silent = []
        for lock in holders:
            beat = _beat_ms(lock)
            if metastore_now_ms and beat:
                seconds = (metastore_now_ms - beat) / 1000
                if seconds > self.stale_s:
                    silent.append(Silence(lock, seconds, "metastore"))
                continue
            seen = self._first_seen.get(lock.lock_id)
            if seen is None or seen[0] != beat:
                self._first_seen[lock.lock_id] = (beat, monotonic_s)
                continue
            seconds = monotonic_s - seen[1]
            if seconds > self.stale_s:
                silent.append(Silence(lock, seconds, "monotonic"))
        return silent
