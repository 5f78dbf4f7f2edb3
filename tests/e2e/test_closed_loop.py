"""Issue 13's closed loop on the real stack, with no command run by the test between the commits and
the cleanup: ``acidclean ingest`` commits, ``acidclean initiator`` requests, ``acidclean
vacuum-service`` vacuums and ``acidclean cleaner`` cleans, each a subprocess stopped by its pid.

12 commits over a threshold of 10 lead to exactly one vacuum and one cleanup; 30 more commits made
while that vacuum runs lead to the next vacuum only once the first is cleaned.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from producers_support import DB, directories, make_settings, new_table
from vacuum_service_support import of_type, start_command, subprocesses, topic_events, wait_for

from acidclean.schemas.events import CleanupDone, VacuumCommitted, VacuumFailed, VacuumRequested, VacuumStarted
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.settings import Settings

pytestmark = pytest.mark.integration

LOOP_ENV = {
    "ACIDCLEAN_COMPACTOR_DELTA_NUM_THRESHOLD": "10",
    "ACIDCLEAN_INITIATOR_SWEEP_INTERVAL_S": "0",  # only the ingest's events start vacuums here
}


def lifecycle(settings: Settings) -> list[Any]:
    return topic_events(settings, "vacuum_requests", "vacuum_committed", "cleanup_done")


def test_commits_over_the_threshold_lead_to_one_vacuum_and_cleanup_then_the_next_only_after_it(
    metastore: HiveMetastore, metastore_uri: str, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    metastore.create_database(DB)
    table = new_table(metastore, unique_name)
    location = metastore.get_table(DB, unique_name).location
    database_dir = location.removeprefix("file:").rstrip("/").rsplit("/", 1)[0]
    state = tmp_path / "state"
    state.mkdir()
    settings = make_settings(
        metastore_uri,
        kafka_bootstrap,
        unique_name,
        state,
        tenant="acme",
        allowed_roots={"acme": [database_dir]},
        group_id=f"{unique_name}-cleaner",
        cleanup_interval_ms=300,
        vacuum_service_group_id=f"{unique_name}-vacuums",
        vacuum_service_master="local[2]",
    )
    env = {**LOOP_ENV, "ACIDCLEAN_INITIATOR_GROUP_ID": f"{unique_name}-initiator"}
    with subprocesses() as started:
        for command in ("initiator", "vacuum-service", "cleaner"):
            started.append(start_command(settings, tmp_path / f"{command}.log", command, extra_env=env))

        first_ingest = start_command(
            settings, tmp_path / "ingest-12.log", "ingest", table, "--rows", "200", "--commits", "12"
        )
        assert first_ingest.process.wait(180) == 0, first_ingest.log()
        [first] = wait_for(lambda: of_type(lifecycle(settings), VacuumRequested), 120, "the first VacuumRequested")
        assert first.figures.delta_count in (11, 12) and "> hive.compactor.delta.num.threshold 10" in first.reason
        wait_for(
            lambda: of_type(lifecycle(settings), VacuumStarted, correlation_id=first.event_id),
            240,
            "the first VacuumStarted",
            every_s=0.2,
        )

        more = start_command(
            settings, tmp_path / "ingest-30.log", "ingest", table, "--rows", "200", "--commits", "30", "--seed", "1"
        )  # while the first vacuum runs
        [vacuum] = wait_for(
            lambda: of_type(lifecycle(settings), VacuumCommitted, request_id=first.event_id),
            240,
            "the first VacuumCommitted",
        )
        [done] = wait_for(
            lambda: of_type(lifecycle(settings), CleanupDone, correlation_id=vacuum.event_id),
            120,
            "the first CleanupDone",
        )
        assert more.process.wait(240) == 0, more.log()
        # The second vacuum may start while the 30 commits still arrive: those after its plan make a third.
        wait_for(lambda: settled(settings), 300, "every request answered and cleaned", every_s=1)
        for process in started:
            assert process.process.poll() is None, process.log()  # nothing crashed along the way

    events = lifecycle(settings)
    # 12 commits over a threshold of 10: one request, one vacuum, one cleanup until that cleanup is done
    # (the 30 more commits meanwhile made no request).
    until_done = [e for e in events if e.occurred_at <= done.occurred_at]
    assert [r.event_id for r in of_type(until_done, VacuumRequested)] == [first.event_id]
    assert [v.event_id for v in of_type(until_done, VacuumCommitted)] == [vacuum.event_id]
    assert [d.event_id for d in of_type(until_done, CleanupDone)] == [done.event_id]
    assert of_type(events, VacuumFailed) == []
    requests = of_type(events, VacuumRequested)
    assert len(requests) >= 2 and requests[0].event_id == first.event_id
    vacuums = [only(of_type(events, VacuumCommitted, request_id=r.event_id)) for r in requests]  # one per request
    dones = [only(of_type(events, CleanupDone, correlation_id=v.event_id)) for v in vacuums]
    for earlier_done, request in zip(dones, requests[1:], strict=False):
        # The next vacuum is requested, and started, only once the one before it is cleaned.
        [started_next] = of_type(events, VacuumStarted, correlation_id=request.event_id)
        assert earlier_done.occurred_at <= request.requested_at <= started_next.started_at
    assert len(of_type(events, VacuumCommitted)) == len(requests) and len(of_type(events, CleanupDone)) == len(dones)
    # Left: the last vacuum's output, and deltas committed after it planned (too few for a request).
    last = vacuums[-1]
    later = [d for d in directories(metastore, unique_name) if d not in last.new_directories]
    assert set(last.new_directories) <= set(directories(metastore, unique_name))
    assert all(d.startswith("delta_") and int(d.split("_")[1]) > last.highest_write_id for d in later), later
    assert len(later) <= 10


def only(items: list[Any]) -> Any:
    assert len(items) == 1, items
    return items[0]


def settled(settings: Settings) -> bool:
    """Every request has its vacuum cleaned, and nothing new came for a few seconds."""

    def answered(events: list[Any]) -> bool:
        vacuums = {v.event_id for v in of_type(events, VacuumCommitted)}
        cleaned = {d.correlation_id for d in of_type(events, CleanupDone)}
        requested = {r.event_id for r in of_type(events, VacuumRequested)}
        return bool(requested) and vacuums <= cleaned and len(vacuums) == len(requested)

    before = lifecycle(settings)
    if not answered(before):
        return False
    time.sleep(5)  # the initiator's check after the last cleanup
    return len(lifecycle(settings)) == len(before)
