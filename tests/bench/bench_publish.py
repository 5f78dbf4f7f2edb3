"""Benchmark of concurrent publishing: several threads share one ``KafkaEventBus`` (as the cleaner's
workers do), each publishing batches and waiting for them to be acknowledged.

The bus waits for each batch's own delivery reports (a thread sending alone flushes). The reference,
measured in the same run against the same broker, is a bare producer that produces the batch, then
``Producer.flush()``, which also waits for every event the other threads produced meanwhile (what the
bus did before). Reported: batches a second and the p50/p99 time of one publish, for 1 and 4 threads.
Alone, the bus pays its own bookkeeping (retry loop, delivery records) over the bare producer.

Run: ``pytest tests/bench/bench_publish.py -m bench -s``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pytest
from cleaner_support import TENANT, cleaner_settings
from confluent_kafka import Producer

from acidclean.schemas.events import VacuumCommitted
from acidclean.shared.bus.codec import encode
from acidclean.shared.bus.producer import KafkaEventBus, producer_config
from acidclean.shared.bus.topics import ensure_topics

pytestmark = pytest.mark.bench

BATCH = 50
BATCHES_PER_THREAD = 60


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def vacuum(root: Path) -> VacuumCommitted:
    return VacuumCommitted(
        tenant=TENANT,
        table="bench_db.t",
        partition=None,
        occurred_at=datetime.now(timezone.utc),
        location=f"file:{root}/{TENANT}/t",
        compaction_type="MINOR",
        new_directories=["delta_0000001_0000003"],
        obsolete_directories=["delta_0000001_0000001_0000"],
        highest_write_id=3,
        lock_snapshot=[],
        vacuum_job_id=f"bench-{uuid.uuid4().hex}",
    )


def run_threads(
    threads: int, events: list[VacuumCommitted], publish: Callable[[list[VacuumCommitted]], None]
) -> tuple[float, list[float]]:
    """Batches a second over all threads, and the seconds each publish took."""
    took: list[float] = []
    guard = threading.Lock()

    def worker() -> None:
        for _ in range(BATCHES_PER_THREAD):
            started = time.perf_counter()
            publish(events)
            with guard:
                took.append(time.perf_counter() - started)

    workers = [threading.Thread(target=worker) for _ in range(threads)]
    started = time.perf_counter()
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    return threads * BATCHES_PER_THREAD / (time.perf_counter() - started), took


def test_threads_sharing_a_bus_wait_for_their_own_batches_only(
    kafka_bootstrap: str, metastore_uri: str, tmp_path: Path, unique_name: str
) -> None:
    settings = cleaner_settings(kafka_bootstrap, metastore_uri, tmp_path, unique_name)
    events = [vacuum(tmp_path) for _ in range(BATCH)]
    ensure_topics(settings, ("vacuum_committed",))
    topic = settings.topic("vacuum_committed")
    bus = KafkaEventBus(settings.kafka)
    reference = Producer(producer_config(settings.kafka, delivery_timeout_s=30))

    def flush_all(events: list[VacuumCommitted]) -> None:
        for event in events:
            record = encode(event)
            reference.produce(topic, value=record.value, key=record.key, headers=list(record.headers))
        assert reference.flush(30) == 0

    def own_reports(events: list[VacuumCommitted]) -> None:
        bus.publish_many([(topic, event) for event in events])

    try:
        for publish in (flush_all, own_reports):  # warm both producers up (connections, metadata)
            run_threads(1, events, publish)
        print(f"\n[bench] publish_many of {BATCH} events, {BATCHES_PER_THREAD} batches per thread (machine shared)")
        ratios = {}
        for threads in (1, 4):
            rates = {}
            for name, publish in (("bare producer + flush()", flush_all), ("KafkaEventBus", own_reports)):
                rate, took = run_threads(threads, events, publish)
                rates[name] = rate
                print(
                    f"[bench]   threads={threads} {name:>24}: {rate:7.1f} batches/s, one publish p50 "
                    f"{percentile(took, 0.5) * 1000:.1f} ms p99 {percentile(took, 0.99) * 1000:.1f} ms"
                )
            ratios[threads] = rates["KafkaEventBus"] / rates["bare producer + flush()"]
            print(f"[bench]   threads={threads}: KafkaEventBus / bare producer + flush() {ratios[threads]:.2f}x")
        # Shared by four threads, a batch waits for its own events only (2.2-3.5x measured).
        assert ratios[4] > 1.5, ratios
    finally:
        bus.close()
        reference.flush(10)
