"""Partition names on the real metastore: a reader that locks a partition the way Hive and Trino do
(the escaped name, ``city=St. John%27s%232``; Hive 3 stores it lower-cased) is in the vacuum's lock
snapshot, however the operator typed ``--partition``, and the cleanup waits for it.

Partitions are created with their raw values and Hive's own names come from the metastore
(``get_partition_names``: Java's ``Warehouse.makePartName``), so nothing here trusts our escaping.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from cleaner_support import Watcher, running_cleaner
from hmsclient import hmsclient
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from producers_support import DB, new_table, vacuum, write

from acidclean.consumers.rules.readiness import ready_to_clean
from acidclean.producers.locks import lock_snapshot
from acidclean.producers.vacuum import lookup_table
from acidclean.shared.acid.partition_names import (
    escape_path_name,
    make_partition_name,
    parse_partition_name,
    unescape_path_name,
)
from acidclean.shared.errors import MetastoreError
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.metastore import LockRequestComponent, LockType, Operation
from acidclean.shared.settings import Settings
from acidclean.shared.storage import open_location

pytestmark = [pytest.mark.integration, pytest.mark.metastore]  # CI runs these on Hive 3 too

# Values holding every kind of character Hive escapes, and some it does not.
VALUES = {
    "quote-hash": "St. John's#2",
    "slash-equals-colon": "a/b=c:d",
    "slash": "x/y",
    "percent-space": "50% off",
    "non-ascii": "Zürich Straße",
    "literal-escape": "x%41y",  # raw '%41': Hive names it x%2541y
    "mixed-case": "MiXeD Case",
    "default": "__HIVE_DEFAULT_PARTITION__",
    "punctuation": 'q?*"[x]^{y}\\z',
}


@pytest.fixture(scope="module", autouse=True)
def database(metastore: HiveMetastore) -> None:
    metastore.create_database(DB)


def add_partition_as_hive(metastore_uri: str, table: str, values: list[str]) -> None:
    """Create a partition from its raw values, as ``ALTER TABLE ... ADD PARTITION`` does."""
    url = urlparse(metastore_uri)
    with hmsclient.HMSClient(host=url.hostname, port=url.port) as client:
        client.append_partition(DB, table, values)


def hive_name(metastore: HiveMetastore, table: str) -> str:
    """The table's one partition, named by the metastore itself."""
    (name,) = metastore.list_partitions(DB, table)
    return name


def hive_reader(metastore: HiveMetastore, table: str, partition: str) -> tuple[int, int]:
    """A query's SHARED_READ lock on one partition, as Hive's DbTxnManager requests it: inside a
    transaction, the partition's escaped name, operation SELECT. Returns (txn id, lock id)."""
    txn = metastore.open_txn()
    component = LockRequestComponent(DB, table, partition, lock_type=LockType.SHARED_READ, operation=Operation.SELECT)
    result = metastore.lock([component], txn_id=txn)
    assert result.acquired, result
    return txn, result.lock_id


@pytest.mark.parametrize("value", list(VALUES.values()), ids=list(VALUES))
def test_a_hive_reader_of_a_partition_is_in_the_lock_snapshot_however_the_operator_spells_it(
    metastore: HiveMetastore, metastore_uri: str, unique_name: str, value: str
) -> None:
    new_table(metastore, unique_name, partitioned_by=[("city", "string")])
    add_partition_as_hive(metastore_uri, unique_name, [value])
    name = hive_name(metastore, unique_name)
    location = metastore.get_table(DB, unique_name, name).location
    txn, lock_id = hive_reader(metastore, unique_name, name)
    try:
        spellings = {f"city={value}", f"CITY={value}", name}  # as typed, key in capitals, Hive's name
        for spelling in sorted(spellings):
            info = lookup_table(metastore, f"{DB}.{unique_name}", spelling)
            assert (info.partition, info.location) == (name, location), spelling
            resolved = lock_snapshot(metastore, DB, unique_name, info.partition)
            assert [entry.lock_id for entry in resolved] == [lock_id], spelling
            # The snapshot does not depend on the resolution: the operator's spelling finds it too.
            as_typed = lock_snapshot(metastore, DB, unique_name, spelling)
            assert [entry.lock_id for entry in as_typed] == [lock_id], spelling
            # readyToClean with that snapshot: not while the reader holds its lock.
            readiness = ready_to_clean(resolved, metastore.show_locks(DB, unique_name))
            assert not readiness.ready and [e.lock_id for e in readiness.locks_held] == [lock_id]
    finally:
        metastore.commit_txn(txn)
    assert ready_to_clean(resolved, metastore.show_locks(DB, unique_name)).ready


def test_a_lock_on_another_partition_stays_out_of_the_snapshot_and_a_table_lock_is_in(
    metastore: HiveMetastore, metastore_uri: str, unique_name: str
) -> None:
    new_table(metastore, unique_name, partitioned_by=[("city", "string")])
    for value in ("St. John's#2", "St. John's#3"):
        add_partition_as_hive(metastore_uri, unique_name, [value])
    mine, other = sorted(metastore.list_partitions(DB, unique_name))
    txn = metastore.open_txn()
    try:
        other_lock = metastore.lock([LockRequestComponent(DB, unique_name, other)], txn_id=txn).lock_id
        table_lock = metastore.lock([LockRequestComponent(DB, unique_name)], txn_id=txn).lock_id
        snapshot = lock_snapshot(
            metastore, DB, unique_name, lookup_table(metastore, f"{DB}.{unique_name}", "city=St. John's#2").partition
        )
        assert [entry.lock_id for entry in snapshot] == [table_lock]
        assert other_lock != table_lock and mine != other
    finally:
        metastore.abort_txn(txn)


