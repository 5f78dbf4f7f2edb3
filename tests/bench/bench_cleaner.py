"""Benchmarks of the cleaner, each against a reference measured in the same run, on the real stack.

1. Lateness of delayed re-checks (hand-over time minus due time), over vacuums cycling through the
   delay topic because a reader holds their tables. Reference: a textbook delay consumer in its own
   group reading the *same* delay records (pause + seek back, resume at the due time, re-fetch).
   "Never early" is also checked from outside: every re-check's event is stamped at or after the
   due time of the envelope it follows.
2. Metastore calls per table per interval, in the same run: show_locks calls made, against the
   number of checks (one call per check is what a per-event checker such as openLooKeng's
   CleanerTask makes).
3. Cleanups per second of one process on lock-free tables, against a single-threaded loop doing the
   same metastore calls, listing and deletes (no Kafka), for 1, 2, 4 and 8 threads in one run
   (``ACIDCLEAN_BENCH_THREADS=1,4`` picks others; ``ACIDCLEAN_BENCH_TABLES`` the tables per run, 400: with
   80 a cleaner run lasted about 0.5 s on a quick day, and its ratio to the loop swung with the box;
   1.40x at 80 tables, 1.94x and 2.16x at 400, within minutes on 2026-11-29;
   ``ACIDCLEAN_BENCH_ROUNDS=3`` runs the curve three times and prints each ratio's median).
   Each cleaner run is timed from a warm producer's publish to the last CleanupDone and compared with
   the loop run just before and after it (half as many tables), since the shared box's load drifts.

Run: ``pytest tests/bench/bench_cleaner.py -m bench -s`` (about three minutes).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from cleaner_support import (
    TENANT,
    Table,
    Watcher,
    cleaner_settings,
    create_table,
    publish,
    start_cleaner_process,
    start_reader,
)
from confluent_kafka import Consumer, TopicPartition
from cpu_use import CpuWindow, listening_pid
from metrics_scrape import scrape, scrape_by_label

from acidclean.consumers.rules.obsolete import CleanupPlan, check_markers, plan_cleanup
from acidclean.consumers.rules.readiness import open_transactions_before, ready_to_clean, table_locks
from acidclean.deploy.local.process import free_port
from acidclean.schemas.events import DelayedVacuums, DelayEnvelope, VacuumCommitted
from acidclean.shared.acid.id_lists import cleaner_ids
from acidclean.shared.acid.write_ids import ValidTxnList
from acidclean.shared.bus.codec import header_due_at_ms
from acidclean.shared.bus.producer import KafkaEventBus
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.storage import open_location
from acidclean.shared.vacuum_marker import VACUUM_MARKER

pytestmark = pytest.mark.bench

INTERVAL_MS = 500
LATENESS_TABLES = 20
EVENTS_PER_TABLE = 5
WINDOW_S = 15.0
THROUGHPUT_TABLES = int(os.environ.get("ACIDCLEAN_BENCH_TABLES", "400"))
THROUGHPUT_ROUNDS = max(1, int(os.environ.get("ACIDCLEAN_BENCH_ROUNDS", "1")))


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class TextbookDelayConsumer(threading.Thread):
    """Reference: pause the partition whose head is not due, seek back, poll with a timeout set by
    the next due time, resume when due, measure when the record comes back (default fetch settings)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"reference-{uuid.uuid4().hex}",
                "enable.auto.commit": "false",
                "auto.offset.reset": "latest",
                "partition.assignment.strategy": "cooperative-sticky",
            }
        )
        self.topic = topic
        self.samples: list[float] = []
        self.early = 0
        self.recording = False
        self.stop_flag = threading.Event()
        self.assigned = threading.Event()

    def run(self) -> None:
        paused: dict[int, int] = {}
        self.consumer.subscribe([self.topic], on_assign=lambda c, ps: self.assigned.set())
        while not self.stop_flag.is_set():
            now = time.time_ns() // 1_000_000
            for partition, due in list(paused.items()):
                if due <= now:
                    self.consumer.resume([TopicPartition(self.topic, partition)])
                    del paused[partition]
            timeout = min([max(0, due - now) / 1000 for due in paused.values()] + [0.5])
            for message in self.consumer.consume(100, timeout):
                if message.error() or message.partition() in paused:
                    continue
                due = header_due_at_ms(raw_of(message))
                now = time.time_ns() // 1_000_000
                if due is None:
                    continue
                if due > now:
                    tp = TopicPartition(self.topic, message.partition(), message.offset())
                    self.consumer.pause([tp])
                    self.consumer.seek(tp)
                    paused[message.partition()] = due
                elif self.recording:
                    self.samples.append((now - due) / 1000)
        self.consumer.close()


