"""Safety rule 5 for batches: a cleaner killed in the middle of a batch of tables, then restarted.

Several vacuums of different tables are published at once, so one worker takes them as a batch: one
announcement for all, the deletes, one publish of all their ``CleanupDone``, then the offset commit.
The cleaner kills itself with SIGKILL after the first directory deleted (``mid-delete``) or after the
batch's outcomes were acknowledged and before their offsets were committed (``after-done``). The
restarted process must finish every vacuum: nothing lost, at most a duplicate ``CleanupDone`` with
the same id that removed nothing, and nothing but the claimed directories deleted.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from cleaner_support import Watcher, cleaner_settings, create_table, publish, start_cleaner_process

from acidclean.consumers.audit import read_audit
from acidclean.shared.hive_metastore import HiveMetastore

pytestmark = [pytest.mark.integration, pytest.mark.rule5]

STATIC_MEMBER = {"ACIDCLEAN_KAFKA_GROUP_INSTANCE_ID": "cleaner-1", "ACIDCLEAN_KAFKA_SESSION_TIMEOUT_MS": "10000"}
TABLES = 6


@pytest.mark.parametrize("crash_at", ["mid-delete", "after-done"])
def test_a_batch_killed_mid_way_then_restarted_cleans_every_vacuum_once_and_nothing_else(
    crash_at: str,
    metastore: HiveMetastore,
    tmp_path: Path,
    kafka_bootstrap: str,
    metastore_uri: str,
    unique_name: str,
) -> None:
    root = tmp_path / "data"
    settings = cleaner_settings(kafka_bootstrap, metastore_uri, root, unique_name, interval_ms=300, threads=1)
    watcher = Watcher(settings)
    tables = [create_table(metastore, root, f"{unique_name}{i}") for i in range(TABLES)]
    singles = {table.full_name: table.commit_deltas(3) for table in tables}
    bystander = create_table(metastore, root, unique_name + "b")
    bystander.commit_deltas(2)
    untouched = bystander.children()
    vacuums = [table.minor_vacuum() for table in tables]
    processes = []
    try:
        publish(settings, *vacuums)
        crashing = start_cleaner_process(settings, tmp_path / "crash.log", crash_at=crash_at, extra_env=STATIC_MEMBER)
        processes.append(crashing)
        assert crashing.process.wait(90) == -signal.SIGKILL, crashing.log()
        assert f"SIGKILL at {crash_at}" in crashing.log()
        watcher.catch_up()
        announced = [v for v in vacuums if watcher.started(v)]
        assert announced, "the batch was announced before its first delete"
        for table, vacuum in zip(tables, vacuums, strict=True):
            gone = [name for name in singles[table.full_name] if name not in table.children()]
            assert vacuum.new_directories[0] in table.children()
            if gone:
                assert watcher.started(vacuum), (
                    f"{table.full_name}: deleted {gone} without an acknowledged announcement"
                )
            if watcher.done(vacuum):
                assert len(gone) == 3, f"{table.full_name}: CleanupDone acknowledged before its deletes"
        if crash_at == "after-done":
            assert any(watcher.done(v) for v in vacuums)

        restarted = start_cleaner_process(settings, tmp_path / "restart.log", extra_env=STATIC_MEMBER)
        processes.append(restarted)
        watcher.wait_for(lambda: all(watcher.done(v) for v in vacuums), 60, "every CleanupDone after the restart")
        # After "after-done" the crashed process had reported all of them: let the restart take the
        # partitions and replay the uncommitted batch (its duplicates are checked below).
        watcher.wait_for(lambda: "partitions assigned" in restarted.log(), 60, "the restarted cleaner in the group")
        time.sleep(3)
        assert restarted.stop() == 0, restarted.log()
    finally:
        for process in processes:
            process.stop(5)
        watcher.close()

    assert bystander.children() == untouched
    for table, vacuum in zip(tables, vacuums, strict=True):
        assert table.children() == vacuum.new_directories
        dones = watcher.done(vacuum)
        assert len(dones) in (1, 2), dones
        if len(dones) == 2:
            assert dones[0].event_id == dones[1].event_id  # the replay's duplicate carries the same id
            assert dones[1].directories_removed == []
        assert watcher.rejected(vacuum) == []
        rows, _ = read_audit(settings, table=table.full_name)
        [row] = [row for row in rows if row.vacuum_id == str(vacuum.event_id)]
        assert row.state == "cleaned"
        assert sorted(row.directories_removed) == sorted(singles[table.full_name])
