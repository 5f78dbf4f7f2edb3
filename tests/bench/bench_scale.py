"""Scale benchmark of the cleaner: many tables, many vacuums parked on the delay topic behind held locks.

``ACIDCLEAN_SCALE_TABLES`` tables (default 10,000) each get ``ACIDCLEAN_SCALE_EVENTS / tables`` vacuums
(default 100,000 in all: issue 14's target, so ``make bench`` measures it; each of the four runs, one
and two processes for burst and spread arrivals, takes 3-5 minutes on a quiet two-core box, up to
``ACIDCLEAN_SCALE_SETTLE_S`` (600) more on a busy one). Every table is
held by a real SHARED_READ lock in the real metastore: ``WAVES`` lock requests, each covering every
``WAVES``-th table. The vacuums are parked in two steps (a tenth, then the rest), and for each step
the benchmark reports, over a window of ``ACIDCLEAN_SCALE_WINDOW_INTERVALS`` intervals (default 5; longer
holds the steady state long enough to profile it):

* re-check lateness: an envelope's re-check time (its successor's ``ce_time``) minus its due time
  (``x-due-at``), read from the record headers only; never negative ("never early"). The vacuums of
  one table wait in one ``DelayedVacuums`` record (see ``acidclean.consumers.waiting``): the report
  gives the delay records re-checked per interval and the vacuums they carry;
* the resident memory (VmRSS) of each cleaner process;
* the metastore ``show_locks`` calls per interval.

Then the locks are released one wave per interval and it reports the time from the first release
to the last ``CleanupDone`` (the tables do not exist in the metastore and their locations are gone,
so each cleanup reports the table dropped: the drain measures the loop, the checks and the
publishing, not deletes). Everything runs for one process and for two processes in one group.

Run: ``pytest tests/bench/bench_scale.py -m bench -s``.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

import pytest
from cleaner_support import TENANT, CleanerSubprocess, cleaner_settings, start_cleaner_process
from confluent_kafka import Consumer, TopicPartition
from cpu_use import CpuWindow, listening_pid
from metrics_scrape import scrape, scrape_by_label

from acidclean.deploy.local.process import free_port
from acidclean.schemas.common import LockSnapshotEntry
from acidclean.schemas.events import VacuumCommitted
from acidclean.shared.bus.bundle import BUNDLE_TYPE, unpack
from acidclean.shared.bus.producer import KafkaEventBus
from acidclean.shared.bus.records import RawRecord, raw_record
from acidclean.shared.bus.topics import ensure_topics
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.lock_entries import snapshot_entry
from acidclean.shared.metastore import LockRequestComponent
from acidclean.shared.settings import Settings

pytestmark = pytest.mark.bench

TABLES = int(os.environ.get("ACIDCLEAN_SCALE_TABLES", "10000"))
EVENTS = int(os.environ.get("ACIDCLEAN_SCALE_EVENTS", "100000"))
INTERVAL_MS = int(os.environ.get("ACIDCLEAN_SCALE_INTERVAL_MS", "2000"))
THREADS = int(os.environ.get("ACIDCLEAN_SCALE_THREADS", "4"))
WAVES = 5
# "burst": each step's vacuums published at once; "spread": over intervals, SPREAD_PER_INTERVAL an
# interval in SLICES_PER_INTERVAL publishes (see park).
ARRIVALS = os.environ.get("ACIDCLEAN_SCALE_ARRIVALS", "burst,spread").split(",")
SPREAD_PER_INTERVAL = 5000
SLICES_PER_INTERVAL = 20
GROUP_TYPE = b"acidclean.cleanup.delayed-vacuums"
VACUUM_FIELD = b'{"vacuum":'
WINDOW_INTERVALS = int(os.environ.get("ACIDCLEAN_SCALE_WINDOW_INTERVALS", "5"))  # the measured window, in intervals
SETTLE_LIMIT_S = float(os.environ.get("ACIDCLEAN_SCALE_SETTLE_S", "600"))
# With two processes: start the second only after step 2 (a process joining a group that holds 100,000
# parked, as in a rolling restart), and report the re-checks from its start until the steady state again.
LATE_JOIN = os.environ.get("ACIDCLEAN_SCALE_LATE_JOIN", "") == "1"
# A path prefix: each step's window of (re-checked at, lateness) pairs is written to <prefix>-<step>.tsv.
LATENESS_DUMP = os.environ.get("ACIDCLEAN_SCALE_DUMP", "")
# The bundle machinery (issue 50): the cleaner's cleanup_bundle_min and cleanup_bundle_spread_ms. Bundles
# off is ACIDCLEAN_SCALE_BUNDLE_MIN=1000000000 ACIDCLEAN_SCALE_BUNDLE_SPREAD_MS=0: no batch ever has that
# many records of one partition, so every waiting table goes on alone in its own DelayedVacuums record
# (raw bytes carried on, headers changed), and a due record waits for no other. Vacuums per table is
# ACIDCLEAN_SCALE_EVENTS / ACIDCLEAN_SCALE_TABLES (equal: one per table).
BUNDLE_MIN = int(os.environ.get("ACIDCLEAN_SCALE_BUNDLE_MIN", "8"))
BUNDLE_SPREAD_MS = int(os.environ.get("ACIDCLEAN_SCALE_BUNDLE_SPREAD_MS", "10"))
DB = "scale_db"


def passed_kafka_settings() -> dict[str, str]:
    """Kafka client settings given to the bench as ``ACIDCLEAN_KAFKA_*`` (say, compression), passed on."""
    return {
        name: value
        for name, value in os.environ.items()
        if (name.startswith("ACIDCLEAN_KAFKA_") and not name.startswith("ACIDCLEAN_KAFKA_BOOTSTRAP"))
        or name in ("ACIDCLEAN_CLEANUP_BUNDLE_COMPRESSION", "ACIDCLEAN_CLEANUP_BUNDLE_PARTS_OFF")
    }


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def utc_clock(moment: float) -> str:
    """A time of day as the cleaners' log lines give it (their ``ts``), to find a window in them."""
    return datetime.fromtimestamp(moment, timezone.utc).strftime("%H:%M:%S.%f")[:-3]


