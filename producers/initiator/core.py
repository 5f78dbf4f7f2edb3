"""The initiator's bookkeeping, pure: per key the figures, which keys wait for a decision, and the gate.

A key (``tenant/db.table[/partition]``) may be requested only when all of these hold:

* this process owns the key's partition of the delta topic (two initiators of one group never decide
  for the same key; the sweep asks the same question);
* the fold of the request, vacuum, done and dead-letter topics has read everything that was on them
  when this process last received partitions (so a request the previous owner published is known);
* no vacuum of the key is in flight (:class:`InFlight`);
* the thresholds are crossed (:func:`decide`).

The figures of a key are rebuilt from a storage listing when the key is first seen, and again after
each vacuum of it ends (the directory changed); in between, each ``DeltaCommitted`` adds its delta,
once per directory name, so a replayed event counts nothing twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from acidclean.producers.initiator.inflight import InFlight
from acidclean.producers.initiator.rules import Decision, Figures, Thresholds, decide


@dataclass
class KeyFigures:
    """The figures of one key and the delta directories they already count."""

    figures: Figures
    known_deltas: set[str] = field(default_factory=set)

    def add(self, name: str, size: int) -> bool:
        if name in self.known_deltas:
            return False
        self.known_deltas.add(name)
        self.figures = self.figures.with_delta(name, size)
        return True


class InitiatorCore:
    """What the initiator knows, and the one gate every request passes."""

    def __init__(self) -> None:
        self.in_flight = InFlight()
        self.figures: dict[str, KeyFigures] = {}
        self.dirty: set[str] = set()  # keys to evaluate
        self.stale: set[str] = set()  # keys whose figures must be listed again before deciding

    def observe_delta(self, key: str, delta_directory: str, size: int) -> None:
        """A ``DeltaCommitted`` of ``key``: count it (if its figures are known) and evaluate the key."""
        known = self.figures.get(key)
        if known is not None:
            known.add(delta_directory, size)
        self.dirty.add(key)

    def observe_lifecycle(self, event: object) -> str | None:
        """Fold a request/vacuum/cleanup event; returns the key it freed, if it ended the key's last vacuum."""
        key: str | None = getattr(event, "key", None)
        before = key is not None and self.in_flight.in_flight(key)
        self.in_flight.apply(event)
        if key is not None and before and not self.in_flight.in_flight(key):
            self.stale.add(key)  # the vacuum changed the directory: list it again
            self.dirty.add(key)
            return key
        return None

    def needs_listing(self, key: str) -> bool:
        return key not in self.figures or key in self.stale

    def set_listing(self, key: str, figures: Figures, delta_names: Iterable[str]) -> None:
        self.figures[key] = KeyFigures(figures, set(delta_names))
        self.stale.discard(key)

    def may_request(self, key: str, *, owned: bool, caught_up: bool) -> bool:
        """The gate: owned, caught up and nothing in flight. Thresholds are asked separately."""
        return owned and caught_up and not self.in_flight.in_flight(key)

    def decision(self, key: str, thresholds: Thresholds, *, insert_only: bool = False) -> Decision | None:
        known = self.figures.get(key)
        return None if known is None else decide(known.figures, thresholds, insert_only=insert_only)

    def forget(self, keys: Iterable[str]) -> None:
        """Keys of revoked partitions: another process owns them now; their figures would go stale."""
        for key in keys:
            self.figures.pop(key, None)
            self.dirty.discard(key)
            self.stale.discard(key)
