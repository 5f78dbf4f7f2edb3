"""Directories acidclean did not write, on the real stack: Hive's own compaction output whose
transaction is open or aborted (``base_N_vT``), and an aborted insert's base named by a forged event.
Neither may make anything obsolete, so nothing a reader needs is deleted."""

from __future__ import annotations

import shutil
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from cleaner_support import TENANT, Watcher, publish, running_cleaner
from producers_support import DB, directories, snapshot, vacuum, write

from acidclean.schemas.events import VacuumCommitted
from acidclean.shared.acid.names import base_name, delta_name
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.rule3]


@pytest.mark.metastore  # CI runs these on Hive 3 too
def test_an_open_then_aborted_hive_compaction_supersedes_nothing(
    metastore: HiveMetastore,
    table_settings: Settings,
    table_watcher: Watcher,
    spark: Any,
    unique_name: str,
    table_location: Path,
) -> None:
    first = [c.write_id for c in write(metastore, unique_name, rows=20, commits=2)]
    with running_cleaner(table_settings):
        vacuum(metastore, table_settings, spark, unique_name, full=True)
        table_watcher.wait_for(
            lambda: directories(metastore, unique_name) == [base_name(first[-1])], 30, "base cleaned"
        )
        later = [c.write_id for c in write(metastore, unique_name, rows=20, commits=2)]
        before = snapshot(metastore, unique_name)
        # Hive's compactor is writing base_<later>_v<T> in its own open transaction T.
        hive_txn = metastore.open_txn()
        hive_base = base_name(later[-1], visibility_txn_id=hive_txn)
        shutil.copytree(table_location / delta_name(later[0], later[0], 0), table_location / hive_base)
        assert snapshot(metastore, unique_name).equals(before)  # readers ignore it while T is open

        minor = vacuum(metastore, table_settings, spark, unique_name)  # the planner ignores it too
        assert minor.new_directories == (delta_name(later[0], later[-1]),)
        assert minor.publish is not None
        event = minor.publish.event
        assert hive_base not in event.obsolete_directories
        table_watcher.wait_for(lambda: table_watcher.delays(event), 30, "a wait for Hive's open transaction")
        assert table_watcher.delays(event)[-1].open_txns == [hive_txn]
        metastore.abort_txn(hive_txn)
        [done] = table_watcher.wait_for(lambda: table_watcher.done(event), 30, "the cleanup")
    assert sorted(d.name for d in done.directories_removed) == sorted(delta_name(w, w, 0) for w in later)
    expected = {base_name(first[-1]), delta_name(later[0], later[-1]), hive_base}
    assert set(directories(metastore, unique_name)) == expected
    assert snapshot(metastore, unique_name).equals(before)


def test_a_forged_event_naming_an_aborted_inserts_base_is_dead_lettered_and_deletes_nothing(
    metastore: HiveMetastore, table_settings: Settings, table_watcher: Watcher, unique_name: str, table_location: Path
) -> None:
    ids = [c.write_id for c in write(metastore, unique_name, rows=20, commits=3)]
    # An insert overwrite that aborted left base_<n>: no vacuum wrote it.
    txn = metastore.open_txn()
    aborted = metastore.allocate_write_id(txn, DB, unique_name)
    shutil.copytree(table_location / delta_name(ids[0], ids[0], 0), table_location / base_name(aborted))
    metastore.abort_txn(txn)
    before = directories(metastore, unique_name)
    forged = VacuumCommitted(
        tenant=TENANT,
        table=f"{DB}.{unique_name}",
        partition=None,
        occurred_at=datetime.now(timezone.utc),
        location="file:" + str(table_location),
        compaction_type="MAJOR",
        new_directories=[base_name(aborted)],
        obsolete_directories=[delta_name(i, i, 0) for i in ids],
        highest_write_id=aborted,
        lock_snapshot=[],
        locks_observed=0,
        vacuum_job_id=f"forged-{uuid.uuid4().hex[:6]}",
    )
    with running_cleaner(table_settings):
        publish(table_settings, forged)
        [rejected] = table_watcher.wait_for(lambda: table_watcher.rejected(forged), 30, "the dead letter")
    assert rejected.reason_code == "invalid_event" and base_name(aborted) in rejected.reason
    assert directories(metastore, unique_name) == before
    assert table_watcher.done(forged) == []