def sample_held_bytes(cleaners: Sequence[tuple[CleanerSubprocess, int]], until: float) -> list[float]:
    """The cleaners' delay records held until due (bytes, summed over the processes), once an interval
    until ``until`` (each scrape takes a little of the cleaner's interpreter)."""
    samples: list[float] = []
    while time.time() < until:
        samples.append(sum(scrape(port, "acidclean_cleaner_held_bytes") for _, port in cleaners))
        time.sleep(max(0.0, min(INTERVAL_MS / 1000, until - time.time())))
    return samples


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def counts_by_label(cleaners: Sequence[tuple[object, int]], name: str) -> Counter[str]:
    """A labelled counter summed over the cleaners."""
    total: Counter[str] = Counter()
    for _, port in cleaners:
        total.update(scrape_by_label(port, name))
    return total


def window_counters(cleaners: Sequence[tuple[object, int]]) -> Counter[str]:
    """The cleaners' counters a window reports, summed: metastore show_locks calls, some outcomes,
    bundle checks by member by reason (``by_member:<reason>``) and lock lists by how asked
    (``lock_lists:<how>``)."""
    counters: Counter[str] = Counter()
    for name in ("carried_unread", "bundle_spilled", "joined_in_bundle", "rejoined"):
        outcome = f'acidclean_cleaner_events_total{{outcome="{name}"}}'
        counters[name] = round(sum(scrape(port, outcome) for _, port in cleaners))
    calls = 'acidclean_cleaner_metastore_calls_total{call="show_locks"}'
    counters["show_locks"] = round(sum(scrape(port, calls) for _, port in cleaners))
    for prefix, name in (
        ("by_member", "acidclean_cleaner_bundles_checked_by_member_total"),
        ("lock_lists", "acidclean_cleaner_lock_lists_total"),
    ):
        for label, count in counts_by_label(cleaners, name).items():
            counters[f"{prefix}:{label}"] = round(count)
    return counters


