"""Whether a cleaner's share of its group's partitions leaves one of its two topics to other processes.

A cleaner reads the vacuum topic and the delay topic. Kafka's classic group protocol assigns with
``cooperative-sticky`` by default, which balances the number of partitions each member owns, not each
topic's: a process that joins a running one may get every delay partition while the other keeps every
vacuum partition. Then a table's fresh vacuums and its waiting records are checked in different
processes (they cannot go on in one record), and one process does nearly all the re-checks. The range
assignors (the classic protocol's, eager, or the broker's) give each process the same partition numbers
of both topics, unless the topics have different partition counts.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from acidclean.consumers.logs import log
from acidclean.shared.bus.consumer import Assignment

LOGGER = logging.getLogger("acidclean.cleaner")

# Owning a single partition of one topic and none of the other is what a group with as many members
# as partitions gets under any assignor: only two or more is a split another assignment would even out.
LOPSIDED_FROM = 2


@dataclass(frozen=True)
class Lopsided:
    """This process owns ``owned`` partitions of ``topic`` and none of ``missing``."""

    topic: str
    owned: int
    missing: str


def partitions_by_topic(partitions: Iterable[tuple[str, int]], topics: Sequence[str]) -> dict[str, int]:
    """How many of ``partitions`` (topic, number) each of ``topics`` has (zero included)."""
    counts = dict.fromkeys(topics, 0)
    for topic, _ in partitions:
        if topic in counts:
            counts[topic] += 1
    return counts


def lopsided(counts: Mapping[str, int]) -> Lopsided | None:
    """The topic this process owns at least :data:`LOPSIDED_FROM` partitions of while it owns none of
    another of its topics (the first such pair in ``counts``' order), or None."""
    missing = next((topic for topic, owned in counts.items() if owned == 0), None)
    if missing is None:
        return None
    for topic, owned in counts.items():
        if owned >= LOPSIDED_FROM:
            return Lopsided(topic, owned, missing)
    return None


def lopsided_advice(found: Lopsided, group_id: str, assignment: Assignment, for_s: float) -> str:
    """The warning for ``found``: what it costs and what to change."""
    what = (
        f"for {for_s:.0f} s this process has owned {found.owned} partitions of {found.topic} and none of "
        f"{found.missing}: other processes of group {group_id} read them, so a table's fresh vacuums and its "
        "waiting records are checked in different processes and the work is split unevenly"
    )
    if assignment is Assignment.BROKER:
        return (
            f"{what}. With group.protocol=consumer the broker's range assignor gives each process the same "
            "partition numbers of every topic: give both topics the same number of partitions"
        )
    if assignment is Assignment.CLASSIC_RANGE:
        return (
            f"{what}. The range assignor gives each process the same partition numbers of every topic: give "
            "both topics the same number of partitions"
        )
    return (
        f"{what}. Kafka's classic group protocol with cooperative-sticky balances the number of partitions each "
        "process owns, not each topic's; it tips this way when a process joins a group that is already "
        "running (a rolling restart), and even when the processes start together (the first to join gets every "
        "partition, and the rebalance hands the next one whole topics). On Kafka 4.0 or later set "
        "ACIDCLEAN_KAFKA_GROUP_PROTOCOL=consumer on every process of the group; on older brokers set "
        "ACIDCLEAN_KAFKA_PARTITION_ASSIGNMENT_STRATEGY=range on every process (its rebalances are eager: each "
        "process gives up all its partitions whenever one joins or leaves), stopping them all first: the two "
        "assignors cannot share a group"
    )


# How long an assignment may stay lopsided (one topic's partitions and none of the other) before the
# loop warns: well past the two rounds of a cooperative rebalance.
LOPSIDED_WARN_AFTER_MS = 60_000


class LopsidedWatch:
    """Since when the assignment is lopsided, and the one warning once it has lasted (the loop's thread)."""

    def __init__(self, group_id: str, assignment: Assignment) -> None:
        self._group_id = group_id
        self._assignment = assignment
        self._since: tuple[Lopsided, int] | None = None
        self._warned = False

    def note(self, counts: Mapping[str, int], now_ms: int) -> None:
        """The partitions owned per topic changed (``counts``)."""
        found = lopsided(counts)
        if found is None:
            self._since, self._warned = None, False
        elif self._since is None:
            self._since = (found, now_ms)
        else:
            self._since = (found, self._since[1])

    def warn_if_lasting(self, now_ms: int) -> None:
        """Warn once when the assignment has stayed lopsided past a rebalance's usual length: the
        cooperative protocols move partitions in two rounds, lopsided for a moment in between."""
        if self._since is None or self._warned:
            return
        found, since_ms = self._since
        if now_ms - since_ms < LOPSIDED_WARN_AFTER_MS:
            return
        self._warned = True
        advice = lopsided_advice(found, self._group_id, self._assignment, (now_ms - since_ms) / 1000)
        log(LOGGER, logging.WARNING, advice, owned=found.owned, topic=found.topic, missing=found.missing)
