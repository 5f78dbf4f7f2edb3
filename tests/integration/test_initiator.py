"""``acidclean initiator`` on the real stack: Kafka, the metastore and the warehouse's storage.

The initiator runs as a subprocess (``python -m acidclean initiator``), the way it is deployed; each
test stops the processes it started, by pid. Commits go through the ingest writer, which publishes
``DeltaCommitted`` like ``acidclean ingest``; the vacuum and cleanup events that end a request are
published by the test, since only the initiator is under test here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from producers_support import make_settings

from acidclean.deploy.local.process import free_port
from acidclean.producers.ingest import IngestRequest, create_table, ingest
from acidclean.producers.initiator.process import initiator_group_id, key_partition
from acidclean.schemas.common import utc_now
from acidclean.schemas.events import (
    CleanupDone,
    DeltaCommitted,
    VacuumCommitted,
    VacuumFailed,
    VacuumRequested,
)
from acidclean.shared.bus.codec import decode
from acidclean.shared.bus.producer import KafkaEventBus
from acidclean.shared.bus.reader import LogReader
from acidclean.shared.bus.records import raw_record
from acidclean.shared.bus.topics import ensure_topics
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.settings import Settings

pytestmark = pytest.mark.integration

DB = "initiator_it"
PARTITIONS = 4  # several, so that two initiators of one group split the keys


@pytest.fixture(scope="module", autouse=True)
def database(metastore: HiveMetastore) -> None:
    metastore.create_database(DB)


@pytest.fixture
def settings(metastore_uri: str, kafka_bootstrap: str, unique_name: str, tmp_path: Path) -> Settings:
    settings = make_settings(metastore_uri, kafka_bootstrap, unique_name, tmp_path, topic_partitions=PARTITIONS)
    ensure_topics(settings)
    return settings


Start = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def start_initiator(settings: Settings, tmp_path: Path) -> Iterator[Start]:
    """Starts ``acidclean initiator`` subprocesses; every one still running is stopped at the end, by pid."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*flags: str, name: str = "initiator") -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "ACIDCLEAN_STATE_DIR": str(tmp_path),  # no local stack is picked up
            "ACIDCLEAN_METASTORE_URIS": settings.metastore_uris,
            "ACIDCLEAN_KAFKA_BOOTSTRAP": settings.kafka["bootstrap.servers"],
            "ACIDCLEAN_KAFKA_SESSION_TIMEOUT_MS": "6000",  # a killed member leaves the group within seconds
            "ACIDCLEAN_TOPIC_PREFIX": settings.topic_prefix,
            "ACIDCLEAN_TOPIC_PARTITIONS": str(settings.topic_partitions),
        }
        log = (tmp_path / f"{name}-{len(started)}.log").open("wb")
        process = subprocess.Popen(
            [sys.executable, "-m", "acidclean", "initiator", "--delta-num-threshold", "10", *flags],
            env=env,
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=15)


def new_table(metastore: HiveMetastore, name: str) -> str:
    create_table(metastore, DB, name, (("id", "int"), ("v", "string")), buckets=1)
    return f"{DB}.{name}"


def commit(metastore: HiveMetastore, settings: Settings, name: str, commits: int, *, publish: bool = True) -> None:
    with KafkaEventBus(settings.kafka) as bus:
        ingest(
            metastore,
            IngestRequest(DB, name, 5, commits, 0.0, None),
            bus=bus if publish else None,
            topic=settings.topic("delta_committed"),
        )


def requests(settings: Settings) -> list[VacuumRequested]:
    records = LogReader(settings.kafka, [settings.topic("vacuum_requests")])
    events = [decode(raw_record(m), rejected_by="tests", tenant="default") for m in records]
    return [e for e in events if isinstance(e, VacuumRequested)]


