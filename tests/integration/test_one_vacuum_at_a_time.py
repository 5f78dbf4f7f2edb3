"""One vacuum per table or partition at a time (issue 10, item 5), on the real metastore and Spark:
a second vacuum of the same partition, on any host, refuses and writes nothing; a dead vacuum's lock
is released once stale; a vacuum waits for an earlier vacuum's cleanup unless told otherwise."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from producers_support import DB, directories, make_settings, new_table, vacuum, write

from acidclean.producers.exclusion import ExclusionSettings, exclusive_vacuum, vacuum_lock_component
from acidclean.producers.outbox import Outbox
from acidclean.shared.errors import VacuumRefusedError
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.metastore]


@pytest.fixture(scope="module", autouse=True)
def database(metastore: HiveMetastore) -> None:
    metastore.create_database(DB)


@pytest.fixture
def settings(metastore_uri: str, kafka_bootstrap: str, unique_name: str, tmp_path: Path) -> Settings:
    return make_settings(metastore_uri, kafka_bootstrap, unique_name, tmp_path, vacuum_lock_wait_s=0.5)


def nothing_written(metastore: HiveMetastore, name: str, before: list[str], settings: Settings) -> bool:
    return directories(metastore, name) == before and list(Outbox(settings.state_dir / "outbox").entries()) == []


def test_a_vacuum_of_a_partition_another_vacuum_holds_refuses_and_writes_nothing(
    metastore: HiveMetastore, settings: Settings, spark: Any, unique_name: str
) -> None:
    new_table(metastore, unique_name)
    write(metastore, unique_name, rows=20, commits=2)
    before = directories(metastore, unique_name)
    with exclusive_vacuum(metastore, DB, unique_name, None) as held:  # a vacuum on another host
        with pytest.raises(VacuumRefusedError) as refused:
            vacuum(metastore, settings, spark, unique_name)
        message = str(refused.value)
        assert f"lock {held.lock_id}" in message and "only one vacuum per table or partition" in message
        assert nothing_written(metastore, unique_name, before, settings)
    result = vacuum(metastore, settings, spark, unique_name)  # nothing the loser did blocks the next one
    assert result.status == "committed"
    assert not [lock for lock in metastore.show_locks(DB) if "acidclean_vacuum" in (lock.table or "")]


def test_two_concurrent_vacuums_of_one_table_one_commits_the_other_refuses(
    metastore: HiveMetastore, settings: Settings, spark: Any, unique_name: str
) -> None:
    new_table(metastore, unique_name, buckets=4)
    write(metastore, unique_name, rows=20_000, commits=3)
    outcomes: list[Any] = []
    start = threading.Barrier(2)

    def run() -> None:
        start.wait()
        try:
            outcomes.append(vacuum(metastore, settings, spark, unique_name))
        except VacuumRefusedError as error:
            outcomes.append(error)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    committed = [o for o in outcomes if not isinstance(o, Exception)]
    refused = [o for o in outcomes if isinstance(o, VacuumRefusedError)]
    assert len(committed) == 1 and len(refused) == 1, outcomes
    assert committed[0].status == "committed"
    assert not [name for name in directories(metastore, unique_name) if name.startswith("_tmp_acidclean_")]


def test_a_dead_vacuums_lock_is_released_once_it_is_stale(
    metastore: HiveMetastore, metastore_uri: str, kafka_bootstrap: str, spark: Any, unique_name: str, tmp_path: Path
) -> None:
    new_table(metastore, unique_name)
    write(metastore, unique_name, rows=20, commits=2)
    dead = metastore.lock([vacuum_lock_component(DB, unique_name, None)])  # taken, then never heartbeated
    assert dead.acquired
    settings = make_settings(
        metastore_uri, kafka_bootstrap, unique_name, tmp_path, vacuum_lock_wait_s=5, vacuum_lock_stale_s=1
    )
    time.sleep(1.5)
    assert vacuum(metastore, settings, spark, unique_name).status == "committed"
    assert dead.lock_id not in {lock.lock_id for lock in metastore.show_locks(DB)}


def test_a_vacuum_waits_for_an_earlier_vacuums_cleanup_unless_told_otherwise(
    metastore: HiveMetastore, settings: Settings, spark: Any, unique_name: str
) -> None:
    new_table(metastore, unique_name)
    write(metastore, unique_name, rows=20, commits=3)
    minor = vacuum(metastore, settings, spark, unique_name)
    write(metastore, unique_name, rows=20, commits=1)
    before = directories(metastore, unique_name)
    with pytest.raises(VacuumRefusedError) as refused:
        vacuum(metastore, settings, spark, unique_name, full=True)
    message = str(refused.value)
    assert "its cleanup has not run yet" in message and "--allow-uncleaned" in message
    assert minor.plan.obsolete_after[0] in message
    assert directories(metastore, unique_name) == before
    assert vacuum(metastore, settings, spark, unique_name, full=True, allow_uncleaned=True).status == "committed"


def test_vacuums_of_two_partitions_of_one_table_do_not_exclude_each_other(
    metastore: HiveMetastore, settings: Settings, unique_name: str
) -> None:
    new_table(metastore, unique_name, partitioned_by=[("ds", "string")])
    quick = ExclusionSettings(wait_s=0.5)
    with exclusive_vacuum(metastore, DB, unique_name, "ds=1", quick):
        with exclusive_vacuum(metastore, DB, unique_name, "ds=2", quick):
            pass
        with pytest.raises(VacuumRefusedError), exclusive_vacuum(metastore, DB, unique_name, "ds=1", quick):
            pass
