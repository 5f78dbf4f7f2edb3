"""Several cleaner processes in one group: rebalances lose nothing and delete nothing twice; SIGTERM
stops a cleaner gracefully with its offsets committed."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from cleaner_support import (
    CleanerSubprocess,
    Watcher,
    cleaner_settings,
    create_table,
    publish,
    start_cleaner_process,
    start_reader,
)

from acidclean.shared.hive_metastore import HiveMetastore

pytestmark = pytest.mark.integration


def test_two_cleaners_and_a_third_joining_mid_run_clean_every_vacuum_and_nothing_twice(
    metastore: HiveMetastore, tmp_path: Path, kafka_bootstrap: str, metastore_uri: str, unique_name: str
) -> None:
    root = tmp_path / "data"
    settings = cleaner_settings(kafka_bootstrap, metastore_uri, root, unique_name, interval_ms=300, partitions=4)
    watcher = Watcher(settings)
    tables = [create_table(metastore, root, f"{unique_name}{i}") for i in range(10)]
    singles = {table.name: table.commit_deltas(3) for table in tables}
    readers = [start_reader(metastore, table) for table in tables]
    vacuums = [table.minor_vacuum() for table in tables]
    processes: list[CleanerSubprocess] = []
    try:
        for name in ("a", "b"):
            processes.append(start_cleaner_process(settings, tmp_path / f"{name}.log", cleaner_id=f"cleaner-{name}"))
        publish(settings, *vacuums)
        watcher.wait_for(lambda: all(watcher.delays(v) for v in vacuums), 30, "every vacuum waiting")
        processes.append(start_cleaner_process(settings, tmp_path / "c.log", cleaner_id="cleaner-c"))
        for reader in readers:  # released while the group rebalances around the third member
            reader.release()
            time.sleep(0.3)
        watcher.wait_for(lambda: all(watcher.done(v) for v in vacuums), 60, "every CleanupDone")
        time.sleep(1.0)  # let any late duplicate show up before counting
        codes = [process.stop() for process in processes]
        assert codes == [0, 0, 0], [p.log()[-2000:] for p in processes]
    finally:
        for process in processes:
            process.stop(5)
        watcher.close()

    for table, vacuum in zip(tables, vacuums, strict=True):
        assert table.children() == vacuum.new_directories
        removed = Counter(d.name for done in watcher.done(vacuum) for d in done.directories_removed)
        assert sorted(removed) == sorted(singles[table.name]), table.name
        assert max(removed.values()) == 1, f"{table.name}: a directory reported deleted twice: {removed}"
        assert watcher.rejected(vacuum) == []
    assert '"message":"partitions assigned"' in processes[2].log()  # the third member took partitions


def test_sigterm_finishes_commits_and_leaves_so_nothing_is_processed_again(
    metastore: HiveMetastore, tmp_path: Path, kafka_bootstrap: str, metastore_uri: str, unique_name: str
) -> None:
    root = tmp_path / "data"
    settings = cleaner_settings(kafka_bootstrap, metastore_uri, root, unique_name, interval_ms=300)
    watcher = Watcher(settings)
    tables = [create_table(metastore, root, f"{unique_name}{i}") for i in range(3)]
    for table in tables:
        table.commit_deltas(2)
    reader = start_reader(metastore, tables[0])
    waiting, *ready = [table.minor_vacuum() for table in tables]
    processes: list[CleanerSubprocess] = []
    try:
        first = start_cleaner_process(settings, tmp_path / "first.log", cleaner_id="first")
        processes.append(first)
        publish(settings, waiting, *ready)
        watcher.wait_for(lambda: all(watcher.done(v) for v in ready) and watcher.delays(waiting), 30, "progress")
        stopped = time.monotonic()
        assert first.stop(timeout_s=15) == 0, first.log()
        assert time.monotonic() - stopped < 10
        assert '"message":"cleaner stopped"' in first.log()

        second = start_cleaner_process(settings, tmp_path / "second.log", cleaner_id="second")
        processes.append(second)
        reader.release()  # the waiting vacuum continues from the delay topic under the new process
        watcher.wait_for(lambda: watcher.done(waiting), 30, "the waiting vacuum's CleanupDone")
        time.sleep(1.0)
        assert second.stop() == 0
    finally:
        for process in processes:
            process.stop(5)
        watcher.close()
    assert all(len(watcher.done(v)) == 1 for v in ready)  # not processed again after the restart
    assert [len(d.directories_removed) for d in watcher.done(waiting)] == [2]
    assert '"cleaner_id":"second"' in processes[1].log()
