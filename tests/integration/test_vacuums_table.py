"""Rule 9 with the vacuum's table identity on the real stack (issue 49, leftover 1).

A table is vacuumed, then dropped and created again under the same name and location before the
cleaner first looks at the event; the new table's directories carry the names the vacuum made
obsolete (Hive 3 and 4: write ids restart at 1; Hive 2, whose names are transaction ids: restored
from a backup under the old names) and its directory holds the vacuum's output again (restored from
a backup taken after the vacuum). The cleaner's check finds a consistent table, so only the identity
the vacuum recorded tells it that this is not the table the vacuum compacted. On f8b7487 the cleaner
deletes the new table's deltas.

Create times have a resolution of one second: the vacuum reads the identity only once the metastore's
clock is past the table's create second, so a table created again right after still differs.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from cleaner_support import Watcher, running_cleaner
from producers_support import DB, new_table, vacuum, write

from acidclean.shared.acid.id_lists import MetastoreKind
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.metastore, pytest.mark.rule9]

COLUMNS = [("id", "int"), ("v", "string")]


@pytest.fixture(scope="module", autouse=True)
def database(metastore: HiveMetastore) -> None:
    metastore.create_database(DB)


@pytest.fixture
def table_location(metastore: HiveMetastore, unique_name: str) -> Path:
    """The conftest's table (its settings and watcher come with it): unpartitioned, two buckets."""
    new_table(metastore, unique_name, columns=COLUMNS)
    return Path(metastore.get_table(DB, unique_name).location.removeprefix("file:"))


def children(path: Path) -> list[str]:
    return sorted(entry.name for entry in path.iterdir() if not entry.name.startswith((".", "_")))


def test_a_table_created_again_between_the_vacuums_commit_and_the_cleanup_keeps_its_deltas(
    metastore: HiveMetastore,
    table_settings: Settings,
    table_watcher: Watcher,
    table_location: Path,
    spark: Any,
    unique_name: str,
    tmp_path: Path,
) -> None:
    settings, watcher = table_settings, table_watcher
    write(metastore, unique_name, rows=20, commits=3)
    singles = children(table_location)
    original = metastore.get_table(DB, unique_name)
    result = vacuum(metastore, settings, spark, unique_name)
    assert result.publish is not None and result.publish.published
    event = result.publish.event
    assert event.table_identity is not None
    assert (event.table_identity.create_time, event.table_identity.location) == (
        original.create_time,
        original.location,
    )
    assert sorted(event.obsolete_directories) == singles

    backup = tmp_path / "backup"
    shutil.copytree(table_location, backup)
    metastore.drop_table(DB, unique_name)
    if table_location.exists():
        shutil.rmtree(table_location)
    metastore.create_transactional_table(DB, unique_name, COLUMNS, buckets=2, location=original.location)
    if metastore.kind is MetastoreKind.HIVE2:
        for name in singles:
            shutil.copytree(backup / name, table_location / name)
    else:
        write(metastore, unique_name, rows=100, commits=3)  # write ids 1..3 again: the same names
    assert children(table_location) == singles
    for name in result.new_directories:
        shutil.copytree(backup / name, table_location / name)
    recreated = metastore.get_table(DB, unique_name)
    assert recreated.create_time != original.create_time

    with running_cleaner(settings):
        [done] = watcher.wait_for(lambda: watcher.done(event), 60, "the cleanup of the vacuum")
    assert done.directories_removed == []
    assert "is not the table this vacuum compacted" in (done.note or "")
    assert set(singles) <= set(children(table_location)), "the re-created table lost a delta"
    assert watcher.started(event) == [] and watcher.of("dead_letter") == []


def test_a_table_created_again_right_after_the_vacuum_read_its_identity_has_another_create_time(
    metastore: HiveMetastore, unique_name: str
) -> None:
    """The one-second resolution: a table created, read and created again all within one second would
    have the create time of the first. The vacuum's read waits until the metastore's clock is past
    the create second (by its own stamp of the vacuum lock's heartbeat), so a table created again
    right after it never does."""
    from acidclean.producers.exclusion import ExclusionSettings, exclusive_vacuum
    from acidclean.producers.table_identity import planned_identity
    from acidclean.shared.metastore import TableIdentity, table_difference

    new_table(metastore, unique_name, columns=COLUMNS)
    info = metastore.get_table(DB, unique_name)
    assert info.create_time is not None
    with exclusive_vacuum(metastore, DB, unique_name, None, ExclusionSettings(wait_s=5.0)) as held:
        identity = planned_identity(metastore, info, held.metastore_now_ms)
        now_ms = held.metastore_now_ms()
    assert identity is not None and identity.create_time == info.create_time
    assert now_ms is not None, "the metastore stamps the vacuum lock's heartbeat with its time"
    assert now_ms // 1000 > info.create_time + 1  # read past the create second and the margin
    metastore.drop_table(DB, unique_name)
    metastore.create_transactional_table(DB, unique_name, COLUMNS, buckets=2, location=info.location)
    again = TableIdentity.of(metastore.get_table(DB, unique_name))
    assert table_difference(identity, again) is not None


def test_a_partition_added_this_second_is_read_past_its_create_second(
    metastore: HiveMetastore, unique_name: str
) -> None:
    """The same for a partition (a partition dropped and added again has a new create time): the
    metastore's time comes from the partition's vacuum lock."""
    from acidclean.producers.exclusion import ExclusionSettings, exclusive_vacuum
    from acidclean.producers.table_identity import planned_identity

    new_table(metastore, unique_name, columns=COLUMNS, partitioned_by=[("p", "string")])
    metastore.add_partition(DB, unique_name, "p=1")
    info = metastore.get_table(DB, unique_name, "p=1")
    assert info.partition_create_time is not None
    with exclusive_vacuum(metastore, DB, unique_name, "p=1", ExclusionSettings(wait_s=5.0)) as held:
        identity = planned_identity(metastore, info, held.metastore_now_ms)
        now_ms = held.metastore_now_ms()
    assert identity is not None and identity.partition_create_time == info.partition_create_time
    assert now_ms is not None and now_ms // 1000 > info.partition_create_time + 1


@pytest.mark.rule7
def test_a_table_created_again_while_it_is_vacuumed_gets_nothing_of_the_old_one(
    metastore: HiveMetastore,
    table_settings: Settings,
    table_location: Path,
    spark: Any,
    unique_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Dropped (its data kept) and created again after the vacuum planned and wrote, before its commit:
    the fence finds another table and nothing is made visible in the new one (the old rows would be the
    new table's)."""
    import acidclean.producers.vacuum as vacuum_module
    from acidclean.shared.errors import VacuumFencedError

    write(metastore, unique_name, rows=20, commits=3)
    singles = children(table_location)
    original = metastore.get_table(DB, unique_name)
    finish = vacuum_module.finish_directories

    def finish_then_recreate(*args: Any, **kwargs: Any) -> Any:
        produced = finish(*args, **kwargs)
        metastore.drop_table(DB, unique_name, delete_data=False)  # the staging directory stays
        metastore.create_transactional_table(DB, unique_name, COLUMNS, buckets=2, location=original.location)
        return produced

    monkeypatch.setattr(vacuum_module, "finish_directories", finish_then_recreate)
    with pytest.raises(VacuumFencedError, match="the table was dropped and created again while it was vacuumed"):
        vacuum(metastore, table_settings, spark, unique_name)
    assert children(table_location) == singles  # the vacuum's output never appeared
