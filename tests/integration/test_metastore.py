"""The metastore adapter against a real Hive Metastore (hive2 by default; hive3 or hive4 with
ACIDCLEAN_TEST_METASTORE)."""

from __future__ import annotations

import pytest

from acidclean.shared.errors import MetastoreError, TableNotFoundError
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.metastore import LockRequestComponent, LockType, MetastoreKind, Operation

pytestmark = [pytest.mark.integration, pytest.mark.metastore]


@pytest.fixture
def table(metastore: HiveMetastore, unique_name: str) -> tuple[str, str]:
    metastore.create_database("adapter")
    metastore.create_transactional_table("adapter", unique_name, [("id", "int"), ("v", "string")], buckets=2)
    return "adapter", unique_name


def test_detects_the_metastore_generation_it_talks_to(metastore: HiveMetastore, metastore_flavour: str) -> None:
    # Hive 4 is "Hive 3+" to acidclean: per-table write ids, the same calls (the adapter hides the rest).
    expected = {"hive2": MetastoreKind.HIVE2, "hive3": MetastoreKind.HIVE3, "hive4": MetastoreKind.HIVE3}[
        metastore_flavour
    ]
    assert metastore.kind is expected
    assert expected.value.replace("hive", "Hive ") in metastore.describe()


def test_transactional_table_reports_location_buckets_and_properties(
    metastore: HiveMetastore, table: tuple[str, str]
) -> None:
    info = metastore.get_table(*table)
    assert info.transactional
    assert info.bucket_count == 2
    assert info.orc_compress == "ZLIB"
    assert info.location.endswith(f"adapter.db/{table[1]}")


def test_shared_read_lock_is_listed_until_unlocked(metastore: HiveMetastore, table: tuple[str, str]) -> None:
    db, name = table
    result = metastore.lock([LockRequestComponent(db, name, operation=Operation.NO_TXN, transactional=False)])
    assert result.acquired
    locks = metastore.show_locks(db, name)
    assert [(lock.lock_id, lock.lock_type, lock.state) for lock in locks] == [
        (result.lock_id, "SHARED_READ", "ACQUIRED")
    ]
    metastore.unlock(result.lock_id)
    assert metastore.show_locks(db, name) == []


def test_committing_a_transaction_releases_its_locks(metastore: HiveMetastore, table: tuple[str, str]) -> None:
    db, name = table
    txn = metastore.open_txn()
    result = metastore.lock([LockRequestComponent(db, name, lock_type=LockType.SHARED_READ)], txn_id=txn)
    assert result.acquired
    (held,) = metastore.show_locks(db, name)
    assert held.txn_id == txn and held.user == metastore.user and held.acquired_at_ms
    metastore.commit_txn(txn)
    assert metastore.show_locks(db, name) == []


def test_partition_lock_is_filtered_by_partition(metastore: HiveMetastore, unique_name: str) -> None:
    metastore.create_database("adapter")
    metastore.create_transactional_table("adapter", unique_name, [("id", "int")], partition_keys=[("ds", "string")])
    for day in ("2026-01-01", "2026-01-02"):
        metastore.add_partition("adapter", unique_name, f"ds={day}")
    txn = metastore.open_txn()
    metastore.lock([LockRequestComponent("adapter", unique_name, "ds=2026-01-01")], txn_id=txn)
    try:
        assert len(metastore.show_locks("adapter", unique_name, "ds=2026-01-01")) == 1
        assert metastore.show_locks("adapter", unique_name, "ds=2026-01-02") == []
    finally:
        metastore.abort_txn(txn)
    assert metastore.show_locks("adapter", unique_name, "ds=2026-01-01") == []


def test_write_ids_and_valid_id_list_track_open_and_aborted_transactions(
    metastore: HiveMetastore, table: tuple[str, str]
) -> None:
    db, name = table
    first, second = metastore.open_txn(), metastore.open_txn()
    first_id = metastore.allocate_write_id(first, db, name)
    second_id = metastore.allocate_write_id(second, db, name)
    if metastore.kind is MetastoreKind.HIVE3:
        assert (first_id, second_id) == (1, 2)  # per-table write ids start at 1
    else:
        assert (first_id, second_id) == (first, second)  # Hive 2 names deltas by transaction id
    metastore.commit_txn(first)
    metastore.abort_txn(second)
    table_name, hwm, _min_open, open_ids, aborted_ids = metastore.valid_write_ids(db, name).split(":")
    assert table_name == f"{db}.{name}"
    assert int(hwm) >= second_id
    assert str(second_id) in aborted_ids.split(",")
    assert str(first_id) not in open_ids.split(",") + aborted_ids.split(",")


def test_tables_and_write_ids_asked_together_equal_those_asked_one_by_one(
    metastore: HiveMetastore, unique_name: str
) -> None:
    """What the cleaner asks once per batch (one call per database, one for the write ids) is what it
    would have asked per table; a table that does not exist is absent, not an error."""
    metastore.create_database("adapter")
    names = [f"{unique_name}b{i}" for i in range(3)]
    for name in names:
        metastore.create_transactional_table("adapter", name, [("id", "int")], buckets=1)
    txn = metastore.open_txn()
    write_id = metastore.allocate_write_id(txn, "adapter", names[1])
    metastore.abort_txn(txn)
    together = metastore.get_tables("adapter", [*names, f"{unique_name}missing"])
    assert sorted(together) == sorted(names)
    assert all(together[name] == metastore.get_table("adapter", name) for name in names)
    txn_list = metastore.valid_txn_list()
    texts = metastore.valid_write_ids_of([("adapter", name) for name in names], txn_list)
    assert texts == [metastore.valid_write_ids("adapter", name) for name in names]
    assert str(write_id) in texts[1].split(":")[4].split(",")
    if metastore.kind is MetastoreKind.HIVE3:
        assert texts[0].split(":")[4] == ""  # write ids are per table; Hive 2's lists are the transactions'


def test_a_partition_narrowed_from_a_table_asked_together_is_what_get_table_answers(
    metastore: HiveMetastore, unique_name: str
) -> None:
    metastore.create_database("adapter")
    metastore.create_transactional_table(
        "adapter", unique_name, [("id", "int")], buckets=1, partition_keys=[("city", "string")]
    )
    metastore.add_partition("adapter", unique_name, "city=St. John's")
    [table] = metastore.get_tables("adapter", [unique_name]).values()
    for spelling in ("city=St. John's", "city=St. John%27s"):
        assert metastore.partition_info(table, spelling) == metastore.get_table("adapter", unique_name, spelling)
    assert metastore.partition_info(table, None) == table
    with pytest.raises(TableNotFoundError):
        metastore.partition_info(table, "city=nowhere")


def test_heartbeat_keeps_a_transaction_open(metastore: HiveMetastore) -> None:
    txn = metastore.open_txn()
    metastore.heartbeat(txn_id=txn)
    metastore.abort_txn(txn)
    with pytest.raises(MetastoreError):
        metastore.heartbeat(txn_id=txn)  # an aborted transaction cannot be heartbeaten


def test_unknown_table_is_a_table_not_found_error(metastore: HiveMetastore) -> None:
    with pytest.raises(TableNotFoundError, match="nosuchtable"):
        metastore.get_table("adapter", "nosuchtable")


def test_unreachable_metastore_error_names_the_uri() -> None:
    from acidclean.deploy.local.process import free_port

    port = free_port()
    with pytest.raises(MetastoreError, match=f"thrift://127.0.0.1:{port}.*hive.metastore.uris"):
        HiveMetastore(f"thrift://127.0.0.1:{port}", timeout_s=1).get_all_databases()
