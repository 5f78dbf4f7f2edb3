"""The Prometheus metrics of ``acidclean hive-queue``: rounds, and entries taken, republished and moved."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge

from acidclean.producers.hive_queue.bridge import RoundReport


@dataclass
class HiveQueueMetrics:
    registry: CollectorRegistry = field(default_factory=lambda: CollectorRegistry(auto_describe=True))
    clock: Callable[[], float] = time.time

    def __post_init__(self) -> None:
        r = self.registry
        self.rounds = Counter(
            "acidclean_hive_queue_rounds",
            "Rounds over Hive's compaction queue, by outcome (ok, failed).",
            ["outcome"],
            registry=r,
        )
        self.taken = Counter(
            "acidclean_hive_queue_entries_taken", "Queue entries taken (find_next_compact2) and published.", registry=r
        )
        self.republished = Counter(
            "acidclean_hive_queue_entries_republished",
            "Requests of taken entries published again (the publish after the take was lost).",
            registry=r,
        )
        self.moved = Counter(
            "acidclean_hive_queue_entries_moved",
            "Queue entries moved to the state the event log proves, by step.",
            ["step"],
            registry=r,
        )
        self.last_ok = Gauge(
            "acidclean_hive_queue_last_ok_round_timestamp_seconds",
            "When the last round that reached the metastore and the broker ended (Unix time).",
            registry=r,
        )

    def observe(self, report: RoundReport) -> None:
        """Count one round's report."""
        self.rounds.labels("failed" if report.error is not None else "ok").inc()
        self.taken.inc(len(report.taken))
        self.republished.inc(len(report.republished))
        for _, step in report.moved:
            self.moved.labels(step).inc()
        if report.error is None:
            self.last_ok.set(self.clock())
