"""Safety rule 5: a cleaner killed with SIGKILL at each step, then restarted, loses nothing.

The cleaner runs as a subprocess (``acidclean cleaner``); the test-only hook ``ACIDCLEAN_CRASH_AT``
makes it kill itself at one step. The restarted process (same static group member id, so it takes
the partitions back at once) must finish the vacuum: every obsolete directory ends deleted, nothing
else is, and at most one duplicate ``CleanupDone`` with nothing removed appears. Whatever the step,
the ``CleanupStarted`` published before the first delete lets the audit list every directory deleted.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from cleaner_support import (
    Watcher,
    cleaner_settings,
    create_table,
    publish,
    start_cleaner_process,
)

from acidclean.consumers.audit import read_audit
from acidclean.shared.hive_metastore import HiveMetastore

pytestmark = [pytest.mark.integration, pytest.mark.rule5]


STATIC_MEMBER = {"ACIDCLEAN_KAFKA_GROUP_INSTANCE_ID": "cleaner-1", "ACIDCLEAN_KAFKA_SESSION_TIMEOUT_MS": "10000"}


@pytest.mark.parametrize(
    ("crash_at", "deleted_before_restart", "done_before_restart"),
    [("before-delete", 0, 0), ("mid-delete", 1, 0), ("after-delete", 3, 0), ("after-done", 3, 1)],
)
def test_killed_at_each_step_then_restarted_every_vacuum_ends_cleaned_and_nothing_else_is_deleted(
    crash_at: str,
    deleted_before_restart: int,
    done_before_restart: int,
    metastore: HiveMetastore,
    tmp_path: Path,
    kafka_bootstrap: str,
    metastore_uri: str,
    unique_name: str,
) -> None:
    root = tmp_path / "data"
    # One delete thread: "mid-delete" is then exactly one directory deleted (with more, others may be
    # finishing at the same instant); the crash hook itself changes nothing on the delete path.
    settings = cleaner_settings(kafka_bootstrap, metastore_uri, root, unique_name, interval_ms=300, threads=1)
    watcher = Watcher(settings)
    table = create_table(metastore, root, unique_name)
    singles = table.commit_deltas(3)
    bystander = create_table(metastore, root, unique_name + "b")  # no vacuum: must stay untouched
    bystander.commit_deltas(2)
    untouched = bystander.children()
    vacuum = table.minor_vacuum()
    processes = []
    try:
        publish(settings, vacuum)
        crashing = start_cleaner_process(settings, tmp_path / "crash.log", crash_at=crash_at, extra_env=STATIC_MEMBER)
        processes.append(crashing)
        assert crashing.process.wait(60) == -signal.SIGKILL, crashing.log()
        assert f"SIGKILL at {crash_at}" in crashing.log()
        remaining = [name for name in singles if name in table.children()]
        assert len(singles) - len(remaining) == deleted_before_restart
        assert vacuum.new_directories[0] in table.children()
        [announced] = watcher.wait_for(lambda: watcher.started(vacuum), 5, "CleanupStarted before the crash")
        assert [d.name for d in announced.directories_to_remove] == singles  # acknowledged before any delete
        watcher.wait_for(lambda: len(watcher.done(vacuum)) >= done_before_restart, 5, "CleanupDone before the crash")
        assert len(watcher.done(vacuum)) == done_before_restart

        restarted = start_cleaner_process(settings, tmp_path / "restart.log", extra_env=STATIC_MEMBER)
        processes.append(restarted)
        watcher.wait_for(lambda: len(watcher.done(vacuum)) > done_before_restart, 45, "CleanupDone after restart")
        assert restarted.stop() == 0, restarted.log()
    finally:
        for process in processes:
            process.stop(5)
        watcher.close()

    assert table.children() == vacuum.new_directories
    assert bystander.children() == untouched
    dones = watcher.done(vacuum)
    assert len(dones) in (1, 2)
    removed_after = [d.name for d in dones[-1].directories_removed]
    assert sorted(removed_after) == sorted(remaining)
    if len(dones) == 2:
        assert dones[0].event_id == dones[1].event_id  # the duplicate carries the same id
        assert dones[1].directories_removed == []
    assert watcher.rejected(vacuum) == []
    for again in watcher.started(vacuum)[1:]:  # the restart announces what it still found, if anything
        same = [d.name for d in again.directories_to_remove] == singles
        assert (again.event_id == announced.event_id) == same  # same announcement, same id

    rows, _ = read_audit(settings, table=table.full_name)
    [row] = [row for row in rows if row.vacuum_id == str(vacuum.event_id)]
    assert row.state == "cleaned"
    assert sorted(row.directories_removed) == sorted(singles)  # from the topics alone, even after a crash
    assert row.bytes_freed == sum(d.bytes for d in announced.directories_to_remove) > 0
    if crash_at == "after-delete":  # the successor's CleanupDone listed nothing: the announcement says what went
        assert dones[-1].directories_removed == []
        assert row.reason is not None and row.reason.startswith("3 directories removed before a cleaner restart")