def raw_of(message: Any) -> Any:
    from acidclean.shared.bus.records import raw_record

    return raw_record(message)


def test_lateness_and_metastore_calls_of_delayed_rechecks(
    metastore: HiveMetastore, tmp_path: Path, kafka_bootstrap: str, metastore_uri: str, unique_name: str
) -> None:
    root = tmp_path / "data"
    settings = cleaner_settings(
        kafka_bootstrap, metastore_uri, root, unique_name, interval_ms=INTERVAL_MS, partitions=4
    )
    watcher = Watcher(settings)
    tables = [create_table(metastore, root, f"{unique_name}{i}") for i in range(LATENESS_TABLES)]
    readers = [start_reader(metastore, table) for table in tables]
    vacuums = [event(table, i) for table in tables for i in range(EVENTS_PER_TABLE)]
    reference = TextbookDelayConsumer(kafka_bootstrap, settings.topic("cleanup_delay"))
    reference.start()
    port = free_port()
    cleaner = start_cleaner_process(
        settings,
        tmp_path / "cleaner.log",
        cleaner_id="bench",
        args=("--metrics-port", str(port)),
    )
    show_locks = 'acidclean_cleaner_metastore_calls_total{call="show_locks"}'
    try:
        reference.assigned.wait(30)
        publish(settings, *vacuums)
        wanted = {v.event_id for v in vacuums}
        watcher.wait_for(
            lambda: wanted <= {i for e in watcher.records("cleanup_delay") for i in waiting_ids(e)},
            60,
            "every vacuum cycling",
        )
        time.sleep(2 * INTERVAL_MS / 1000)
        calls_before = scrape(port, show_locks)
        window_start = datetime.now(timezone.utc)
        reference.recording = True
        time.sleep(WINDOW_S)
        reference.recording = False
        window_end = datetime.now(timezone.utc)
        calls = scrape(port, show_locks) - calls_before
        time.sleep(1.0)
    finally:
        reference.stop_flag.set()
        reference.join(10)
        cleaner.stop()
        for reader in readers:
            reader.release()
        watcher.close()

    # A re-check writes a DelayEnvelope (one vacuum) or a DelayedVacuums (several vacuums of a table),
    # following the delay records it carries on: late by its time minus the earliest of their due
    # times, early if written before any of them was due.
    records = {e.event_id: e for e in watcher.records("cleanup_delay") if isinstance(e, DelayEnvelope | DelayedVacuums)}
    rechecks: list[float] = []
    early: list[float] = []
    checks = 0
    for record in records.values():
        followed_ids = record.merged_from if isinstance(record, DelayedVacuums) else [record.causation_id]
        followed = [records[i].due_at for i in followed_ids if i in records]
        if not followed or not window_start <= record.occurred_at < window_end:
            continue
        rechecks.append((record.occurred_at - min(followed)).total_seconds())
        early += [gap for gap in [(record.occurred_at - max(followed)).total_seconds()] if gap < 0]
        checks += len(waiting_ids(record))
    intervals = WINDOW_S * 1000 / INTERVAL_MS
    ours, ref = [max(0.0, r) for r in rechecks], reference.samples
    print(
        f"\n[bench] delayed re-check lateness (re-check time - due time), {len(rechecks)} delay records re-checking "
        f"{checks} vacuums in {WINDOW_S:.0f} s "
        f"({LATENESS_TABLES} tables x {EVENTS_PER_TABLE} waiting vacuums, interval {INTERVAL_MS} ms, cleaner in "
        "its own process)"
    )
    print(
        f"[bench]   cleaner:   p50 {percentile(ours, 0.5) * 1000:7.1f} ms  p99 {percentile(ours, 0.99) * 1000:7.1f} ms"
        f"  max {max(ours) * 1000:7.1f} ms  mean {statistics.mean(ours) * 1000:6.1f} ms  early {len(early)}"
    )
    print(
        f"[bench]   reference: p50 {percentile(ref, 0.5) * 1000:7.1f} ms  p99 {percentile(ref, 0.99) * 1000:7.1f} ms"
        f"  max {max(ref) * 1000:7.1f} ms  mean {statistics.mean(ref) * 1000:6.1f} ms  ({len(ref)} records, "
        "textbook pause/seek/resume, same delay records)"
    )
    print(
        f"[bench] metastore show_locks per table per interval: {calls / LATENESS_TABLES / intervals:.2f} "
        f"({calls:.0f} calls); reference one-call-per-check: {checks / LATENESS_TABLES / intervals:.2f} "
        f"({checks} checks)"
    )
    assert early == [], early[:5]
    assert calls < checks