def test_a_spelling_that_fits_two_partitions_is_refused_naming_both_and_their_own_names_resolve(
    metastore: HiveMetastore, metastore_uri: str, unique_name: str
) -> None:
    new_table(metastore, unique_name, partitioned_by=[("city", "string")])
    for value in ("xAy", "x%41y"):  # 'city=x%41y' reads as xAy escaped, and as x%41y typed
        add_partition_as_hive(metastore_uri, unique_name, [value])
    table = f"{DB}.{unique_name}"
    with pytest.raises(MetastoreError, match=r"may mean city=x%2541y or city=xAy: give the metastore's name"):
        lookup_table(metastore, table, "city=x%41y")
    assert lookup_table(metastore, table, "city=x%2541y").partition == "city=x%2541y"  # Hive's name wins
    assert lookup_table(metastore, table, "city=xAy").partition == "city=xAy"


# -- the rules against Hive's own Java code (hive-common and hive-metastore 2.3 in the Spark wheel) -----


@given(st.lists(st.text(st.characters(exclude_categories=("Cs",)), max_size=10), min_size=1, max_size=3), st.data())
@hypothesis_settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_escaping_building_and_parsing_names_agree_with_hives_java_code(
    spark: Any, values: list[str], data: st.DataObject
) -> None:
    jvm = spark._jvm
    java_files = jvm.org.apache.hadoop.hive.common.FileUtils
    java_warehouse = jvm.org.apache.hadoop.hive.metastore.Warehouse
    keys = [f"k{i}" for i in range(len(values))]
    for value in values:
        assert escape_path_name(value) == java_files.escapePathName(value)
        assert unescape_path_name(value) == java_files.unescapePathName(value)
    name = make_partition_name(keys, values)
    assert name == java_files.makePartName(_java_list(jvm, keys), _java_list(jvm, values))
    java_values = list(java_warehouse.makeValsFromName(name, None))
    assert [value for _, value in parse_partition_name(name)] == java_values
    noise = data.draw(st.text(st.sampled_from("%+-0123456789aAfFgG\uff21\u0661x"), max_size=8))
    assert unescape_path_name(noise) == java_files.unescapePathName(noise)


def _java_list(jvm: Any, items: list[str]) -> Any:
    java = jvm.java.util.ArrayList()
    for item in items:
        java.add(item)
    return java


# -- the whole path: ingest, a Hive reader, the vacuum, the cleaner ----------------------------------


@pytest.fixture
def table_location(metastore: HiveMetastore, unique_name: str) -> Path:
    """The conftest's table, partitioned by two keys (its settings and watcher come with it)."""
    new_table(metastore, unique_name, partitioned_by=[("city", "string"), ("at", "string")])
    return Path(metastore.get_table(DB, unique_name).location.removeprefix("file:"))


def test_the_vacuum_of_a_partition_typed_unescaped_snapshots_a_hive_reader_and_the_cleanup_waits_for_it(
    metastore: HiveMetastore, table_settings: Settings, table_watcher: Watcher, spark: Any, unique_name: str
) -> None:
    settings, watcher = table_settings, table_watcher
    typed = "city=St. John's#2/at=2026-01-01 10:30"
    write(metastore, unique_name, rows=20, commits=3, partition=typed)
    name = hive_name(metastore, unique_name)
    assert name == "city=St. John%27s%232/at=2026-01-01 10%3A30"  # Hive's escaping, from Java
    location = metastore.get_table(DB, unique_name, name).location
    singles = sorted(entry.name for entry in _children(location))
    txn, lock_id = hive_reader(metastore, unique_name, name)
    released = False
    try:
        with running_cleaner(settings):
            result = vacuum(metastore, settings, spark, unique_name, partition=typed)
            assert result.publish is not None and result.publish.published
            event = result.publish.event
            assert (event.partition, event.location) == (name, location)
            assert [entry.lock_id for entry in event.lock_snapshot] == [lock_id]
            watcher.wait_for(lambda: len(watcher.delays(event)) >= 2, 30, "the cleanup waiting for the reader")
            assert watcher.done(event) == []
            assert set(singles) <= {entry.name for entry in _children(location)}, "a reader lost a delta"
            metastore.commit_txn(txn)
            released = True
            [done] = watcher.wait_for(lambda: watcher.done(event), 30, "the cleanup after the reader ended")
            assert sorted(d.name for d in done.directories_removed) == singles
    finally:
        if not released:
            metastore.abort_txn(txn)
    assert [entry.name for entry in _children(location)] == list(result.new_directories)
    assert watcher.of("dead_letter") == []


def _children(location: str) -> list[Any]:
    opened = open_location(location)
    return [entry for entry in opened.fs.list_dir(opened.path) if not entry.name.startswith((".", "_"))]
