"""``acidclean hive-queue``'s metrics count what each round's report says it did."""

from __future__ import annotations

from acidclean.producers.hive_queue.bridge import RoundReport
from acidclean.producers.hive_queue.metrics import HiveQueueMetrics


def value(metrics: HiveQueueMetrics, name: str, **labels: str) -> float:
    sample = metrics.registry.get_sample_value(name, labels)
    return 0.0 if sample is None else sample


def test_rounds_entries_and_the_last_good_round_are_counted_from_the_reports() -> None:
    now = [1_000.0]
    metrics = HiveQueueMetrics(clock=lambda: now[0])
    metrics.observe(RoundReport(taken=[7, 8], moved=[(5, "compacted"), (6, "compacted"), (4, "cleaned")]))
    now[0] = 1_060.0
    metrics.observe(RoundReport(republished=[9], error="cannot reach the Hive Metastore"))

    assert value(metrics, "acidclean_hive_queue_rounds_total", outcome="ok") == 1
    assert value(metrics, "acidclean_hive_queue_rounds_total", outcome="failed") == 1
    assert value(metrics, "acidclean_hive_queue_entries_taken_total") == 2
    assert value(metrics, "acidclean_hive_queue_entries_republished_total") == 1
    assert value(metrics, "acidclean_hive_queue_entries_moved_total", step="compacted") == 2
    assert value(metrics, "acidclean_hive_queue_entries_moved_total", step="cleaned") == 1
    # The failed round at 1,060 does not move the last good round's time.
    assert value(metrics, "acidclean_hive_queue_last_ok_round_timestamp_seconds") == 1_000.0
