"""``show_locks``'s thrift rows read into :class:`LockInfo`: every field as the metastore sent it."""

from __future__ import annotations

from hmsclient.genthrift.hive_metastore import ttypes

from acidclean.shared.hms.locks import _hive4_lock_name, _lock_infos
from acidclean.shared.metastore import LockInfo


def row(**fields: object) -> ttypes.ShowLocksResponseElement:
    values: dict[str, object] = {
        "lockid": 41,
        "dbname": "sales",
        "tablename": "orders",
        "partname": None,
        "state": ttypes.LockState.ACQUIRED,
        "type": ttypes.LockType.SHARED_READ,
        "txnid": 7,
        "lastheartbeat": 1_700_000_000_500,
        "acquiredat": 1_700_000_000_000,
        "user": "alice",
        "hostname": "reader-1",
    }
    values.update(fields)
    return ttypes.ShowLocksResponseElement(**values)


def test_each_field_of_a_row_is_read() -> None:
    assert _lock_infos([row()]) == [
        LockInfo(
            41,
            7,
            "sales",
            "orders",
            None,
            "SHARED_READ",
            "ACQUIRED",
            "alice",
            "reader-1",
            1_700_000_000_000,
            1_700_000_000_500,
        )
    ]


def test_missing_fields_read_as_none_or_empty_and_unknown_codes_as_their_numbers() -> None:
    [info] = _lock_infos(
        [row(txnid=None, acquiredat=None, lastheartbeat=0, user=None, hostname=None, state=99, type=98, tablename=None)]
    )
    assert info == LockInfo(41, 0, "sales", None, None, "98", "99", "", "", None, None)


def test_a_waiting_exclusive_lock_keeps_its_state_and_type() -> None:
    [info] = _lock_infos([row(state=ttypes.LockState.WAITING, type=ttypes.LockType.EXCLUSIVE)])
    assert (info.state, info.lock_type) == ("WAITING", "EXCLUSIVE")


def test_a_hive4_partition_name_reads_as_the_client_sent_it_and_other_versions_as_stored() -> None:
    sent = "city=St. John%27s%232"
    stored = _hive4_lock_name(sent)
    assert stored != sent
    assert _lock_infos([row(partname=stored)], hive4=True)[0].partition == sent
    assert _lock_infos([row(partname=stored)])[0].partition == stored


def test_rows_keep_their_order() -> None:
    infos = _lock_infos([row(lockid=number, tablename=f"t{number}") for number in (5, 3, 9)])
    assert [(info.lock_id, info.table) for info in infos] == [(5, "t5"), (3, "t3"), (9, "t9")]
