"""What this process remembers of the delay records it wrote: when the check that wrote each one ran
(a lock list asked after that check may answer its re-check), which bundles' checks the broker
acknowledged (a copy read again is skipped), and each key's newest due time (a fresh vacuum of a key
with parked vacuums joins their next check). Thread-safe: written by the workers, read by the loop.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime

from acidclean.consumers.outcome_batch import BundleCheck
from acidclean.schemas.common import EventBase
from acidclean.shared.bus.bundle import PrebuiltRecord
from acidclean.shared.errors import BusError

# How long a delay record's check time is kept for its re-check, in intervals.
OWN_CHECKS_KEPT_INTERVALS = 30


class OwnChecks:
    """The check times of this process's delay records, its acknowledged bundle checks, and each key's
    newest due time (:attr:`chain_due`)."""

    def __init__(self, interval_ms: int) -> None:
        self._interval_ms = interval_ms
        # Delay records this process wrote, by event id: its own clock's time of the check that wrote
        # them. Any lock of their snapshots was taken before that check, so a lock list asked after it
        # may answer them (a record another process wrote only counts from when this one read it).
        self._own_checks: dict[str, int] = {}
        # Bundles whose check's records the broker acknowledged (id -> when): a copy read again (a
        # replay, a rewind) is not checked twice, or its members would go on twice, interval after interval.
        self._bundles_checked: dict[str, int] = {}
        self._lock = threading.Lock()
        self.pruned_ms = 0
        # Key -> due time (epoch ms) of the last delay record published for it: the loop lets a fresh
        # vacuum of a key that has waiting vacuums join their next check (one record per key, not one
        # per vacuum). Written by the workers after the broker acknowledged, read by the loop.
        self.chain_due: dict[str, int] = {}

    def take_checked_at_ms(self, event_id: uuid.UUID) -> int | None:
        """When this process made the check that wrote delay record ``event_id`` (None if it did not),
        forgotten once asked: a record is checked once, and one read again (a rewind, a replay) is
        answered as any record read now, which only asks for a newer lock list."""
        with self._lock:
            return self._own_checks.pop(str(event_id), None)

    def take_bundle(self, event_id: uuid.UUID) -> tuple[bool, int | None]:
        """Whether the check of bundle ``event_id`` was already acknowledged (a copy read again), and
        when this process made the check that wrote it (taken at every check: a bundle is checked once;
        kept, it would wait for the prune)."""
        with self._lock:
            replayed = str(event_id) in self._bundles_checked
            checked = self._own_checks.pop(str(event_id), None)
        return replayed, checked

    def remember(self, written: Sequence[tuple[EventBase | PrebuiltRecord, datetime]], now_ms: int) -> None:
        """Note when the check that wrote each of ``written`` ran; now and then forget old entries."""
        # Records are normally taken back within an interval or two; a cleaner behind its delay
        # partitions reads them later (each then forgotten when taken), and without its check time a
        # record needs a lock list asked after it was read: every batch would wait for one.
        horizon = now_ms - OWN_CHECKS_KEPT_INTERVALS * self._interval_ms
        with self._lock:
            for event, checked in written:
                self._own_checks[str(event.event_id)] = int(checked.timestamp() * 1000)
            if now_ms - self.pruned_ms > self._interval_ms and len(self._own_checks) > 1000:
                self.pruned_ms = now_ms
                self._own_checks = {key: at for key, at in self._own_checks.items() if at >= horizon}
                self._bundles_checked = {key: at for key, at in self._bundles_checked.items() if at >= horizon}
                # Keys whose last record is long past (cleaned, or now another process's) are dropped too.
                self.chain_due = {key: due for key, due in self.chain_due.items() if due >= horizon}

    def note_chain_due(self, dues: Iterable[tuple[str, int | None]]) -> None:
        """Record the due time of each key's newest delay record (None: forget the key). Written by
        the threads whose records the broker acknowledged, and pruned by :meth:`remember` under the
        same lock: a write during the prune's pass over the dict failed the pass ("dictionary changed
        size during iteration"), and with it the batch whose acknowledgement was being recorded,
        whose records were then dead-lettered though their successors were out."""
        with self._lock:
            for key, due in dues:
                if due is None:
                    self.chain_due.pop(key, None)
                else:
                    self.chain_due[key] = due

    def bundles_acknowledged(
        self,
        checks: Sequence[BundleCheck],
        failed: dict[str, BusError],
        carried_by: dict[str, set[str]],
        now_ms: int,
    ) -> None:
        """Remember the bundles whose every record the broker took: a copy read again is skipped."""
        if not checks:
            return
        refused = {outcome_id for published, ids in carried_by.items() if published in failed for outcome_id in ids}
        with self._lock:
            for check in checks:
                if check.outcome_id not in refused and check.outcome_id not in failed:
                    self._bundles_checked[check.outcome_id] = now_ms
