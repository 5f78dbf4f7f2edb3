"""The partitions one consumer owns, and the offsets it commits for them only after their work is done.

Shared by the cleaner's loop and the vacuum service. Each owned partition has a state with a
*generation*, new at every assignment (and at every rewind): work started under an older generation
(a partition revoked and assigned again meanwhile) is never counted, so no offset is ever committed
for a partition this process does not own or for work it did not finish. The committable offset of a
partition is its state's to say (the lowest record not finished); it is committed when it moved.
On revoke, running work is let finish (bounded), finished offsets are committed synchronously and
the state is dropped; on loss, nothing is committed.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from confluent_kafka import TopicPartition

from acidclean.shared.bus.consumer import ConsumerErrors
from acidclean.shared.logs import log

Partition = tuple[str, int]


class PartitionStateLike(Protocol):
    """What this module needs of a consumer's per-partition state."""

    generation: int
    accepting: bool
    committed: int | None

    def committable(self) -> int | None: ...


class Committer(Protocol):
    def commit(self, message: Any = None, offsets: Any = None, asynchronous: bool = True) -> Any: ...


S = TypeVar("S", bound=PartitionStateLike)


class OwnedPartitions(Generic[S]):
    """The states of the partitions owned (by topic and number), the work running on each, and their
    offset commits. ``states`` and the generations change under ``guard``; thread-safe where noted."""

    def __init__(self) -> None:
        self.states: dict[Partition, S] = {}
        self.guard = threading.Lock()  # states' generation/accepting and the running counts
        self._running: dict[tuple[Partition, int], int] = {}
        self._generations = itertools.count(1)

    # -- ownership ---------------------------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition], new_state: Callable[[int], S]) -> None:
        """Own ``partitions``, each with a new state of a new generation."""
        with self.guard:
            for item in partitions:
                self.states[(item.topic, item.partition)] = new_state(next(self._generations))

    def renew_generation(self, state: S) -> None:
        """Give ``state`` a new generation: work started before is no longer counted (a rewind)."""
        with self.guard:
            state.generation = next(self._generations)

    def stop_accepting(self, partitions: Iterable[Partition]) -> None:
        """No new work starts on ``partitions`` (revoked, lost or shutting down)."""
        with self.guard:
            for partition in partitions:
                state = self.states.get(partition)
                if state is not None:
                    state.accepting = False

    def forget(self, partitions: Iterable[Partition]) -> None:
        with self.guard:
            for partition in partitions:
                self.states.pop(partition, None)

    # -- running work (any thread) -----------------------------------------------------------------

    def begin(self, partition: Partition, generation: int) -> bool:
        """Count one work of ``partition`` as running; False (not counted) when the partition is no
        longer owned under that generation or takes no new work: the work must not start."""
        with self.guard:
            state = self.states.get(partition)
            if state is None or not state.accepting or state.generation != generation:
                return False
            key = (partition, generation)
            self._running[key] = self._running.get(key, 0) + 1
            return True

    def end(self, partition: Partition, generation: int) -> None:
        with self.guard:
            key = (partition, generation)
            left = self._running.get(key, 1) - 1
            if left:
                self._running[key] = left
            else:
                self._running.pop(key, None)

    def wait_idle(
        self,
        partitions: Sequence[Partition],
        timeout_s: float,
        drain: Callable[[], None],
        *,
        logger: logging.Logger,
        gave_up: str,
        poll_s: float,
    ) -> bool:
        """Let work running on ``partitions`` finish (``drain`` takes in what finished, so its outcome
        counts for the commit); False, after logging ``gave_up`` with the partitions still busy, if
        some still runs after ``timeout_s``."""
        wanted = set(partitions)
        deadline = time.monotonic() + timeout_s
        while True:
            drain()
            with self.guard:
                running = [key[0] for key in self._running if key[0] in wanted]
            if not running:
                return True
            if time.monotonic() > deadline:
                log(logger, logging.WARNING, gave_up, partitions=partition_names(running))
                return False
            time.sleep(poll_s)

    def owned_record(self, message: Any, errors: ConsumerErrors) -> tuple[Partition, S, int] | None:
        """The partition, state and offset of a consumed message; None for an error (reported to
        ``errors``) or a record of a partition not owned or taking no new work (fetched before a
        revoke: its next owner reads it from the committed offset)."""
        error = message.error()
        if error is not None:
            errors.report(error)
            return None
        partition: Partition = (message.topic(), message.partition())
        state = self.states.get(partition)
        if state is None or not state.accepting:
            return None
        return partition, state, message.offset()

    # -- offsets -----------------------------------------------------------------------------------

    def commit(
        self,
        consumer: Committer,
        *,
        asynchronous: bool,
        only: Sequence[Partition] | None = None,
        force: bool = False,
        failing: tuple[type[Exception], ...] = (Exception,),
    ) -> Exception | None:
        """Commit what moved. ``force`` commits synchronously even offsets an asynchronous commit
        already carries, so they are stored before a partition is handed over (commits are sent in
        order, so the synchronous one returning means the earlier ones were applied too). A commit
        that fails with one of ``failing`` is forgotten (the next commit sends it again) and returned:
        it only means the records will be processed again."""
        offsets = []
        for partition in only if only is not None else list(self.states):
            state = self.states.get(partition)
            if state is None:
                continue
            committable = state.committable()
            if committable is not None and (force or state.committed is None or committable > state.committed):
                offsets.append(TopicPartition(partition[0], partition[1], committable))
                state.committed = committable
        if not offsets:
            return None
        try:
            consumer.commit(offsets=offsets, asynchronous=asynchronous)
        except failing as error:
            self.commit_failed(offsets)
            return error
        return None

    def commit_failed(self, offsets: Iterable[TopicPartition], only_if_sent: bool = False) -> None:
        """Forget the commit of ``offsets`` (the next one sends them again); ``only_if_sent``: only where
        the offset noted as committed is still the one that failed (an asynchronous commit's callback)."""
        for item in offsets:
            state = self.states.get((item.topic, item.partition))
            if state is not None and (not only_if_sent or state.committed == item.offset):
                state.committed = None


def partition_names(partitions: Iterable[Partition]) -> list[str]:
    """``topic[number]`` of each partition, for log lines."""
    return [f"{topic}[{number}]" for topic, number in partitions]