class HeaderWatcher(threading.Thread):
    """Reads the delay and done topics from the start, headers only: the due time of every envelope,
    the re-check lateness of every envelope that follows one, and the CleanupDone count."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(daemon=True)
        ensure_topics(settings, ("vacuum_committed", "cleanup_delay", "cleanup_done", "dead_letter"))
        self.delay_topic, self.done_topic = settings.topic("cleanup_delay"), settings.topic("cleanup_done")
        self.consumer = Consumer(
            {
                "bootstrap.servers": settings.bootstrap_servers,
                "group.id": f"scale-watch-{uuid.uuid4().hex}",
                "enable.auto.commit": "false",
                "fetch.wait.max.ms": "50",
            }
        )
        metadata = self.consumer.list_topics(timeout=10)
        self.consumer.assign(
            [
                TopicPartition(topic, p, 0)
                for topic in (self.delay_topic, self.done_topic)
                for p in metadata.topics[topic].partitions
            ]
        )
        self.due: dict[bytes, int] = {}
        self.lateness: list[tuple[float, float]] = []  # (re-checked at, lateness s)
        self.carried: list[tuple[float, int]] = []  # (re-checked at, vacuums the record carries)
        self.written: list[tuple[float, bool, int]] = []  # (written at, a bundle?, value bytes) of every delay record
        self.done = 0
        self.last_done_at = 0.0
        self.seen_ms = 0  # the latest record time read (librdkafka fetches every partition together)
        self.stop_flag = threading.Event()

    def caught_up(self, until: float, limit_s: float = 60.0) -> None:
        """Wait until the records written before ``until`` (epoch seconds) are read, a second's margin."""
        deadline = time.time() + limit_s
        while self.seen_ms < (until + 1) * 1000 and time.time() < deadline:
            time.sleep(0.1)

    def run(self) -> None:
        # The measuring must not take the cores of what it measures: decoding every bundle took 0.2 of
        # the box's 2 cores, beside the cleaner. At the lowest priority it reads in the cleaner's idle
        # time and catches up after (see caught_up).
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        while not self.stop_flag.is_set():
            for message in self.consumer.consume(5000, 0.2):
                if message.error():
                    continue
                written_ms = message.timestamp()[1]
                self.seen_ms = max(self.seen_ms, written_ms)
                headers = {item[0]: item[1] for item in message.headers() or [] if isinstance(item[1], bytes)}
                if message.topic() == self.done_topic:
                    if headers.get("ce_type") == b"acidclean.cleanup.done":
                        self.done += 1
                        self.last_done_at = written_ms / 1000  # when written, not read
                    continue
                is_bundle = headers.get("ce_type") == BUNDLE_TYPE.encode()
                self.written.append((written_ms / 1000, is_bundle, len(message.value() or b"")))
                if is_bundle:
                    bundle = unpack(raw_record(message))
                    assert bundle is not None
                    if headers.get("causation_id"):
                        self.carried_whole(headers, bundle.members)
                        continue
                    # Many tables' records in one: each member counts as the record it would be alone.
                    for member in bundle.members:
                        self.delay_record({name: value for name, value in member.headers if value}, member.value)
                    continue
                self.delay_record(headers, message.value())
        self.consumer.close()

    def carried_whole(self, headers: dict[str, bytes], members: Sequence[RawRecord]) -> None:
        """A bundle carried on whole (its members unread, their headers as they were written): each
        member was re-checked when the bundle was, and is next due when the bundle is."""
        due = int.from_bytes(headers["x-due-at"], "big", signed=True)
        at = datetime.fromisoformat(headers["ce_time"].decode()).timestamp()
        for member in members:
            member_id = dict(member.headers).get("ce_id") or b""
            previous = self.due.get(member_id)
            if previous is not None:
                self.lateness.append((at, at - previous / 1000))
                self.carried.append((at, vacuums_in(dict(member.headers).get("ce_type"), member.value)))
            self.due[member_id] = due

    def delay_record(self, headers: dict[str, bytes], value: bytes | None) -> None:
        """One delay record's due time, and the lateness of the re-check that wrote it."""
        due = int.from_bytes(headers["x-due-at"], "big", signed=True)
        carried = vacuums_in(headers.get("ce_type"), value)
        # A replayed record (after a rebalance) publishes its envelope again under the same id, due
        # later; readers drop such duplicates, so the first copy is the one that counts.
        self.due.setdefault(headers["ce_id"], due)
        previous = self.due.pop(headers.get("causation_id", b""), None)
        if previous is not None:
            at = datetime.fromisoformat(headers["ce_time"].decode()).timestamp()
            self.lateness.append((at, at - previous / 1000))
            self.carried.append((at, carried))

    def written_in(self, start: float, end: float) -> tuple[int, int, int]:
        """The delay records written in [start, end), how many of them are bundles, and their value bytes."""
        written = [(bundle, size) for at, bundle, size in list(self.written) if start <= at < end]
        return len(written), sum(bundle for bundle, _ in written), sum(size for _, size in written)

    def window(self, start: float, end: float) -> list[float]:
        return [late for at, late in list(self.lateness) if start <= at < end]

    def vacuums_in(self, start: float, end: float) -> int:
        return sum(count for at, count in list(self.carried) if start <= at < end)


