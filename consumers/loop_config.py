"""The cleaner loop's settings, and the consumer it reads through."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from confluent_kafka import TopicPartition

from acidclean.shared.bus.consumer import Assignment


class ConsumerLike(Protocol):
    """The part of ``confluent_kafka.Consumer`` the loop uses (a fake implements it in unit tests)."""

    def subscribe(self, topics: list[str], **callbacks: Any) -> None: ...
    def poll(self, timeout: float = -1) -> Any: ...
    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]: ...
    def pause(self, partitions: list[TopicPartition]) -> None: ...
    def resume(self, partitions: list[TopicPartition]) -> None: ...
    def seek(self, partition: TopicPartition) -> None: ...
    def commit(self, message: Any = None, offsets: Any = None, asynchronous: bool = True) -> Any: ...
    def incremental_assign(self, partitions: list[TopicPartition]) -> None: ...
    def assign(self, partitions: list[TopicPartition]) -> None: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class LoopConfig:
    vacuum_topic: str
    delay_topic: str
    tenant: str
    cleaner_id: str
    interval_ms: int
    batch_size: int = 500
    revoke_timeout_s: float = 60.0
    retry_backoff_ms: int | None = None
    error_tries: int = 3  # handler errors other than BusError: tries before the dead letter
    error_pause_ms: int = 100  # pause after a failed try, doubled each time (at most one interval)
    close_timeout_s: float = 15.0  # the final offset commit and group leave, once the broker is gone
    workers: int = 1  # batches running at once (the table thread pool's size)
    batch_tables: int = 200  # lanes (tables) in one batch at most
    held_per_partition: int = 250  # records read ahead of their due time and kept, per paused partition
    # and at most this many bytes of them: a bundle of waiting tables is up to 512 KB, and those due
    # within an interval are checked on time only if they are read ahead (1 MB held two of them)
    held_bytes: int = 16 << 20
    max_queued: int = 2000  # records handed over and not finished (queued or running), before fetching pauses
    # A due delay record of one table alone waits up to this for the partition's other such records due
    # within it, so they are checked in one batch and go on in one bundle (the handler's bundle spread)
    gather_ms: int = 0
    bundle_riders: bool = True  # fresh vacuums of a bundled table ride in its lane (off: measured, issue 50)
    group_id: str = ""  # for the warning about a lopsided assignment
    # How the group assigns partitions: how an assignment is taken, and which advice that warning gives
    assignment: Assignment = Assignment.COOPERATIVE_STICKY