def waiting_ids(record: Any) -> list[Any]:
    """The vacuums a delay record keeps waiting: one for a DelayEnvelope, several for a DelayedVacuums."""
    if isinstance(record, DelayedVacuums):
        return [item.vacuum.event_id for item in record.waiting]
    return [record.correlation_id] if isinstance(record, DelayEnvelope) else []


def event(table: Table, index: int) -> VacuumCommitted:
    return VacuumCommitted(
        tenant=TENANT,
        table=table.full_name,
        partition=None,
        occurred_at=datetime.now(timezone.utc),
        location="file:" + str(table.location),
        compaction_type="MINOR",
        new_directories=["delta_0000001_0000003"],
        obsolete_directories=[],
        highest_write_id=3,
        lock_snapshot=table.lock_snapshot(),
        vacuum_job_id=f"bench-{index}",
    )


def reference_clean(metastore: HiveMetastore, table: Table, vacuum: VacuumCommitted) -> int:
    """What one cleanup costs without Kafka: the same metastore calls (every lock, the transaction
    list, the table, its write ids), the listing, the marker reads and the deletes."""
    all_locks = metastore.show_locks()
    txns = ValidTxnList.from_string(metastore.valid_txn_list())
    open_before = open_transactions_before(vacuum.next_txn_id, txns.open_ids, all_locks)
    assert ready_to_clean(vacuum.lock_snapshot, table_locks(all_locks, vacuum.table), open_before).ready
    info = metastore.get_table(table.db, table.name)
    ids = cleaner_ids(metastore.kind, metastore.valid_write_ids(table.db, table.name), vacuum.highest_write_id)
    storage = open_location(info.location)
    children = storage.fs.list_dir(storage.path)
    markers = {name: storage.fs.read_file(storage.child(f"{name}/{VACUUM_MARKER}")) for name in vacuum.new_directories}
    assert check_markers(vacuum, markers) is None
    plan = plan_cleanup(vacuum, children, ids, txns)
    assert isinstance(plan, CleanupPlan)
    for name in plan.delete:
        storage.fs.tree_size(storage.child(name))
        storage.fs.delete_dir(storage.child(name))
    return len(plan.delete)