def vacuums_in(ce_type: bytes | None, value: bytes | None) -> int:
    """The vacuums a delay record carries: a DelayedVacuums several (counted without parsing the value),
    a DelayEnvelope one."""
    return 1 if ce_type != GROUP_TYPE else (value or b"").count(VACUUM_FIELD)


def wait_ready(port: int, timeout_s: float = 120.0) -> None:
    """Until the cleaner's /readyz answers 200 (it joined the group and reaches the broker and metastore)."""
    import urllib.error
    import urllib.request

    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5).status == 200:
                return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"the cleaner on metrics port {port} was not ready within {timeout_s:.0f} s")


def take_wave_locks(metastore: HiveMetastore) -> tuple[list[tuple[int, int]], dict[int, LockSnapshotEntry]]:
    """One lock request per wave over every WAVES-th table; returns (txn, lock id) per wave and each
    table's snapshot entry."""
    waves = []
    for wave in range(WAVES):
        txn = metastore.open_txn()
        components = [LockRequestComponent(DB, f"t{i}") for i in range(wave, TABLES, WAVES)]
        # At most 500 tables a request: a Derby-backed metastore takes longer than the client's read
        # time-out to lock thousands at once. The transaction's commit releases them all.
        for start in range(0, len(components), 500):
            result = metastore.lock(components[start : start + 500], txn_id=txn)
            assert result.acquired, result
        waves.append((txn, result.lock_id))
    entries = {}
    for lock in metastore.show_locks(DB):
        if lock.table and lock.table.startswith("t"):
            entries[int(lock.table[1:])] = snapshot_entry(lock)
    assert len(entries) == TABLES, len(entries)
    return waves, entries


def show_locks_costs(metastore: HiveMetastore, rounds: int = 10) -> tuple[float, float]:
    """Seconds per unfiltered show_locks (every lock: one answers every table of a batch) and per
    table-filtered one, with the benchmark's locks held."""
    started = time.perf_counter()
    for _ in range(rounds):
        metastore.show_locks()
    unfiltered = (time.perf_counter() - started) / rounds
    started = time.perf_counter()
    for index in range(rounds):
        metastore.show_locks(DB, f"t{index}")
    return unfiltered, (time.perf_counter() - started) / rounds


def vacuums(root: Path, entries: dict[int, LockSnapshotEntry], start: int, count: int) -> list[VacuumCommitted]:
    now = datetime.now(timezone.utc)
    return [
        VacuumCommitted(
            tenant=TENANT,
            table=f"{DB}.t{index % TABLES}",
            partition=None,
            occurred_at=now,
            location="file:" + str(root / TENANT / "scale" / f"t{index % TABLES}"),
            compaction_type="MINOR",
            new_directories=["delta_0000001_0000003"],
            obsolete_directories=["delta_0000001_0000001_0000"],
            highest_write_id=3,
            lock_snapshot=[entries[index % TABLES]],
            vacuum_job_id=f"scale-{index}",
        )
        for index in range(start, start + count)
    ]