def wait_for(condition: Callable[[], Any], timeout_s: float = 60.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


def group_read_everything(settings: Settings) -> bool:
    """Whether the initiator group committed the delta topic's end: every delta was decided."""
    topic = settings.topic("delta_committed")
    consumer = Consumer(
        {"bootstrap.servers": settings.kafka["bootstrap.servers"], "group.id": initiator_group_id(settings)}
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        committed = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
        for tp in committed:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=10)
            if (tp.offset if tp.offset >= 0 else low) < high:
                return False
        return True
    finally:
        consumer.close()


def publish(settings: Settings, event: Any, field: str) -> None:
    with KafkaEventBus(settings.kafka) as bus:
        bus.publish(settings.topic(field), event)


def vacuum_of(request: VacuumRequested) -> VacuumCommitted:
    return VacuumCommitted(
        tenant=request.tenant,
        table=request.table,
        partition=request.partition,
        occurred_at=utc_now(),
        location=request.location,
        compaction_type=request.compaction_type,
        new_directories=["base_0000099"],
        highest_write_id=99,
        lock_snapshot=[],
        locks_observed=0,
        vacuum_job_id="test",
        request_id=request.event_id,
    )


def test_commits_that_cross_the_threshold_yield_one_request_and_no_other_until_it_is_cleaned(
    metastore: HiveMetastore, settings: Settings, start_initiator: Start, unique_name: str
) -> None:
    table = new_table(metastore, unique_name)
    start_initiator("--sweep-interval", "0")
    commit(metastore, settings, unique_name, 10)
    wait_for(lambda: group_read_everything(settings), what="the initiator to read 10 commits")
    assert requests(settings) == []  # 10 deltas: Hive asks for more than 10

    commit(metastore, settings, unique_name, 2)
    (request,) = wait_for(lambda: requests(settings), what="a VacuumRequested")
    assert request.table == table and request.partition is None
    assert request.compaction_type == "MAJOR"  # no base yet: Hive's "no base" rule
    assert request.figures.delta_count >= 11 and request.thresholds.delta_num == 10
    assert request.reason.endswith("deltas > hive.compactor.delta.num.threshold 10 (no base)")
    assert request.requested_by.trigger == "event"
    assert request.figures.delta_bytes > 0

    commit(metastore, settings, unique_name, 30)
    wait_for(lambda: group_read_everything(settings), what="the initiator to read 30 more commits")
    vacuum = vacuum_of(request)
    publish(settings, vacuum, "vacuum_committed")
    time.sleep(3)
    assert requests(settings) == [request]  # committed, not yet cleaned: still in flight

    publish(
        settings,
        CleanupDone(
            tenant=vacuum.tenant,
            table=vacuum.table,
            occurred_at=utc_now(),
            correlation_id=vacuum.event_id,
            directories_removed=[],
            time_waited_ms=0,
            attempts=1,
            cleaner_id="test",
        ),
        "cleanup_done",
    )
    second = wait_for(lambda: requests(settings)[1:], what="the next request once the first was cleaned")
    assert len(second) == 1 and second[0].figures.delta_count == 42  # listed again: every delta is still there


def test_a_failed_request_ends_and_the_next_one_follows(
    metastore: HiveMetastore, settings: Settings, start_initiator: Start, unique_name: str
) -> None:
    new_table(metastore, unique_name)
    start_initiator("--sweep-interval", "0")
    commit(metastore, settings, unique_name, 11)
    (request,) = wait_for(lambda: requests(settings), what="a VacuumRequested")
    publish(
        settings,
        VacuumFailed(
            tenant=request.tenant,
            table=request.table,
            occurred_at=utc_now(),
            correlation_id=request.event_id,
            reason_code="error",
            message="test: the vacuum failed",
            failed_at=utc_now(),
        ),
        "vacuum_requests",
    )
    wait_for(lambda: len(requests(settings)) == 2, what="a new request after the failure")


def test_the_sweep_requests_a_table_whose_writer_publishes_nothing(
    metastore: HiveMetastore, settings: Settings, start_initiator: Start, unique_name: str
) -> None:
    table = new_table(metastore, unique_name)
    quiet = new_table(metastore, unique_name + "q")
    commit(metastore, settings, unique_name, 11, publish=False)
    commit(metastore, settings, unique_name + "q", 3, publish=False)
    start_initiator("--sweep-interval", "2s", "--sweep-tables-per-minute", "60000")
    (request,) = wait_for(
        lambda: [r for r in requests(settings) if r.table == table], timeout_s=90, what="the sweep's request"
    )
    assert request.requested_by.trigger == "sweep" and request.figures.delta_count == 11
    time.sleep(5)  # two more sweeps: the table is in flight, the quiet one is below the threshold
    assert [r.table for r in requests(settings) if r.table in (table, quiet)] == [table]


def test_sigkill_at_any_point_loses_no_request_and_never_duplicates_one(
    metastore: HiveMetastore, settings: Settings, start_initiator: Start, unique_name: str
) -> None:
    names = [f"{unique_name}k{i}" for i in range(3)]
    for name in names:
        new_table(metastore, name)
    for round_ in range(4):
        process = start_initiator("--sweep-interval", "0")
        for name in names:
            commit(metastore, settings, name, 4)  # 12 after three rounds: each table crosses once
        time.sleep([0.5, 2.0, 4.0, 1.0][round_])
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=15)
    start_initiator("--sweep-interval", "0")
    wanted = {f"{DB}.{name}" for name in names}
    wait_for(lambda: {r.table for r in requests(settings)} >= wanted, timeout_s=90, what="one request per table")
    wait_for(lambda: group_read_everything(settings), what="the last initiator to decide every delta")
    time.sleep(2)
    tables = [r.table for r in requests(settings)]
    assert sorted(tables) == sorted(wanted), f"{len(tables)} requests for {len(wanted)} tables"


