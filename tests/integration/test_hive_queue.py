"""acidclean serves Hive 4's compaction queue (issue 53), on the real stack with a Hive 4 metastore
(ACIDCLEAN_TEST_METASTORE=hive4): a request entered as ``ALTER TABLE ... COMPACT 'major'`` sends it
(``compact2``) becomes one ``VacuumRequested`` carrying its Hive compaction id, acidclean's vacuum
service and cleaner do the work, and ``show_compact`` shows the entry go working -> ready for cleaning
-> succeeded under acidclean's worker id, or failed with the vacuum's message.

Each test enters its requests in a pool of its own (``COMPACT 'major' POOL 'p'``) and its bridge
serves that pool, so the session metastore's other queue entries (other tests') are never taken.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cleaner_support import running_cleaner
from click.testing import CliRunner
from producers_support import DB, directories, new_table, write
from vacuum_service_support import of_type, running_service, settings_environment, topic_events, wait_for

from acidclean.cli import main as cli
from acidclean.producers.hive_queue.bridge import HiveQueueBridge
from acidclean.producers.hive_queue.progress import request_id_of
from acidclean.schemas.events import CleanupDone, VacuumCommitted, VacuumFailed, VacuumRequested
from acidclean.shared.bus.producer import KafkaEventBus
from acidclean.shared.bus.topics import ensure_topics
from acidclean.shared.hive4_queue.queue import HiveCompactionQueue, QueueEntry
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.metastore]


@pytest.fixture(autouse=True)
def hive4(metastore: HiveMetastore) -> None:
    if metastore.major_version < 4:
        pytest.skip("Hive's worker calls are Hive 4's: run with ACIDCLEAN_TEST_METASTORE=hive4")


@pytest.fixture
def queue(metastore: HiveMetastore) -> HiveCompactionQueue:
    return HiveCompactionQueue(metastore)


@pytest.fixture
def bus(table_settings: Settings) -> Iterator[KafkaEventBus]:
    ensure_topics(table_settings, ("vacuum_requests", "vacuum_committed", "cleanup_done", "dead_letter"))
    with KafkaEventBus(table_settings.kafka) as opened:
        yield opened


def bridge(settings: Settings, queue: HiveCompactionQueue, bus: Any, pool: str, name: str = "it") -> HiveQueueBridge:
    return HiveQueueBridge(settings, queue, bus, name=f"{name}-{pool}", pool=pool)


def requests_of(settings: Settings, compaction_id: int) -> list[VacuumRequested]:
    return of_type(topic_events(settings, "vacuum_requests"), VacuumRequested, hive_compaction_id=compaction_id)


def entry(queue: HiveCompactionQueue, compaction_id: int, table: str) -> QueueEntry:
    found = queue.entry(compaction_id, DB, table)
    assert found is not None, f"Hive compaction {compaction_id} is not in show_compact"
    return found


def test_alter_table_compact_is_one_acidclean_vacuum_and_cleanup_that_show_compact_follows_to_succeeded(
    metastore: HiveMetastore,
    queue: HiveCompactionQueue,
    bus: KafkaEventBus,
    table_settings: Settings,
    spark: Any,
    unique_name: str,
) -> None:
    write(metastore, unique_name, rows=20, commits=3)
    singles = directories(metastore, unique_name)
    asked = queue.request(DB, unique_name, None, "MAJOR", run_as="analyst", pool=unique_name)
    assert (asked.accepted, asked.state) == (True, "initiated")
    served = bridge(table_settings, queue, bus, unique_name)

    first = served.run_once()
    assert (first.taken, first.error) == ([asked.compaction_id], None)
    working = entry(queue, asked.compaction_id, unique_name)
    assert (working.state, working.worker_id) == ("working", served.worker_id)
    assert served.worker_id.startswith("acidclean-")
    [request] = requests_of(table_settings, asked.compaction_id)
    assert request.event_id == request_id_of(table_settings.tenant, asked.compaction_id)
    assert (request.table, request.partition, request.compaction_type) == (f"{DB}.{unique_name}", None, "MAJOR")
    assert request.requested_by.trigger == "hive_queue"

    with running_service(table_settings, spark):
        [vacuum] = wait_for(
            lambda: of_type(
                topic_events(table_settings, "vacuum_committed"), VacuumCommitted, request_id=request.event_id
            ),
            180,
            "VacuumCommitted",
        )
    # Nothing moves in Hive's queue until the bridge reads the log: the log leads, the queue follows.
    assert entry(queue, asked.compaction_id, unique_name).state == "working"
    second = served.run_once()
    assert second.moved == [(asked.compaction_id, "mark_compacted")] and second.taken == []
    assert entry(queue, asked.compaction_id, unique_name).state == "ready for cleaning"

    with running_cleaner(table_settings):
        wait_for(
            lambda: of_type(topic_events(table_settings, "cleanup_done"), CleanupDone, correlation_id=vacuum.event_id),
            120,
            "CleanupDone",
        )
    assert directories(metastore, unique_name) == vacuum.new_directories
    assert not set(singles) & set(directories(metastore, unique_name))
    third = served.run_once()
    assert third.moved == [(asked.compaction_id, "mark_cleaned")]
    done = entry(queue, asked.compaction_id, unique_name)
    assert done.state == "succeeded"
    assert served.run_once().moved == []  # history is left alone
    assert len(requests_of(table_settings, asked.compaction_id)) == 1

    # acidclean audit, asked by the Hive compaction id, shows that vacuum and only it.
    audited = CliRunner().invoke(
        cli,
        ["audit", "--hive-compaction", str(asked.compaction_id), "--format", "json"],
        env=settings_environment(table_settings),
    )
    assert audited.exit_code == 0, audited.output
    [row] = json.loads(audited.stdout)
    assert (row["vacuum_id"], row["state"], row["hive_compaction_id"]) == (
        str(vacuum.event_id),
        "cleaned",
        asked.compaction_id,
    )


def test_a_failed_vacuum_shows_as_failed_with_its_message(
    metastore: HiveMetastore,
    queue: HiveCompactionQueue,
    bus: KafkaEventBus,
    table_settings: Settings,
    table_location: Path,
    spark: Any,
    unique_name: str,
) -> None:
    write(metastore, unique_name, rows=20, commits=2)
    # A delta whose bucket file is not ORC: the vacuum cannot read it and fails, the table unchanged.
    broken = table_location / sorted(directories(metastore, unique_name))[0]
    for bucket in broken.glob("bucket_*"):
        bucket.write_bytes(b"not an orc file")
    asked = queue.request(DB, unique_name, None, "MAJOR", run_as="analyst", pool=unique_name)
    served = bridge(table_settings, queue, bus, unique_name)
    assert served.run_once().taken == [asked.compaction_id]
    request_id = request_id_of(table_settings.tenant, asked.compaction_id)
    with running_service(table_settings, spark):
        [failure] = wait_for(
            lambda: of_type(topic_events(table_settings, "vacuum_requests"), VacuumFailed, correlation_id=request_id),
            180,
            "VacuumFailed",
        )
    assert failure.reason_code == "error"
    assert served.run_once().moved == [(asked.compaction_id, "mark_failed")]
    failed = entry(queue, asked.compaction_id, unique_name)
    assert failed.state == "failed"
    assert failed.error_message == f"acidclean error: {failure.message}"
    assert failed.worker_id == served.worker_id


def test_each_entry_is_taken_once_by_two_replicas_and_a_lost_publish_is_made_once_after_a_restart(
    metastore: HiveMetastore,
    queue: HiveCompactionQueue,
    bus: KafkaEventBus,
    table_settings: Settings,
    unique_name: str,
) -> None:
    tables = [unique_name] + [f"{unique_name}_{n}" for n in range(5)]
    for name in tables[1:]:
        new_table(metastore, name)
    asked = [queue.request(DB, name, None, "MAJOR", run_as="analyst", pool=unique_name) for name in tables]
    replicas = [bridge(table_settings, queue, bus, unique_name, name) for name in ("a", "b")]
    reports: list[Any] = []

    def serve(replica: HiveQueueBridge) -> None:
        reports.append(replica.run_once())

    threads = [threading.Thread(target=serve, args=(replica,)) for replica in replicas]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    taken = sorted(c for report in reports for c in report.taken)
    assert taken == sorted(a.compaction_id for a in asked)  # each once, by one replica or the other
    for a, name in zip(asked, tables, strict=True):
        assert len(requests_of(table_settings, a.compaction_id)) == 1
        assert entry(queue, a.compaction_id, name).worker_id in {r.worker_id for r in replicas}

    # A replica takes an entry and dies before its request reaches the broker (the broker is unreachable).
    late = queue.request(DB, unique_name, None, "MINOR", run_as="analyst", pool=unique_name)
    assert not late.accepted  # the table's MAJOR is still queued: compact2 answers with it
    lost_table = f"{unique_name}_lost"
    new_table(metastore, lost_table)
    lost = queue.request(DB, lost_table, None, "MAJOR", run_as="analyst", pool=unique_name)
    nowhere = {"bootstrap.servers": "127.0.0.1:1", "message.timeout.ms": "3000"}
    with KafkaEventBus(nowhere, delivery_timeout_s=3, total_timeout_s=5) as dead_bus:
        crashed = HiveQueueBridge(table_settings, queue, dead_bus, name=f"a-{unique_name}", pool=unique_name).run_once()
    assert crashed.taken == [lost.compaction_id] and crashed.error
    assert requests_of(table_settings, lost.compaction_id) == []
    # Restarted under the same name: it finds its working entry without a request and makes it, once.
    restarted = bridge(table_settings, queue, bus, unique_name, "a")
    assert restarted.run_once().republished == [lost.compaction_id]
    assert restarted.run_once().republished == []
    assert replicas[1].run_once().republished == []  # another replica leaves a live one's entries alone
    [made] = requests_of(table_settings, lost.compaction_id)
    assert made.event_id == request_id_of(table_settings.tenant, lost.compaction_id)