def park(
    bus: KafkaEventBus,
    settings: Settings,
    root: Path,
    entries: dict[int, LockSnapshotEntry],
    start: int,
    count: int,
    arrival: str,
) -> None:
    """Publish vacuums ``start`` to ``start + count``: all at once ("burst"), or spread evenly over
    ``count / SPREAD_PER_INTERVAL`` intervals ("spread", as vacuum jobs commit one after another).

    Burst vacuums stay due together: each re-check parks a vacuum for exactly one interval, so a burst
    published in one second comes due in one burst interval after interval, and its re-check lateness
    is the time one process takes to re-check the whole burst. Spread vacuums come due spread over
    the interval, and their lateness is that of a cleaner keeping up with a steady stream."""
    topic = settings.topic("vacuum_committed")
    if arrival == "burst":
        for chunk in range(start, start + count, 5000):
            batch = vacuums(root, entries, chunk, min(5000, start + count - chunk))
            bus.publish_many([(topic, event) for event in batch])
        return
    intervals = max(1, -(-count // SPREAD_PER_INTERVAL))
    slices = intervals * SLICES_PER_INTERVAL
    size = -(-count // slices)
    began = time.monotonic()
    for number, chunk in enumerate(range(start, start + count, size)):
        time.sleep(max(0.0, began + number * INTERVAL_MS / 1000 / SLICES_PER_INTERVAL - time.monotonic()))
        batch = vacuums(root, entries, chunk, min(size, start + count - chunk))
        bus.publish_many([(topic, event) for event in batch])


def measure(
    label: str,
    watcher: HeaderWatcher,
    cleaners: list[tuple[CleanerSubprocess, int]],
    parked: int,
    services: dict[str, int | None],
) -> tuple[float, list[float], float]:
    """Let the parked vacuums cycle for a few intervals, then report one window (with the cores the
    box, each cleaner and ``services`` used in it); returns its p99 lateness, the cleaners' RSS and
    when the window began."""
    # Until the cleaner has taken in what was just published (every parked vacuum re-checked within
    # one interval): the report is of the steady state with that many parked; the time it took to
    # get there (the first check of every new vacuum, and its joining its table's record) is printed.
    interval_s = INTERVAL_MS / 1000
    settle_started = time.time()
    time.sleep(2 * interval_s)
    while time.time() - settle_started < SETTLE_LIMIT_S:
        now = time.time() - 1  # the watcher reads at a low priority: a second behind
        if watcher.vacuums_in(now - interval_s, now) >= 0.95 * parked:
            break
        time.sleep(interval_s / 2)
    settled_s = time.time() - settle_started
    before = window_counters(cleaners)
    processes = {f"cleaner{number}": cleaner.process.pid for number, (cleaner, _) in enumerate(cleaners)}
    cpu = CpuWindow(processes | services | {"bench": os.getpid()}).start()
    start = time.time()
    held = sample_held_bytes(cleaners, start + WINDOW_INTERVALS * INTERVAL_MS / 1000)
    end = time.time()
    cpu.stop()
    # The counters at the window's end: the watcher may take seconds more to catch up with it.
    counted = window_counters(cleaners)
    counted.subtract(before)
    rss = [rss_mb(cleaner.process.pid) for cleaner, _ in cleaners]
    watcher.caught_up(end)
    kafka_records, bundles, kafka_bytes = (count / WINDOW_INTERVALS for count in watcher.written_in(start, end))
    samples = watcher.window(start, end)
    if LATENESS_DUMP:  # every re-check of the window, to see when the late ones came
        with open(f"{LATENESS_DUMP}-{label.replace(' ', '_')}.tsv", "w") as dump:
            dump.writelines(f"{at:.4f}\t{late:.4f}\n" for at, late in list(watcher.lateness) if start <= at < end)

    def per_interval_of(name: str) -> float:
        return counted[name] / WINDOW_INTERVALS

    reasons = ", ".join(
        f"{name.split(':', 1)[1]} {count / WINDOW_INTERVALS:,.0f}"
        for name, count in counted.most_common()
        if name.startswith("by_member:") and count
    )
    asked = ", ".join(
        f"{name.split(':', 1)[1]} {count / WINDOW_INTERVALS:.1f}"
        for name, count in sorted(counted.items())
        if name.startswith("lock_lists:") and count
    )
    reported = ("show_locks", "carried_unread", "bundle_spilled", "joined_in_bundle", "rejoined")
    made, unread, spills, joined, rejoined = (per_interval_of(name) for name in reported)
    early = [late for late in samples if late < 0]
    per_interval = len(samples) / WINDOW_INTERVALS
    vacuums_per_interval = watcher.vacuums_in(start, end) / WINDOW_INTERVALS
    print(
        f"[bench]   {label}: {parked:,} parked, {per_interval:,.0f} delay records re-checked/interval carrying "
        f"{vacuums_per_interval:,.0f} vacuums (of {parked:,}; {unread:,.0f} carried unread) in "
        f"{kafka_records:,.0f} Kafka records ({bundles:,.0f} bundles; {spills:,.0f} bundle members sent out alone; "
        f"fresh vacuums {joined:,.0f} taken in by bundle checks, {rejoined:,.0f} handed back to their lanes; "
        f"bundles checked member by member/interval: {reasons or 'none'}): "
        "lateness p50 "
        f"{percentile(samples, 0.5) * 1000:.0f} ms p99 {percentile(samples, 0.99) * 1000:.0f} ms max "
        f"{max(samples, default=float('nan')) * 1000:.0f} ms; early {len(early)}; RSS "
        f"{', '.join(f'{value:.0f}' for value in rss)} MB (delay records held until due: mean "
        f"{statistics.fmean(held) / 2**20 if held else float('nan'):.1f} MiB, max "
        f"{max(held, default=float('nan')) / 2**20:.1f} MiB); show_locks/interval {made:.1f} "
        f"({asked or 'none'}); "
        f"steady {settled_s:.0f} s after publishing; CPU {cpu.summary()}; "
        f"window {utc_clock(start)}-{utc_clock(end)} UTC"
    )
    # Per operation, which the box's noise moves less than the rates: the cleaners' CPU per parked vacuum
    # re-checked and per delay record re-checked, and the Kafka records written per parked vacuum.
    cleaner_cpu_s = sum(cpu.seconds(name) for name in processes)
    vacuums_rechecked = watcher.vacuums_in(start, end)
    print(
        f"[bench]   {label} per operation: cleaner CPU {cleaner_cpu_s:.2f} s over {vacuums_rechecked:,} vacuum "
        f"re-checks in {len(samples):,} delay records: {cleaner_cpu_s / max(1, vacuums_rechecked) * 1e6:.0f} us per "
        f"vacuum re-check, {cleaner_cpu_s / max(1, len(samples)) * 1e6:.0f} us per delay record re-check; "
        f"{kafka_records / max(1, parked):.4f} Kafka records and {kafka_bytes / max(1, parked):.0f} bytes per parked "
        f"vacuum per interval; show_locks/interval "
        f"{made:.1f}; p99 {percentile(samples, 0.99) * 1000:.0f} ms; "
        f"RSS {', '.join(f'{value:.0f}' for value in rss)} MB"
    )
    assert early == [], early[:5]
    return percentile(samples, 0.99), rss, start


def report_join(watcher: HeaderWatcher, joined_at: float, steady_at: float) -> None:
    """The re-checks from a process's start until the group was steady again: how late the rebalance
    made them (none may be early)."""
    samples = watcher.window(joined_at, steady_at)
    assert samples, "no re-check between the second process's start and the steady window"
    early = [late for late in samples if late < 0]
    print(
        f"[bench]   join: {len(samples):,} re-checks in the {steady_at - joined_at:.0f} s from the second process's "
        f"start to the steady window: lateness p50 {percentile(samples, 0.5) * 1000:.0f} ms p99 "
        f"{percentile(samples, 0.99) * 1000:.0f} ms max {max(samples, default=0) * 1000:.0f} ms; early {len(early)}"
    )
    assert early == [], early[:5]


@pytest.mark.parametrize("arrival", ARRIVALS)
@pytest.mark.parametrize("processes", [1, 2])
# Two steps (three with a late join) that may each wait the settle limit, a drain of up to max(300 s,
# 1 s per 100 vacuums), and the set-up, parking and windows besides.
@pytest.mark.timeout(int((3 if LATE_JOIN else 2) * SETTLE_LIMIT_S + max(300, EVENTS / 100) + 600))
def test_parked_vacuums_behind_held_locks_then_released_in_waves(
    processes: int,
    arrival: str,
    metastore: HiveMetastore,
    tmp_path: Path,
    kafka_bootstrap: str,
    metastore_uri: str,
    unique_name: str,
) -> None:
    root = tmp_path / "data"
    (root / TENANT).mkdir(parents=True)
    settings = cleaner_settings(
        kafka_bootstrap,
        metastore_uri,
        root,
        unique_name,
        interval_ms=INTERVAL_MS,
        partitions=8,
        threads=THREADS,
        bundle_min=BUNDLE_MIN,
        bundle_spread_ms=BUNDLE_SPREAD_MS,
    )
    started = time.perf_counter()
    waves, entries = take_wave_locks(metastore)
    watcher = HeaderWatcher(settings)
    watcher.start()
    cleaners: list[tuple[CleanerSubprocess, int]] = []
    released = False
    stack = contextlib.ExitStack()

    def start_cleaners(numbers: range) -> None:
        for number in numbers:
            port = free_port()
            cleaner = start_cleaner_process(
                settings,
                tmp_path / f"cleaner{number}.log",
                cleaner_id=f"scale{number}",
                args=("--metrics-port", str(port)),
                extra_env=passed_kafka_settings(),
            )
            cleaners.append((cleaner, port))
        for _, port in cleaners[numbers.start :]:
            wait_ready(port)

    joining_late = LATE_JOIN and processes > 1
    try:
        start_cleaners(range(1 if joining_late else processes))
        first = max(1, EVENTS // 10)
        bus = stack.enter_context(KafkaEventBus(settings.kafka))
        park(bus, settings, root, entries, 0, first, arrival)
        setup_s = time.perf_counter() - started
        print(
            f"\n[bench] scale: {TABLES:,} tables, {EVENTS:,} vacuums, interval {INTERVAL_MS} ms, "
            f"{processes} process(es) x {THREADS} threads, {arrival} arrival, {WAVES} lock waves, "
            f"bundle_min {BUNDLE_MIN}, bundle_spread_ms {BUNDLE_SPREAD_MS}, parts off "
            f"{os.environ.get('ACIDCLEAN_CLEANUP_BUNDLE_PARTS_OFF', '') or '-'}, compression "
            f"{os.environ.get('ACIDCLEAN_CLEANUP_BUNDLE_COMPRESSION', 'zlib')} "
            f"(set-up {setup_s:.0f} s; machine shared, timings noisy)"
        )
        unfiltered, filtered = show_locks_costs(metastore)
        print(
            f"[bench]   show_locks with {TABLES:,} locks held: unfiltered {unfiltered * 1000:.1f} ms, one table "
            f"{filtered * 1000:.1f} ms: one unfiltered call beats per-table calls from "
            f"{max(1, round(unfiltered / filtered)):,} tables a batch up"
        )
        services = {"metastore": listening_pid(metastore_uri), "broker": listening_pid(kafka_bootstrap)}
        measure("step 1", watcher, cleaners, first, services)
        park(bus, settings, root, entries, first, EVENTS - first, arrival)
        measure("step 2", watcher, cleaners, EVENTS, services)
        if joining_late:
            join_started = time.time()
            start_cleaners(range(1, processes))
            _, _, join_window_start = measure("step 3 (joined)", watcher, cleaners, EVENTS, services)
            report_join(watcher, join_started, join_window_start)
        done_before = watcher.done
        release_started = time.time()
        for txn, _ in waves:
            metastore.commit_txn(txn)  # releases the wave's locks (a transaction's locks cannot be unlocked alone)
            last_release = time.time()
            time.sleep(INTERVAL_MS / 1000)
        released = True
        deadline = time.time() + max(300.0, EVENTS / 100)
        while watcher.done - done_before < EVENTS and time.time() < deadline:
            time.sleep(0.5)
        drained = watcher.done - done_before
        drain_s = watcher.last_done_at - release_started
        print(
            f"[bench]   drain: {drained:,} of {EVENTS:,} CleanupDone {drain_s:.1f} s after the first of {WAVES} "
            f"releases ({WAVES} intervals apart), {watcher.last_done_at - last_release:.1f} s after the last: "
            f"{drained / max(drain_s, 1e-9):,.0f}/s"
        )
        assert drained == EVENTS
        # Nothing the cleaners wrote or read is refused: a dead letter here is a cleaner's own failure
        # (a race between its threads once dead-lettered 59-190 delay records a run, unnoticed).
        dead = sum(scrape(port, 'acidclean_cleaner_events_total{outcome="dead_lettered"}') for _, port in cleaners)
        assert dead == 0, f"{dead:.0f} records dead-lettered: see the cleaners' logs"
    finally:
        stack.close()
        for cleaner, _ in cleaners:
            cleaner.stop()
        watcher.stop_flag.set()
        watcher.join(10)
        if not released:
            for txn, _ in waves:
                with contextlib.suppress(Exception):  # already ended: nothing left to release
                    metastore.commit_txn(txn)
