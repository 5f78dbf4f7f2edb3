"""The loop's joiners: records held back (offsets uncommitted) until their key's next delay record is
handed over, so both are checked together and go on in one record (one record per table, not per
vacuum). A fresh vacuum of a key with parked vacuums joins their next record; a due record whose key
has a later one on its partition waits for it; fresh vacuums of a bundled table ride in the bundle's
lane (riders). A joiner whose record does not come by its deadline is checked alone.
See docs/glossary.md (joiner, rider, chain).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from acidclean.consumers.bundles import WaitingBundle
from acidclean.consumers.partition_state import PartitionState
from acidclean.consumers.waiting import WaitingGroup
from acidclean.consumers.work import Work
from acidclean.schemas.events import CleanupRejected, VacuumCommitted

Partition = tuple[str, int]
# How many intervals overdue a key's delay record may be for a fresh vacuum of the key to wait for it.
JOIN_LATE_INTERVALS = 3
_NEVER = 1 << 62  # a deadline no clock reaches


class JoinerConfig(Protocol):
    """The loop's settings the joiners read."""

    @property
    def vacuum_topic(self) -> str: ...

    @property
    def delay_topic(self) -> str: ...

    @property
    def interval_ms(self) -> int: ...

    @property
    def bundle_riders(self) -> bool: ...


