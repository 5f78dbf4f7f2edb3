"""A metastore outage delays the update of Hive's queue and nothing else (issue 53, item 2).

This test starts its own Hive 4 metastore (the session's must not be stopped), stops it by pid once the
vacuum committed and the cleanup is done, and restarts it on the same port with the same Derby
directory. The cleanup never waits for the queue: it is done while the entry still says ``working``.
While the metastore is down the bridge's rounds fail and change nothing (no exception escapes, no
event is published); once it is back, the next round brings the entry to ``succeeded``. Only with
ACIDCLEAN_TEST_METASTORE=hive4 (the worker calls are Hive 4's).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cleaner_support import TENANT, running_cleaner
from private_metastore import PrivateMetastore
from producers_support import DB, directories, make_settings, new_table, write
from vacuum_service_support import of_type, running_service, topic_events, wait_for

from acidclean.producers.hive_queue.bridge import HiveQueueBridge
from acidclean.schemas.events import CleanupDone, VacuumCommitted, VacuumRequested
from acidclean.shared.bus.producer import KafkaEventBus
from acidclean.shared.bus.topics import ensure_topics
from acidclean.shared.hive4_queue.queue import HiveCompactionQueue
from acidclean.shared.hive_metastore import HiveMetastore

pytestmark = [pytest.mark.integration, pytest.mark.metastore]


@pytest.fixture
def private_hive4(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PrivateMetastore]:
    if os.environ.get("ACIDCLEAN_TEST_METASTORE") != "hive4":
        pytest.skip("Hive's worker calls are Hive 4's: run with ACIDCLEAN_TEST_METASTORE=hive4")
    metastore = PrivateMetastore(tmp_path / "metastore-state", "hive4")
    metastore.start(monkeypatch)
    try:
        yield metastore
    finally:
        metastore.stop()


def test_a_metastore_outage_delays_the_queue_update_and_the_next_round_after_it_catches_up(
    private_hive4: PrivateMetastore,
    tmp_path: Path,
    kafka_bootstrap: str,
    spark: Any,
    unique_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = HiveMetastore(private_hive4.uri, 3.0)
    try:
        client.create_database(DB)
        new_table(client, unique_name)
        location = Path(client.get_table(DB, unique_name).location.removeprefix("file:"))
        settings = make_settings(
            private_hive4.uri,
            kafka_bootstrap,
            unique_name,
            tmp_path / "state",
            tenant=TENANT,
            allowed_roots={TENANT: [str(location.parent)]},
            metastore_timeout_s=3.0,
        )
        ensure_topics(settings, ("vacuum_requests", "vacuum_committed", "cleanup_done", "dead_letter"))
        write(client, unique_name, rows=20, commits=3)
        queue = HiveCompactionQueue(client)
        asked = queue.request(DB, unique_name, None, "MAJOR", run_as="analyst", pool=unique_name)
        with KafkaEventBus(settings.kafka) as bus:
            bridge = HiveQueueBridge(settings, queue, bus, name=unique_name, pool=unique_name)
            assert bridge.run_once().taken == [asked.compaction_id]

            with running_service(settings, spark):
                [vacuum] = wait_for(
                    lambda: of_type(topic_events(settings, "vacuum_committed"), VacuumCommitted), 180, "the commit"
                )
            with running_cleaner(settings):
                wait_for(
                    lambda: of_type(
                        topic_events(settings, "cleanup_done"), CleanupDone, correlation_id=vacuum.event_id
                    ),
                    120,
                    "CleanupDone",
                )
            # The cleanup is done; the queue has not been told: it did not wait for the queue.
            assert directories(client, unique_name) == vacuum.new_directories
            assert queue.entry(asked.compaction_id, DB, unique_name).state == "working"  # type: ignore[union-attr]

            private_hive4.stop()
            client.close()
            during = [bridge.run_once() for _ in range(2)]
            assert all(r.error and "metastore" in r.error.lower() for r in during), [r.error for r in during]
            assert all((r.taken, r.moved, r.republished) == ([], [], []) for r in during)

            private_hive4.start(monkeypatch)
            after = bridge.run_once()
            assert after.error is None
            assert after.moved == [(asked.compaction_id, "mark_compacted"), (asked.compaction_id, "mark_cleaned")]
        done = queue.entry(asked.compaction_id, DB, unique_name)
        assert done is not None and done.state == "succeeded"
        requests = of_type(topic_events(settings, "vacuum_requests"), VacuumRequested)
        assert [r.hive_compaction_id for r in requests] == [asked.compaction_id]
    finally:
        with contextlib.suppress(Exception):
            client.close()