def test_killed_right_after_its_request_the_restarted_initiator_does_not_request_again(
    metastore: HiveMetastore, settings: Settings, start_initiator: Start, unique_name: str
) -> None:
    new_table(metastore, unique_name)
    process = start_initiator("--sweep-interval", "0")
    commit(metastore, settings, unique_name, 11)
    (request,) = wait_for(lambda: requests(settings), what="a VacuumRequested")
    os.kill(process.pid, signal.SIGKILL)  # its deltas' offsets may not be committed: they are read again
    process.wait(timeout=15)
    start_initiator("--sweep-interval", "0")
    commit(metastore, settings, unique_name, 2)
    wait_for(lambda: group_read_everything(settings), what="the restarted initiator to decide every delta")
    time.sleep(2)
    assert requests(settings) == [request]


def test_two_initiators_of_one_group_request_each_key_once(
    metastore: HiveMetastore, settings: Settings, start_initiator: Start, unique_name: str
) -> None:
    names = [f"{unique_name}p{i}" for i in range(6)]
    for name in names:
        new_table(metastore, name)
    first = start_initiator("--sweep-interval", "0", "--initiator-id", "a")
    start_initiator("--sweep-interval", "0", "--initiator-id", "b")
    for name in names[:3]:
        commit(metastore, settings, name, 11)
    os.kill(first.pid, signal.SIGKILL)  # a rebalance in the middle: b takes over a's partitions
    first.wait(timeout=15)
    for name in names[3:]:
        commit(metastore, settings, name, 11)
    for name in names:
        commit(metastore, settings, name, 3)  # in flight by now, or about to be: no second request
    wanted = {f"{DB}.{name}" for name in names}
    wait_for(lambda: {r.table for r in requests(settings)} >= wanted, timeout_s=90, what="one request per table")
    wait_for(lambda: group_read_everything(settings), timeout_s=60, what="b to decide every delta")
    time.sleep(2)
    tables = [r.table for r in requests(settings)]
    assert sorted(tables) == sorted(wanted)
    # The sweep finds a key's owner by the producer's partitioner: it must agree with where records went.
    for message in LogReader(settings.kafka, [settings.topic("delta_committed")]):
        key = message.key().decode()
        assert message.partition() == key_partition(key, PARTITIONS), key


def test_a_table_streaming_100_commits_a_second_gets_one_request_and_starves_no_other(
    metastore: HiveMetastore, settings: Settings, start_initiator: Start, unique_name: str
) -> None:
    busy, other = unique_name + "busy", unique_name + "other"
    new_table(metastore, busy)
    new_table(metastore, other)
    commit(metastore, settings, busy, 11)
    location = metastore.get_table(DB, busy).location
    port = free_port()
    start_initiator("--sweep-interval", "0", "--metrics-port", str(port))
    wait_for(lambda: requests(settings), what="the busy table's request")  # the initiator is up
    flood_done = threading.Event()

    def flood() -> None:
        with KafkaEventBus(settings.kafka) as bus:
            for second in range(20):
                started = time.monotonic()
                bus.publish_many(
                    [
                        (
                            settings.topic("delta_committed"),
                            DeltaCommitted(
                                tenant="default",
                                table=f"{DB}.{busy}",
                                occurred_at=utc_now(),
                                location=location,
                                delta_directory=f"delta_{w:07d}_{w:07d}_0000",
                                write_id=w,
                                bytes=100,
                            ),
                        )
                        for w in range(1000 + 100 * second, 1100 + 100 * second)
                    ]
                )
                time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
        flood_done.set()

    flooder = threading.Thread(target=flood)
    flooder.start()
    try:
        time.sleep(1)
        commit(metastore, settings, other, 11)
        wait_for(
            lambda: [r for r in requests(settings) if r.table == f"{DB}.{other}"], timeout_s=30, what="the other table"
        )
        assert not flood_done.is_set(), "the quiet table was requested only after the flood ended"
    finally:
        flooder.join(timeout=60)
    wait_for(lambda: group_read_everything(settings), what="the initiator to read the flood")
    assert sorted(r.table for r in requests(settings)) == sorted([f"{DB}.{busy}", f"{DB}.{other}"])

    def lag() -> float | None:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        values = [float(line.split()[1]) for line in text.splitlines() if line.startswith("acidclean_initiator_lag ")]
        return values[0] if values else None

    wait_for(lambda: lag() == 0.0, timeout_s=30, what="the lag metric to read 0")