class Joiners:
    """The records waiting for their key's next delay record, by key (on the loop's thread)."""

    def __init__(
        self,
        config: JoinerConfig,
        states: Mapping[Partition, PartitionState],
        chain_due: Callable[[], dict[str, int]],
        note_pending: Callable[[Work], None],
        enqueue: Callable[[Work], None],
    ) -> None:
        self._config = config
        self._states = states
        self._chain_due = chain_due  # key -> due time of its newest delay record (the handler's)
        self._note_pending = note_pending
        self._enqueue = enqueue  # into the work's own lane
        # Fresh vacuums waiting to be checked with their key's delay record: key -> [(work, deadline ms)].
        self.waiting: dict[str, list[tuple[Work, int]]] = {}
        self._due_ms = _NEVER  # no joiner's deadline is before this
        # Joiners riding in a bundle's lane (partition, offset, generation): still counted as joiners
        # until they finish, so they never hold back the reading of the delay partitions.
        self._riding: set[tuple[Partition, int, int]] = set()

    def __bool__(self) -> bool:
        return bool(self.waiting)

    def take_for(self, work: Work) -> list[Work]:
        """The joiners waiting for ``work`` (a delay record handed over), to run in its lane after it."""
        if isinstance(work.event, CleanupRejected):
            return []
        joining = self.waiting.pop(work.event.key, None)
        if joining is None:
            return []
        for joiner, _ in joining:
            self.unjoin(joiner)
        return [joiner for joiner, _ in joining]

    def finished(self, work: Work, current: bool) -> None:
        """``work`` finished: if it rode in a bundle's lane, it is no longer a joiner."""
        if self._riding:
            riding = (work.partition, work.offset, work.generation)
            if riding in self._riding:
                self._riding.discard(riding)
                if current:
                    self.unjoin(work)

    def stray(self, work: Work) -> None:
        """A rider whose bundle went with its partition: it goes back to its own lane, not riding."""
        riding = (work.partition, work.offset, work.generation)
        if riding in self._riding:
            self._riding.discard(riding)
            self.unjoin(work)

    def join_chain(self, partition: Partition, state: PartitionState, work: Work, now: int) -> bool:
        """Keep a fresh vacuum of a key whose vacuums already wait (their delay record is due within an
        interval, or overdue by at most JOIN_LATE_INTERVALS) until that record is checked, so both are
        checked together and wait on in one record.

        Its first check comes at most one interval (plus a margin) later instead of at once: it is
        waiting for a reader of its key anyway. Its offset stays uncommitted meanwhile. Only when this
        process reads the key's delay partition (same number: both topics are keyed alike); otherwise,
        or if that record does not come, it is checked alone at the deadline."""
        if partition[0] != self._config.vacuum_topic or not isinstance(work.event, VacuumCommitted):
            return False
        chains = self._chain_due()
        due = chains.get(work.event.key)
        interval = self._config.interval_ms
        # A cleaner behind its delay partitions hands a key's record over late (seconds after its due
        # time): it is still coming, and a fresh vacuum checked alone would only add a record of its own.
        if due is None or due < now - JOIN_LATE_INTERVALS * interval:
            return False
        if (self._config.delay_topic, partition[1]) not in self._states:
            return False
        # That record is due at `due`; overdue, it is about to be handed over, or is being checked now
        # and its successor comes within an interval. If none comes, the vacuum is checked alone.
        self._join(state, work, work.event.key, (due if due >= now else now + interval) + max(interval // 2, 500))
        return True

    def waits_for_next_record(self, partition: Partition, state: PartitionState, work: Work, now: int) -> bool:
        """Keep a due delay record whose key has a later record on its partition until that one is
        handed over: both are then checked together and wait on in one record.

        A table's vacuums parked in separate records (published by different checks, or by another
        process) would otherwise stay in separate records for good, each due at its own time: one
        record per table is what lets a process re-check many vacuums an interval. The later record is
        known when it is already read and held, or when this process published it after this one
        (``chain_due``: same key, same partition, later due time, so later in the log). The earlier
        record is checked late by less than an interval of reading, once, and never early; if the
        later record is not handed over by the deadline (a rewind drops both, or another process
        owned the partition when it was written), it is checked alone then.

        When a cleaner is behind, a key's records are read after they are due and far apart: only one
        of a key's records waits at a time (the next one takes it along), so the records of a key
        halve each pass and the memory held stays within one record per key."""
        assert isinstance(work.event, WaitingGroup)
        key = work.event.key
        interval = self._config.interval_ms
        if state.held_keys.get(key):
            self._join(state, work, key, now + interval)
            return True
        later_due = self._chain_due().get(key)
        if later_due is None or later_due <= work.due_ms or partition[0] != self._config.delay_topic:
            return False
        if any(joiner.partition[0] == self._config.delay_topic for joiner, _ in self.waiting.get(key, ())):
            return False  # this one takes the waiting one along
        # The later record is read about as late after its due time as this one was.
        self._join(state, work, key, max(now, later_due + (now - work.due_ms)) + interval)
        return True

    def _join(self, state: PartitionState, work: Work, key: str, deadline_ms: int) -> None:
        """Keep ``work`` (its offset uncommitted) until the next delay record of ``key`` is handed over,
        then run it in that record's lane; at ``deadline_ms`` it runs alone."""
        state.in_flight.add(work.offset)
        state.joiners += 1
        self._note_pending(work)
        self.waiting.setdefault(key, []).append((work, deadline_ms))
        self._due_ms = min(self._due_ms, deadline_ms)

    def spill_joined(self, bundle: WaitingBundle, lane: list[Work], now: int) -> None:
        """Records wait to join some of the bundle's tables. Fresh vacuums ride in the bundle's lane:
        its check takes those still waiting into their table's next record, and hands the others back
        to their tables' lanes (a Kafka round trip less per table than reading the record back, which
        with fresh vacuums of many tables arriving over many intervals was most of what a cleaner did).
        For a table whose joiners include delay records, the bundle's check sends its record out on
        its own (due at once), and, read back, it takes its joiners along into its lane; they wait an
        interval more for it (then they are checked alone, as for any record that does not come).

        The keys its header lists tell cheaply whether any joiner waits for it (its members are then
        read for their keys: riders join only a member read from it). A list that leaves out a table
        only leaves that table's joiners to be checked alone at their deadline."""
        if not any(key.decode("utf-8", "replace") in self.waiting for key in bundle.listed_member_keys()):
            return
        for key in bundle.member_keys():
            name = key.decode("utf-8", "replace")
            joining = self.waiting.get(name)
            if joining is None:
                continue
            if self._config.bundle_riders and all(
                joiner.partition[0] == self._config.vacuum_topic and isinstance(joiner.event, VacuumCommitted)
                for joiner, _ in joining
            ):
                del self.waiting[name]
                for joiner, _ in joining:
                    self._riding.add((joiner.partition, joiner.offset, joiner.generation))
                    lane.append(joiner)
                bundle.riders[key] = tuple(joiner.event for joiner, _ in joining)  # type: ignore[misc]
                continue
            bundle.spill.add(key)
            deadline = now + self._config.interval_ms
            joining[:] = [(joiner, max(due, deadline)) for joiner, due in joining]

    def unjoin(self, joiner: Work) -> None:
        state = self._states.get(joiner.partition)
        if state is not None and state.joiners > 0:
            state.joiners -= 1

    def release_late(self, now: int) -> None:
        """Joiners whose key's record did not come by their deadline are checked alone."""
        if now < self._due_ms:
            return  # none is due yet: the scan is over every waiting key
        first_left = _NEVER
        for key in list(self.waiting):
            joining = self.waiting[key]
            if joining[0][1] > now:
                first_left = min(first_left, joining[0][1])
                continue
            for joiner, _ in self.waiting.pop(key):
                self.unjoin(joiner)
                self._enqueue(joiner)
        self._due_ms = first_left

    def purge(self, partitions: set[Partition]) -> None:
        self._riding = {riding for riding in self._riding if riding[0] not in partitions}
        for key in list(self.waiting):
            kept = [(work, deadline) for work, deadline in self.waiting[key] if work.partition not in partitions]
            if kept:
                self.waiting[key] = kept
            else:
                del self.waiting[key]
