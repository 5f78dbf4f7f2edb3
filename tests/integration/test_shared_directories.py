"""Rule 8 on the real stack: two partitions sharing one directory (issue 49, item 3).

A partition added with ``LOCATION`` pointing at another partition's directory (a "latest" alias) is
vacuumed while a reader holds a lock on the real partition: the reader's deltas must survive until
its lock is released, then be cleaned; and no vacuum of the real partition runs while the alias's
holds its vacuum lock. On main f8b7487 the alias's snapshot held no lock and the cleaner deleted the
reader's deltas at once.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from cleaner_support import Watcher, running_cleaner
from hmsclient import hmsclient
from producers_support import DB, new_table, vacuum, write

from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.metastore import LockRequestComponent, LockType, Operation
from acidclean.shared.settings import Settings
from acidclean.shared.storage import open_location

pytestmark = [pytest.mark.integration, pytest.mark.metastore, pytest.mark.rule8, pytest.mark.rule1]

REAL, ALIAS = "p=real", "p=latest"


@pytest.fixture(scope="module", autouse=True)
def database(metastore: HiveMetastore) -> None:
    metastore.create_database(DB)


@pytest.fixture
def table_location(metastore: HiveMetastore, unique_name: str) -> Path:
    """The conftest's table, partitioned by p (its settings and watcher come with it)."""
    new_table(metastore, unique_name, partitioned_by=[("p", "string")])
    return Path(metastore.get_table(DB, unique_name).location.removeprefix("file:"))


def add_alias(metastore_uri: str, table: str, of: str, alias_value: str, location: str) -> None:
    """``ALTER TABLE t ADD PARTITION (p='latest') LOCATION '<p=real's directory>'``, as Hive sends it."""
    url = urlparse(metastore_uri)
    with hmsclient.HMSClient(host=url.hostname, port=url.port) as client:
        real = client.get_partition_by_name(DB, table, of)
        alias = copy.deepcopy(real)
        alias.values = [alias_value]
        alias.sd.location = location
        alias.parameters = {}
        client.add_partitions([alias])  # the Thrift call; HMSClient.add_partition builds its own location


def hive_reader(metastore: HiveMetastore, table: str, partition: str) -> tuple[int, int]:
    """A query's SHARED_READ lock on one partition inside a transaction, as Hive's DbTxnManager takes it."""
    txn = metastore.open_txn()
    component = LockRequestComponent(DB, table, partition, lock_type=LockType.SHARED_READ, operation=Operation.SELECT)
    result = metastore.lock([component], txn_id=txn)
    assert result.acquired, result
    return txn, result.lock_id


@contextmanager
def counted_calls(metastore: HiveMetastore) -> Iterator[Counter[str]]:
    """The metastore calls made in the block, by Thrift method (``get_partitions(db.t)``: ``get_partitions``)."""
    calls: Counter[str] = Counter()
    real_call = metastore._call

    def counting(what: str, operation: Any) -> Any:
        answer = real_call(what, operation)  # counted when answered: Hive 4 refuses a removed method once
        calls[what.split("(")[0].removesuffix("_req")] += 1
        return answer

    metastore._call = counting  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        del metastore._call


def children(location: str) -> list[str]:
    opened = open_location(location)
    return sorted(entry.name for entry in opened.fs.list_dir(opened.path) if not entry.name.startswith((".", "_")))


