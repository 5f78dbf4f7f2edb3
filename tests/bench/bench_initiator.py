"""Benchmark of the initiator against a polling initiator (Hive's), measured in one run on the real stack.

1. Time from the commit that crosses the threshold to its ``VacuumRequested`` (``requested_at`` minus
   the crossing ``DeltaCommitted``'s ``occurred_at``), p50 and p99 over ``LATENCY_TABLES`` tables,
   for ``acidclean initiator`` (a subprocess, sweep off). Reference: a polling initiator that lists
   every table each check interval notices a crossing on average half an interval later and at p99
   0.99 interval later, plus the time one pass over all tables takes (measured here, with the same
   metastore calls and listing per table as ``determineCompactionType``).
2. Metastore and listing calls per minute for ``ACIDCLEAN_BENCH_TABLES`` (1,000) tables of which 10
   are active (committing in turn as fast as the ingest writer goes for a minute): counted by the
   initiator's own metrics, without and with its sweep (default rate, 60 tables a minute); against
   the polling initiator's calls per pass times passes per minute at Hive's default check interval
   (300 s) and at 60 s.

Run: ``pytest tests/bench/bench_initiator.py -m bench -s`` (a few minutes; creating the tables is most of it).
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from producers_support import make_settings

from acidclean.deploy.local.process import free_port
from acidclean.producers.ingest import IngestRequest, create_table, ingest
from acidclean.producers.initiator.rules import Thresholds, decide, figures_of
from acidclean.schemas.events import DeltaCommitted, VacuumRequested
from acidclean.shared.acid.state import acid_state
from acidclean.shared.acid.write_ids import ValidWriteIdList
from acidclean.shared.bus.codec import decode
from acidclean.shared.bus.producer import KafkaEventBus
from acidclean.shared.bus.reader import LogReader
from acidclean.shared.bus.records import raw_record
from acidclean.shared.bus.topics import ensure_topics
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.orc.reader import list_table_dir
from acidclean.shared.settings import Settings
from acidclean.shared.storage import open_location

pytestmark = pytest.mark.bench

TABLES = int(os.environ.get("ACIDCLEAN_BENCH_TABLES", "1000"))
ACTIVE = 10
LATENCY_TABLES = 30
WINDOW_S = 60.0
HIVE_CHECK_INTERVAL_S = 300.0


@pytest.fixture(scope="module")
def bench_db(metastore: HiveMetastore) -> tuple[str, list[str]]:
    db = f"bench_init_{os.getpid()}"
    metastore.create_database(db)
    names = [f"t{i:04d}" for i in range(TABLES)]
    started = time.monotonic()
    for name in names:
        create_table(metastore, db, name, (("id", "int"), ("v", "string")), buckets=1)
    print(f"\ncreated {TABLES} tables in {time.monotonic() - started:.0f} s")
    return db, names


@pytest.fixture
def initiator(settings: Settings, tmp_path: Path) -> Iterator[Callable[..., tuple[subprocess.Popen[bytes], int]]]:
    started: list[subprocess.Popen[bytes]] = []

    def start(*flags: str) -> tuple[subprocess.Popen[bytes], int]:
        port = free_port()
        env = {
            **os.environ,
            "ACIDCLEAN_STATE_DIR": str(tmp_path),
            "ACIDCLEAN_METASTORE_URIS": settings.metastore_uris,
            "ACIDCLEAN_KAFKA_BOOTSTRAP": settings.kafka["bootstrap.servers"],
            "ACIDCLEAN_TOPIC_PREFIX": settings.topic_prefix,
            "ACIDCLEAN_TOPIC_PARTITIONS": str(settings.topic_partitions),
        }
        log = (tmp_path / f"initiator-{len(started)}.log").open("wb")
        process = subprocess.Popen(
            [sys.executable, "-m", "acidclean", "initiator", "--metrics-port", str(port), *flags],
            env=env,
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        started.append(process)
        return process, port

    yield start
    for process in started:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=15)


@pytest.fixture
def settings(metastore_uri: str, kafka_bootstrap: str, unique_name: str, tmp_path: Path) -> Settings:
    settings = make_settings(metastore_uri, kafka_bootstrap, unique_name, tmp_path, topic_partitions=4)
    ensure_topics(settings)
    return settings


def _events(settings: Settings, field: str) -> list[Any]:
    records = LogReader(settings.kafka, [settings.topic(field)])
    return [decode(raw_record(m), rejected_by="bench", tenant="default") for m in records]


def _scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    totals: dict[str, float] = {"metastore": 0.0, "listing": 0.0}
    for line in text.splitlines():
        if line.startswith("acidclean_initiator_metastore_calls_total{"):
            totals["metastore"] += float(line.rsplit(" ", 1)[1])
        elif line.startswith("acidclean_initiator_listings_total "):
            totals["listing"] += float(line.rsplit(" ", 1)[1])
    return totals


def _wait(condition: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if result := condition():
            return result
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _commit(
    metastore: HiveMetastore, bus: KafkaEventBus | None, settings: Settings, db: str, name: str, n: int
) -> None:
    ingest(metastore, IngestRequest(db, name, 5, n, 0.0, None), bus=bus, topic=settings.topic("delta_committed"))


def polling_pass(metastore: HiveMetastore, db: str, names: list[str], thresholds: Thresholds) -> tuple[int, int, float]:
    """One pass of a polling initiator over every table: (metastore calls, listings, seconds)."""
    started = time.monotonic()
    calls, listings = 1, 0
    metastore.get_all_tables(db)
    for name in names:
        info = metastore.get_table(db, name)
        valid = ValidWriteIdList.from_string(metastore.valid_write_ids(db, name))
        calls += 2
        location = open_location(info.location)
        listing = list_table_dir(location.fs.arrow, location.path)
        listings += 1
        decide(figures_of(acid_state(listing, valid), listing, len(valid.aborted_ids)), thresholds)
    return calls, listings, time.monotonic() - started


def test_event_driven_initiator_against_a_polling_one(
    metastore: HiveMetastore, settings: Settings, bench_db: tuple[str, list[str]], initiator: Any
) -> None:
    db, names = bench_db
    latency_tables = names[:LATENCY_TABLES]
    active = names[LATENCY_TABLES : LATENCY_TABLES + ACTIVE]

    # 1. latency ---------------------------------------------------------------------------------------
    _, port = initiator("--sweep-interval", "0")
    with KafkaEventBus(settings.kafka) as bus:
        for name in latency_tables:
            _commit(metastore, bus, settings, db, name, 10)
        time.sleep(5)
        for name in latency_tables:
            _commit(metastore, bus, settings, db, name, 1)  # the 11th delta crosses 10
    requests = _wait(
        lambda: (
            (r := [e for e in _events(settings, "vacuum_requests") if isinstance(e, VacuumRequested)])
            and len(r) >= LATENCY_TABLES
            and r
        ),
        120,
        "one request per latency table",
    )
    crossing: dict[str, Any] = {}
    counts: dict[str, int] = {}
    for event in _events(settings, "delta_committed"):
        if isinstance(event, DeltaCommitted):
            counts[event.table] = counts.get(event.table, 0) + 1
            if counts[event.table] == 11:
                crossing[event.table] = event.occurred_at
    latencies = sorted((r.requested_at - crossing[r.table]).total_seconds() for r in requests)
    assert len({r.table for r in requests}) == len(requests) == LATENCY_TABLES
    p50 = statistics.median(latencies)
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]

    calls, listings, pass_s = polling_pass(metastore, db, names, Thresholds())
    polling_p99 = 0.99 * HIVE_CHECK_INTERVAL_S + pass_s
    print(
        f"\n1. crossing commit -> VacuumRequested over {LATENCY_TABLES} tables: p50 {p50 * 1000:.0f} ms, "
        f"p99 {p99 * 1000:.0f} ms; polling initiator (check interval {HIVE_CHECK_INTERVAL_S:.0f} s, one pass over "
        f"{TABLES} tables {pass_s:.1f} s): p50 {HIVE_CHECK_INTERVAL_S / 2 + pass_s:.0f} s, p99 {polling_p99:.0f} s; "
        f"ratio p99 {polling_p99 / p99:.0f}x"
    )

    # 2. calls per minute, 10 active tables of TABLES -------------------------------------------------------
    def window(*ports: int) -> tuple[dict[str, float], int]:
        def scrape() -> dict[str, float]:
            totals = [_scrape(port) for port in ports]
            return {k: sum(t[k] for t in totals) for k in totals[0]}

        before = scrape()
        commits = 0
        deadline = time.monotonic() + WINDOW_S
        with KafkaEventBus(settings.kafka) as bus:
            while time.monotonic() < deadline:
                _commit(metastore, bus, settings, db, active[commits % ACTIVE], 1)
                commits += 1
        time.sleep(2)
        after = scrape()
        return {k: (after[k] - before[k]) * 60.0 / WINDOW_S for k in after}, commits

    events_only, commits = window(port)
    _, sweep_port = initiator("--sweep-interval", "300")  # a second member: the group splits the keys
    time.sleep(10)  # the group rebalances onto two members
    both, commits_2 = window(port, sweep_port)
    print(
        f"2. calls per minute, {ACTIVE} active tables of {TABLES} ({commits / WINDOW_S:.1f} commits/s):\n"
        f"   event-driven, sweep off: {events_only['metastore']:.0f} metastore, {events_only['listing']:.0f} listings\n"
        f"   two event-driven members, one sweeping (60 tables/min, {commits_2 / WINDOW_S:.1f} commits/s): "
        f"{both['metastore']:.0f} metastore, {both['listing']:.0f} listings\n"
        f"   polling every {HIVE_CHECK_INTERVAL_S:.0f} s: {calls * 60 / max(HIVE_CHECK_INTERVAL_S, pass_s):.0f} "
        f"metastore, {listings * 60 / max(HIVE_CHECK_INTERVAL_S, pass_s):.0f} listings; every 60 s: "
        f"{calls * 60 / max(60.0, pass_s):.0f} metastore, {listings * 60 / max(60.0, pass_s):.0f} listings "
        f"({calls} calls and {listings} listings a pass)"
    )
    assert p99 < polling_p99
    assert events_only["listing"] < listings * 60 / max(HIVE_CHECK_INTERVAL_S, pass_s)
