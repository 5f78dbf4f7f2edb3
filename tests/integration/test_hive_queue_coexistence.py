"""Beside Hive's own compactor (issue 53, item 4): with Hive's Initiator, Worker and Cleaner running in a
Hive 4 metastore, acidclean never takes a queue entry Hive's Worker took, and Hive's Worker never takes
one acidclean holds. Both take entries with the metastore's own compare-and-set (``initiated`` ->
``working`` under one worker id), so every entry has exactly one taker.

This test starts its own Hive 4 metastore with the compactor threads on (the session's has them off) and
the one jar Hive's Worker needs beside the standalone server (``deploy/local/hive4-compactor/pom.xml``).
Hive's Worker there serves only the default pool, as does the bridge here: they race for the same
entries. The tables hold no data, so Hive's Worker refuses what it takes ("None of the compaction
thresholds met") and nothing is compacted by either; what is checked is who holds what. Only with
ACIDCLEAN_TEST_METASTORE=hive4.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cleaner_support import TENANT
from producers_support import DB, make_settings, new_table
from vacuum_service_support import of_type, topic_events, wait_for

from acidclean.deploy.local.metastore import HIVE4_COMPACTOR_SETTINGS, hive4_compactor_jars, start_metastore
from acidclean.deploy.local.process import stop_process
from acidclean.producers.hive_queue.bridge import HiveQueueBridge
from acidclean.schemas.events import VacuumRequested
from acidclean.shared.bus.producer import KafkaEventBus
from acidclean.shared.bus.topics import ensure_topics
from acidclean.shared.hive4_queue.queue import HiveCompactionQueue, QueueEntry
from acidclean.shared.hive_metastore import HiveMetastore

pytestmark = [pytest.mark.integration, pytest.mark.metastore]

ENTRIES = 8
# Longer than several polls of Hive's Worker (it found the first entry within a second here).
WATCH_S = 20.0


@pytest.fixture
def hive_compactor_metastore(tmp_path: Path) -> Iterator[str]:
    if os.environ.get("ACIDCLEAN_TEST_METASTORE") != "hive4":
        pytest.skip("Hive's worker calls are Hive 4's: run with ACIDCLEAN_TEST_METASTORE=hive4")
    state = tmp_path / "metastore-state"
    jars = hive4_compactor_jars(state / "logs")
    process, uri = start_metastore(state, "hive4", extra_settings=HIVE4_COMPACTOR_SETTINGS, extra_classpath=(jars,))
    try:
        yield uri
    finally:
        stop_process(process.pid, "Hive Metastore with Hive's compactor")


def by_hive(entry: QueueEntry) -> bool:
    return entry.worker_id is not None and not entry.worker_id.startswith("acidclean")


def test_hives_worker_and_acidclean_never_hold_the_same_entry(
    hive_compactor_metastore: str, tmp_path: Path, kafka_bootstrap: str, unique_name: str
) -> None:
    with HiveMetastore(hive_compactor_metastore) as metastore:
        queue = HiveCompactionQueue(metastore)
        metastore.create_database(DB)
        tables = [f"{unique_name}_{n}" for n in range(ENTRIES)]
        for name in tables:
            new_table(metastore, name)
        location = Path(metastore.get_table(DB, tables[0]).location.removeprefix("file:"))
        settings = make_settings(
            hive_compactor_metastore,
            kafka_bootstrap,
            unique_name,
            tmp_path / "state",
            tenant=TENANT,
            allowed_roots={TENANT: [str(location.parent)]},
        )
        ensure_topics(settings, ("vacuum_requests", "vacuum_committed", "cleanup_done", "dead_letter"))

        # Half the entries first, until Hive's Worker took one; then the rest, raced by both.
        first = [queue.request(DB, name, None, "MAJOR", run_as="analyst") for name in tables[: ENTRIES // 2]]
        wait_for(lambda: any(by_hive(e) for e in queue.entries(DB)), 60, "Hive's Worker to take an entry")
        rest = [queue.request(DB, name, None, "MAJOR", run_as="analyst") for name in tables[ENTRIES // 2 :]]
        ids = {a.compaction_id for a in first + rest}
        with KafkaEventBus(settings.kafka) as bus:
            bridge = HiveQueueBridge(settings, queue, bus, name=unique_name)
            taken: list[int] = []
            deadline = time.monotonic() + WATCH_S
            while time.monotonic() < deadline:
                report = bridge.run_once()
                assert report.error is None, report.error
                taken += report.taken
                time.sleep(0.2)
            entries = {e.compaction_id: e for e in queue.entries(DB) if e.compaction_id in ids}

        ours = {i for i, e in entries.items() if e.worker_id == bridge.worker_id}
        hives = {i for i, e in entries.items() if by_hive(e)}
        assert ours and hives, {i: (e.state, e.worker_id) for i, e in entries.items()}  # both took some
        assert ours | hives == ids and not ours & hives
        assert sorted(taken) == sorted(ours)  # acidclean took only what it holds, each once
        # After WATCH_S of Hive's Worker polling, acidclean's entries are still acidclean's, working.
        assert all(entries[i].state == "working" for i in ours)
        requests = of_type(topic_events(settings, "vacuum_requests"), VacuumRequested)
        assert sorted(r.hive_compaction_id for r in requests) == sorted(ours)  # type: ignore[type-var]
        assert not {r.hive_compaction_id for r in requests} & hives