def test_a_full_vacuum_of_an_alias_partition_keeps_the_deltas_of_a_reader_of_the_real_one(
    metastore: HiveMetastore,
    metastore_uri: str,
    table_settings: Settings,
    table_watcher: Watcher,
    spark: Any,
    unique_name: str,
) -> None:
    settings, watcher = table_settings, table_watcher
    write(metastore, unique_name, rows=20, commits=3, partition=REAL)
    location = metastore.get_table(DB, unique_name, REAL).location
    add_alias(metastore_uri, unique_name, REAL, "latest", location)
    assert metastore.get_table(DB, unique_name, ALIAS).location == location
    singles = children(location)
    assert len(singles) == 3
    txn, lock_id = hive_reader(metastore, unique_name, REAL)
    released = False
    try:
        with running_cleaner(settings):
            with counted_calls(metastore) as calls:
                result = vacuum(metastore, settings, spark, unique_name, full=True, partition=ALIAS)
            assert result.publish is not None and result.publish.published
            event = result.publish.event
            assert event.partition == ALIAS
            watcher.wait_for(
                lambda: len(watcher.delays(event)) >= 2 or watcher.done(event), 30, "the cleanup waiting for the reader"
            )
            assert watcher.done(event) == [], "cleaned while a reader of the real partition held its lock"
            assert set(singles) <= set(children(location)), "a reader of the real partition lost a delta"
            assert [entry.lock_id for entry in event.lock_snapshot] == [lock_id]
            assert [(s.table, s.partition) for s in event.shared_locations or []] == [(f"{DB}.{unique_name}", REAL)]
            metastore.commit_txn(txn)
            released = True
            [done] = watcher.wait_for(lambda: watcher.done(event), 30, "the cleanup after the reader ended")
            assert sorted(d.name for d in done.directories_removed) == singles
    finally:
        if not released:
            metastore.abort_txn(txn)
    assert children(location) == list(result.new_directories)
    assert watcher.of("dead_letter") == []
    # rule 8's cost: the database's tables and the table's partitions, at the start and after the rename
    catalog_calls = ("get_all_tables", "get_table_objects_by_name", "get_partitions")
    assert [calls[name] for name in catalog_calls] == [2, 2, 2], calls


def test_a_vacuum_of_the_real_partition_waits_while_the_alias_is_vacuumed(
    metastore: HiveMetastore, metastore_uri: str, unique_name: str
) -> None:
    # Imported here, so that the first test runs unchanged against main f8b7487, which has no such module.
    from acidclean.producers.exclusion import ExclusionSettings, exclusive_vacuum
    from acidclean.producers.shared_locations import shared_vacuum_locks, sharers_of
    from acidclean.shared.errors import VacuumBusyError

    new_table(metastore, unique_name, partitioned_by=[("p", "string")])
    location = metastore.add_partition(DB, unique_name, REAL)
    add_alias(metastore_uri, unique_name, REAL, "latest", location.rstrip("/") + "/")  # another spelling
    alias_info = metastore.get_table(DB, unique_name, ALIAS)
    real_info = metastore.get_table(DB, unique_name, REAL)
    quick = ExclusionSettings(wait_s=1.0, poll_s=0.1)
    alias_sharers = sharers_of(metastore, alias_info)
    assert [(s.partition) for s in alias_sharers] == [REAL]
    with exclusive_vacuum(metastore, DB, unique_name, ALIAS, quick, shared_vacuum_locks(alias_sharers)):
        real_sharers = sharers_of(metastore, real_info)
        busy = pytest.raises(VacuumBusyError, match="another vacuum of")
        with busy, exclusive_vacuum(metastore, DB, unique_name, REAL, quick, shared_vacuum_locks(real_sharers)):
            pass
    # released: the real partition's vacuum goes ahead
    with exclusive_vacuum(metastore, DB, unique_name, REAL, quick, shared_vacuum_locks(real_sharers)):
        pass


@pytest.mark.rule8
def test_hives_compaction_of_the_real_partition_refuses_a_vacuum_of_its_alias(
    metastore: HiveMetastore, metastore_uri: str, table_settings: Settings, spark: Any, unique_name: str
) -> None:
    """Hive compacting ``p=real`` writes and cleans the directory a vacuum of ``p=latest`` would read:
    the vacuum refuses, naming Hive's compaction of the other name, and writes nothing. On f8b7487 it
    asked ``show_compact`` for ``p=latest`` alone and went ahead."""
    from acidclean.shared.errors import VacuumRefusedError

    write(metastore, unique_name, rows=20, commits=3, partition=REAL)
    location = metastore.get_table(DB, unique_name, REAL).location
    add_alias(metastore_uri, unique_name, REAL, "latest", location)
    metastore.request_compaction(DB, unique_name, REAL, "MAJOR")
    assert metastore.compactions(DB, unique_name, ALIAS) == []  # Hive's queue knows the real name only
    before = sorted(entry.name for entry in open_location(location).fs.list_dir(open_location(location).path))

    refused = pytest.raises(
        VacuumRefusedError,
        match=f"MAJOR compaction of {DB}.{unique_name} partition {REAL}, which shares this vacuum's directory "
        "in state initiated",
    )
    with refused:
        vacuum(metastore, table_settings, spark, unique_name, full=True, partition=ALIAS)
    after = sorted(entry.name for entry in open_location(location).fs.list_dir(open_location(location).path))
    assert after == before
