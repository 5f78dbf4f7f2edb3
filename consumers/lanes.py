"""The cleaner loop's lanes: the works handed over, queued per table (one lane per table, one per
bundle, one for refused records). A lane's works run one after the other; free lanes are dealt to the
idle workers in batches. On the loop's thread only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from acidclean.consumers.bundles import WaitingBundle
from acidclean.consumers.work import Work

Partition = tuple[str, int]


@dataclass
class Lane:
    queue: list[Work] = field(default_factory=list)
    busy: bool = False  # a batch is running its works (until the batch frees it)


class Lanes:
    """Every lane with works queued or running, by name."""

    def __init__(self) -> None:
        self.by_name: dict[str, Lane] = {}

    def queue_of(self, work: Work) -> list[Work]:
        """The queue of ``work``'s own lane."""
        return self.by_name.setdefault(work.lane, Lane()).queue

    def enqueue(self, work: Work) -> None:
        self.queue_of(work).append(work)

    def busy(self) -> bool:
        return any(lane.busy or lane.queue for lane in self.by_name.values())

    def free(self, name: str) -> None:
        lane = self.by_name.get(name)
        if lane is not None:
            lane.busy = False

    def deal(self, workers: int, idle: int, batch_tables: int) -> list[list[tuple[str, list[Work]]]]:
        """Deal the free lanes, oldest first, to ``idle`` of ``workers`` workers: each batch takes one
        worker's share of them (the ready lanes over all workers, at most ``batch_tables``), so the
        tables that are ready together are spread over the threads instead of filling one batch while
        the other threads idle; a worker still busy takes its share of what is left when it is free.
        The lanes dealt are busy until freed."""
        ready: list[str] = []
        for name in list(self.by_name):
            lane = self.by_name[name]
            if lane.busy:
                continue
            if not lane.queue:
                del self.by_name[name]
                continue
            ready.append(name)
        if not ready or idle <= 0:
            return []
        share = min(max(1, batch_tables), -(-len(ready) // workers))
        count = min(idle, -(-len(ready) // share))
        batches = []
        for index in range(count):
            batch = []
            for name in ready[index * share : (index + 1) * share]:
                lane = self.by_name[name]
                batch.append((name, lane.queue))
                lane.queue, lane.busy = [], True
            batches.append(batch)
        return batches

    def purge(self, partitions: set[Partition]) -> list[Work]:
        """Drop the queued works of ``partitions``; returns the riders whose bundle went with its
        partition (they must be checked in their own tables' lanes)."""
        strays: list[Work] = []
        for name, lane in self.by_name.items():
            lane.queue = [work for work in lane.queue if work.partition not in partitions]
            if lane.queue and not isinstance(lane.queue[0].event, WaitingBundle) and lane.queue[0].lane != name:
                strays += lane.queue
                lane.queue = []
        return strays
