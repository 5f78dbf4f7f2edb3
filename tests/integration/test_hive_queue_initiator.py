"""acidclean's own initiator's requests appear in Hive's queue (issue 53, item 4), on the real stack with
a Hive 4 metastore (ACIDCLEAN_TEST_METASTORE=hive4): with ``hive_queue_initiator_requests`` the
``acidclean initiator`` process enters its request with ``compact2`` (``SHOW COMPACTIONS`` lists it,
naming the initiator), and ``acidclean hive-queue`` publishes it once it took the entry, with the
initiator's reason and figures and the id derived from the compaction id: one request per entry.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from producers_support import DB, make_settings, process_env
from vacuum_service_support import of_type, topic_events, wait_for

from acidclean.producers.hive_queue.bridge import HiveQueueBridge
from acidclean.producers.hive_queue.progress import request_id_of
from acidclean.producers.ingest import IngestRequest, create_table, ingest
from acidclean.schemas.events import VacuumRequested
from acidclean.shared.bus.producer import KafkaEventBus
from acidclean.shared.bus.topics import ensure_topics
from acidclean.shared.hive4_queue.queue import HiveCompactionQueue
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.metastore]


@pytest.fixture
def settings(
    metastore: HiveMetastore, metastore_uri: str, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> Settings:
    if metastore.major_version < 4:
        pytest.skip("Hive's worker calls are Hive 4's: run with ACIDCLEAN_TEST_METASTORE=hive4")
    settings = make_settings(metastore_uri, kafka_bootstrap, unique_name, tmp_path, hive_queue_pool=unique_name)
    ensure_topics(settings)
    return settings


@pytest.fixture
def initiator(settings: Settings, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``acidclean initiator`` entering its requests in Hive's queue; stopped by its pid at the end."""
    env = process_env(
        settings,
        tmp_path,
        ACIDCLEAN_HIVE_QUEUE_INITIATOR_REQUESTS="true",
        ACIDCLEAN_HIVE_QUEUE_POOL=settings.hive_queue_pool or "",
    )
    with (tmp_path / "initiator.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "acidclean", "initiator", "--delta-num-threshold", "10", "--sweep-interval", "0"],
            env=env,
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            yield process
        finally:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.kill(process.pid, signal.SIGKILL)
                    process.wait(timeout=15)


def commit(metastore: HiveMetastore, settings: Settings, name: str, commits: int) -> None:
    with KafkaEventBus(settings.kafka) as bus:
        ingest(
            metastore, IngestRequest(DB, name, 5, commits, 0.0, None), bus=bus, topic=settings.topic("delta_committed")
        )


def test_the_initiators_request_is_listed_by_show_compact_and_published_once_by_the_bridge(
    metastore: HiveMetastore, settings: Settings, initiator: subprocess.Popen[bytes], unique_name: str
) -> None:
    create_table(metastore, DB, unique_name, (("id", "int"), ("v", "string")), buckets=1)
    queue = HiveCompactionQueue(metastore)
    commit(metastore, settings, unique_name, 12)
    [entry] = wait_for(lambda: queue.entries(DB, unique_name), 90, "the initiator's entry in Hive's queue")
    assert (entry.state, entry.compaction_type, entry.pool) == ("initiated", "MAJOR", unique_name)
    assert (entry.initiator_id or "").startswith("initiator-")
    assert of_type(topic_events(settings, "vacuum_requests"), VacuumRequested) == []  # the bridge publishes it

    commit(metastore, settings, unique_name, 3)  # over the threshold again: Hive's queue has it already
    time.sleep(5)
    assert [e.compaction_id for e in queue.entries(DB, unique_name)] == [entry.compaction_id]

    with KafkaEventBus(settings.kafka) as bus:
        bridge = HiveQueueBridge(settings, queue, bus, name=unique_name, pool=unique_name)
        assert bridge.run_once().taken == [entry.compaction_id]
        assert bridge.run_once().republished == []
    [request] = of_type(topic_events(settings, "vacuum_requests"), VacuumRequested)
    assert request.event_id == request_id_of(settings.tenant, entry.compaction_id)
    assert request.hive_compaction_id == entry.compaction_id
    assert request.requested_by.trigger == "event" and request.requested_by.initiator_id == entry.initiator_id
    assert request.reason.endswith("deltas > hive.compactor.delta.num.threshold 10 (no base)")
    assert request.figures.delta_count >= 11
