"""The vacuum's commit without a rename: which commit a location gets, and a plan committed through T."""

from __future__ import annotations

import pytest

from acidclean.producers.commit_mode import CommitMode, choose_commit_mode
from acidclean.producers.plan import CompactionType, plan_compaction, with_visibility_txn
from acidclean.shared.acid.id_lists import MetastoreKind
from acidclean.shared.acid.state import Listing, acid_state
from acidclean.shared.acid.write_ids import ValidTxnList, ValidWriteIdList
from acidclean.shared.errors import VacuumRefusedError

S3 = "s3a://bucket/warehouse/sales.db/orders"
HDFS = "hdfs://nn:8020/warehouse/sales.db/orders"


@pytest.mark.parametrize(
    ("setting", "scheme", "location", "expected"),
    [
        ("auto", "s3", S3, CommitMode.VISIBILITY_TXN),
        ("auto", "hdfs", HDFS, CommitMode.RENAME),
        ("auto", "file", "/tmp/t", CommitMode.RENAME),
        ("visibility-txn", "hdfs", HDFS, CommitMode.VISIBILITY_TXN),
        ("rename", "file", "/tmp/t", CommitMode.RENAME),
        ("auto", "abfss", "abfss://c@a.dfs.core.windows.net/t", CommitMode.VISIBILITY_TXN),
    ],
)
def test_auto_commits_through_a_transaction_only_on_object_stores_behind_hive4(
    setting: str, scheme: str, location: str, expected: CommitMode
) -> None:
    assert choose_commit_mode(setting, MetastoreKind.HIVE3, scheme, location, hive_version=4) is expected


@pytest.mark.rule10
@pytest.mark.parametrize("hive_version", [3, None])
def test_auto_never_writes_v_t_behind_a_hive3_metastore(hive_version: int | None) -> None:
    assert choose_commit_mode("auto", MetastoreKind.HIVE3, "hdfs", HDFS, hive_version=hive_version) is CommitMode.RENAME
    with pytest.raises(VacuumRefusedError) as refused:
        choose_commit_mode("auto", MetastoreKind.HIVE3, "s3", S3, hive_version=hive_version)
    message = str(refused.value)
    assert "\n" not in message and "NumberFormatException" in message
    assert "vacuum_commit=visibility-txn and vacuum_visibility_txn_on_hive3=true" in message
    # Not even with the acknowledgement: auto never chooses _vT behind Hive 3; only an explicit choice does.
    with pytest.raises(VacuumRefusedError):
        choose_commit_mode("auto", MetastoreKind.HIVE3, "s3", S3, hive_version=3, v_readers_acknowledged=True)


@pytest.mark.rule10
def test_an_explicit_transaction_commit_behind_hive3_needs_the_acknowledgement() -> None:
    with pytest.raises(VacuumRefusedError, match="vacuum_visibility_txn_on_hive3=true only if every reader"):
        choose_commit_mode("visibility-txn", MetastoreKind.HIVE3, "s3", S3, hive_version=3)
    with pytest.raises(VacuumRefusedError, match="Hive 3's readers cannot parse"):
        choose_commit_mode("visibility-txn", MetastoreKind.HIVE3, "hdfs", HDFS, hive_version=3)
    acknowledged = choose_commit_mode(
        "visibility-txn", MetastoreKind.HIVE3, "s3", S3, hive_version=3, v_readers_acknowledged=True
    )
    assert acknowledged is CommitMode.VISIBILITY_TXN


def test_an_object_store_behind_a_hive2_metastore_is_refused_rather_than_risk_a_torn_base() -> None:
    with pytest.raises(VacuumRefusedError, match=r"object store.*Hive 2 metastore has no per-table write ids"):
        choose_commit_mode("auto", MetastoreKind.HIVE2, "s3", S3)


def test_rename_on_an_object_store_is_refused_even_when_asked_for() -> None:
    with pytest.raises(VacuumRefusedError, match="copy of every object and then a delete"):
        choose_commit_mode("rename", MetastoreKind.HIVE3, "s3", S3, hive_version=4)


def test_a_transaction_commit_asked_for_on_hive2_is_refused() -> None:
    with pytest.raises(VacuumRefusedError, match="visibility-txn was asked for"):
        choose_commit_mode("visibility-txn", MetastoreKind.HIVE2, "hdfs", HDFS, v_readers_acknowledged=True)


def test_as_committed_makes_only_that_transaction_valid() -> None:
    txns = ValidTxnList.from_string("12:8:8,12:5")
    committed = txns.as_committed(12)
    assert committed.is_txn_valid(12)
    assert not committed.is_txn_valid(8) and committed.is_txn_aborted(5)
    later = ValidTxnList.from_string("10:9223372036854775807::").as_committed(14)
    assert later.is_txn_valid(14) and not any(later.is_txn_valid(t) for t in (11, 12, 13))
    with pytest.raises(ValueError, match="aborted"):
        txns.as_committed(5)


def _listing(*names: str) -> Listing:
    return Listing.from_paths([f"{n}/bucket_00000" for n in names], location="/t")


def test_a_plan_committed_through_t_names_its_output_v_t_and_claims_what_it_will_supersede() -> None:
    deltas = ("delta_0000001_0000001_0000", "delta_0000002_0000002_0000", "delete_delta_0000002_0000002_0000")
    ids = "sales.orders:2:9223372036854775807::"
    plan = plan_compaction(
        _listing(*deltas),
        ids,
        MetastoreKind.HIVE3,
        CompactionType.MINOR,
        table="sales.orders",
        valid_txns_text="20:9223372036854775807::",
    )
    assert plan.targets == ("delete_delta_0000001_0000002", "delta_0000001_0000002")
    txn_plan = with_visibility_txn(plan, 21, "21:21:21:")
    assert txn_plan.targets == ("delete_delta_0000001_0000002_v0000021", "delta_0000001_0000002_v0000021")
    assert txn_plan.obsolete_after == plan.obsolete_after == tuple(sorted(deltas))
    # While T is open a reader skips the output and still reads the single deltas ...
    open_view = acid_state(
        _listing(*deltas, *txn_plan.targets), ValidWriteIdList.from_string(ids), ValidTxnList.from_string("21:21:21:")
    )
    assert set(open_view.current_directories) == set(deltas)
    # ... and once T committed it reads only the vacuum's output.
    committed_view = acid_state(
        _listing(*deltas, *txn_plan.targets),
        ValidWriteIdList.from_string(ids),
        ValidTxnList.from_string("21:9223372036854775807::"),
    )
    assert set(committed_view.current_directories) == set(txn_plan.targets)