def run_cleaner(
    settings: Any,
    metastore: HiveMetastore,
    root: Path,
    unique_name: str,
    tmp_path: Path,
    vacuums: list[VacuumCommitted],
    services: dict[str, int | None],
) -> tuple[float, CpuWindow, dict[str, float]]:
    """Seconds from publishing ``vacuums`` (one batch) to the last CleanupDone, cleaner in its own process,
    the cores that it and ``services`` (name: pid) used meanwhile, and its counters' growth meanwhile
    (see :func:`cleaner_counters`).

    The vacuums go out through a producer that already published the warm-up vacuum: a new producer's
    first publish (metadata, producer id) took 50 to 500 ms here, the benchmark's cost and not the
    cleaner's, against about 700 ms for the whole 80-table run of the loop on a quiet machine."""
    # The run is timed by the CleanupDone events' own times, so the watcher need not see them at once:
    # its fetches every 10 ms (the tests' default) would take a tenth of the box's CPU from what is measured.
    watcher = Watcher(settings, fetch_wait_ms=500)
    warm = create_table(metastore, root, f"{unique_name}w")
    warm.commit_deltas(2)
    warm_vacuum = warm.minor_vacuum()
    topic = settings.topic("vacuum_committed")
    port = free_port()
    cleaner = start_cleaner_process(
        settings, tmp_path / "cleaner.log", cleaner_id="bench", args=("--metrics-port", str(port))
    )
    try:
        with KafkaEventBus(settings.kafka) as bus:
            bus.publish(topic, warm_vacuum)  # the group is joined, the workers and this producer are warm
            watcher.wait_for(lambda: watcher.done(warm_vacuum), 60, "the warm-up cleanup")
            before = cleaner_counters(port)
            # The bench's own process too (its watcher decodes every CleanupDone): the box's rest is others'.
            window = CpuWindow({"cleaner": cleaner.process.pid, **services, "bench": os.getpid()}).start()
            started_at = datetime.now(timezone.utc)
            bus.publish_many([(topic, vacuum) for vacuum in vacuums])
            watcher.wait_for(lambda: all(watcher.done(v) for v in vacuums), 120, "every CleanupDone")
            window.stop()
            after = cleaner_counters(port)
        last = max(watcher.done(v)[0].occurred_at for v in vacuums)
        cleaner_s = (last - started_at).total_seconds()
    finally:
        cleaner.stop()
        watcher.close()
    return cleaner_s, window, {name: after[name] - before.get(name, 0.0) for name in after}


def cleaner_counters(port: int) -> dict[str, float]:
    """The cleaner's batches (``batches``), the tables in them (``batch_tables``) and its metastore
    calls by call (``calls:<call>``), from its ``/metrics``."""
    counters = {
        "batches": scrape(port, "acidclean_cleaner_batch_tables_count"),
        "batch_tables": scrape(port, "acidclean_cleaner_batch_tables_sum"),
    }
    for call, count in scrape_by_label(port, "acidclean_cleaner_metastore_calls_total").items():
        counters[f"calls:{call}"] = count
    return counters


def batches_summary(counters: dict[str, float], cleanups: int) -> str:
    """``counters``' batches, tables a batch and metastore calls a cleanup, as one line's end."""
    batches = counters.get("batches", 0.0)
    calls = ", ".join(
        f"{name.removeprefix('calls:')} {count / cleanups:.3f}"
        for name, count in sorted(counters.items())
        if name.startswith("calls:") and count
    )
    per_batch = counters.get("batch_tables", 0.0) / batches if batches else float("nan")
    return f"{batches:.0f} batches of {per_batch:.1f} tables; metastore calls a cleanup: {calls}"


def test_cleanups_per_second_against_a_single_threaded_loop_for_1_2_4_8_threads(
    metastore: HiveMetastore,
    tmp_path: Path,
    kafka_bootstrap: str,
    metastore_uri: str,
    unique_name: str,
) -> None:
    """One run: the cleaner with 1, 2, 4 and 8 threads on tables of their own, each run between two
    stretches of the reference loop (a quarter of the tables before, a quarter after), so each ratio
    compares with the loop measured around it: the load of the shared box drifts within a run. With
    ``ACIDCLEAN_BENCH_ROUNDS`` above 1 the curve is run that many times (every other round in reverse
    order, so no thread count always comes first) and the medians of the rounds' ratios are printed."""
    root = tmp_path / "data"
    curve = [int(t) for t in os.environ.get("ACIDCLEAN_BENCH_THREADS", "1,2,4,8").split(",")]
    runs = [
        (round_, threads)
        for round_ in range(THROUGHPUT_ROUNDS)
        for threads in (curve if round_ % 2 == 0 else curve[::-1])
    ]
    quarter = max(1, THROUGHPUT_TABLES // 4)
    theirs = {
        run: [create_table(metastore, root, f"{unique_name}k{run[0]}r{run[1]}c{i}") for i in range(2 * quarter)]
        for run in runs
    }
    ours = {
        run: [create_table(metastore, root, f"{unique_name}k{run[0]}t{run[1]}c{i}") for i in range(THROUGHPUT_TABLES)]
        for run in runs
    }
    for table in [table for tables in [*theirs.values(), *ours.values()] for table in tables]:
        table.commit_deltas(3)
    their_vacuums = {run: [table.minor_vacuum() for table in tables] for run, tables in theirs.items()}
    rates: dict[tuple[int, int], float] = {}
    loop_rates: dict[tuple[int, int], float] = {}
    services = {"metastore": listening_pid(metastore_uri), "broker": listening_pid(kafka_bootstrap)}
    windows: dict[tuple[int, int], CpuWindow] = {}
    counters: dict[tuple[int, int], dict[str, float]] = {}
    loop_window = CpuWindow({"loop": os.getpid(), "metastore": services["metastore"]})

    def reference(run: tuple[int, int], batch: slice) -> float:
        started = time.perf_counter()
        loop_window.start()
        for table, vacuum in zip(theirs[run][batch], their_vacuums[run][batch], strict=True):
            assert reference_clean(metastore, table, vacuum) == 3
        loop_window.stop()
        return time.perf_counter() - started

    load_before = os.getloadavg()[0]
    for run in runs:
        round_, threads = run
        name = f"{unique_name}k{round_}t{threads}"
        settings = cleaner_settings(
            kafka_bootstrap, metastore_uri, root, name, interval_ms=INTERVAL_MS, partitions=4, threads=threads
        )
        vacuums = [table.minor_vacuum() for table in ours[run]]
        reference_s = reference(run, slice(0, quarter))
        cleaner_s, windows[run], counters[run] = run_cleaner(
            settings, metastore, root, name, tmp_path / f"{round_}-{threads}", vacuums, services
        )
        reference_s += reference(run, slice(quarter, None))
        assert all(table.children() == v.new_directories for table, v in zip(ours[run], vacuums, strict=True))
        rates[run] = THROUGHPUT_TABLES / cleaner_s
        loop_rates[run] = 2 * quarter / reference_s
    ref_rate = len(runs) * 2 * quarter / sum(2 * quarter / rate for rate in loop_rates.values())
    print(
        f"\n[bench] cleanups/s, {THROUGHPUT_TABLES} lock-free tables x 3 deltas per run, cleaner in its own process, "
        f"from publishing (warm producer) to the last CleanupDone; single-threaded loop without Kafka "
        f"{ref_rate:.1f}/s over the whole run; load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} "
        f"after ({os.cpu_count()} cores)"
    )
    to_loop = {run: rate / loop_rates[run] for run, rate in rates.items()}
    to_one = {run: rate / rates.get((run[0], 1), rate) for run, rate in rates.items()}  # that round's 1 thread
    for run in runs:
        round_, threads = run
        label = f"round {round_ + 1} " if THROUGHPUT_ROUNDS > 1 else ""
        print(
            f"[bench]   {label}threads={threads}: {rates[run]:6.1f}/s  "
            f"ratio to the loop around it ({loop_rates[run]:5.1f}/s) {to_loop[run]:5.2f}  "
            f"to threads=1 {to_one[run]:5.2f}  (CPU: {windows[run].summary()})"
        )
        print(f"[bench]     {batches_summary(counters[run], THROUGHPUT_TABLES)}")
    if THROUGHPUT_ROUNDS > 1:
        for threads in curve:
            of_threads = [(round_, threads) for round_ in range(THROUGHPUT_ROUNDS)]
            print(
                f"[bench]   median of {THROUGHPUT_ROUNDS} rounds, threads={threads}: "
                f"{statistics.median(rates[run] for run in of_threads):6.1f}/s  "
                f"ratio to the loop {statistics.median(to_loop[run] for run in of_threads):5.2f}  "
                f"to threads=1 {statistics.median(to_one[run] for run in of_threads):5.2f}"
            )
    print(f"[bench]   the loop's stretches: CPU {loop_window.summary()}")
