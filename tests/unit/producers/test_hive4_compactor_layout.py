"""Directories shaped exactly as Hive 4's compactor leaves them, and what the planner and the cleaner's
claim check answer on them, by ``getAcidState``'s rules.

Hive 4's compactor writes ``base_N_vT`` / ``delta_X_Y_vT`` in its own transaction T, with the bucket
files and ``_orc_acid_version`` (``2``), and no ``_metadata_acid``: the ``_vT`` suffix marks its base as
compacted (``CompactorOutputCommitter.commitJob`` writes the version file only; Hive 3.1's compactor
wrote the marker). The bases here carry ``_metadata_acid``
(``{"thisFileVersion":"0","dataFormat":"compacted"}``) all the same, as a base written by Hive 3.1 or by
acidclean's vacuum does: the reader honours it, and it must not change what is obsolete. The
directories are written on the local disk and listed by the real lister (:func:`list_table_dir`),
which reads ``_metadata_acid`` as Hive does.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs
import pytest

from acidclean.producers.plan import CompactionType, pending_cleanup, plan_compaction
from acidclean.shared.acid.claims import verify_claims
from acidclean.shared.acid.id_lists import MetastoreKind, cleaner_ids
from acidclean.shared.acid.state import acid_state
from acidclean.shared.acid.write_ids import ValidTxnList, ValidWriteIdList
from acidclean.shared.orc.reader import list_table_dir

pytestmark = pytest.mark.rule3

HIVE4_METADATA = b'{"thisFileVersion":"0","dataFormat":"compacted"}'
TABLE = "sales.orders"
NONE_OPEN = "9223372036854775807"


def hive4_directory(root: Path, name: str, *, base: bool = False) -> None:
    directory = root / name
    directory.mkdir()
    (directory / "bucket_00000").write_bytes(b"ORC" + name.encode())
    (directory / "_orc_acid_version").write_bytes(b"2")
    if base:
        (directory / "_metadata_acid").write_bytes(HIVE4_METADATA)


def streaming_deltas(root: Path, *write_ids: int) -> list[str]:
    names = []
    for write_id in write_ids:
        name = f"delta_{write_id:07d}_{write_id:07d}_0000"
        hive4_directory(root, name)
        names.append(name)
    return names


def write_ids(high: int, open_ids: str = "") -> str:
    minimum = open_ids.split(",")[0] if open_ids else NONE_OPEN
    return f"{TABLE}:{high}:{minimum}:{open_ids}:"


def txns(high: int, open_txns: str = "", aborted: str = "") -> str:
    minimum = open_txns.split(",")[0] if open_txns else NONE_OPEN
    return f"{high}:{minimum}:{open_txns}:{aborted}"


def listing_of(root: Path):  # type: ignore[no-untyped-def]
    return list_table_dir(pafs.LocalFileSystem(), str(root))


def test_a_committed_hive_base_is_read_and_our_vacuum_claims_only_what_its_own_output_covers(tmp_path: Path) -> None:
    older = streaming_deltas(tmp_path, 1, 2, 3)
    hive4_directory(tmp_path, "base_0000003_v0000010", base=True)  # Hive's major compaction, T=10 committed
    newer = streaming_deltas(tmp_path, 4, 5)
    listing = listing_of(tmp_path)
    assert listing.data_formats == {"base_0000003_v0000010": "compacted"}
    state = acid_state(listing, ValidWriteIdList.from_string(write_ids(5)), ValidTxnList.from_string(txns(12)))
    assert state.base is not None and state.base.name == "base_0000003_v0000010"
    assert sorted(state.obsolete) == older  # Hive's cleanup owns these

    plan = plan_compaction(
        listing, write_ids(5), MetastoreKind.HIVE3, CompactionType.MINOR, table=TABLE, valid_txns_text=txns(12)
    )
    assert plan.targets == ("delta_0000004_0000005",)
    assert sorted(plan.obsolete_after) == newer  # not Hive's: only what our delta supersedes
    assert sorted(pending_cleanup(listing, write_ids(5), MetastoreKind.HIVE3, valid_txns_text=txns(12))) == older


def test_an_open_hive_compaction_is_invisible_and_an_aborted_one_is_claimed_as_aborted(tmp_path: Path) -> None:
    singles = streaming_deltas(tmp_path, 1, 2, 3, 4)
    hive4_directory(tmp_path, "base_0000004_v0000011", base=True)  # T=11 still open
    hive4_directory(tmp_path, "delta_0000001_0000002_v0000009")  # T=9 aborted
    listing = listing_of(tmp_path)
    open_11 = txns(12, "11", "9")
    state = acid_state(listing, ValidWriteIdList.from_string(write_ids(4)), ValidTxnList.from_string(open_11))
    assert state.base is None and [d.name for d in state.deltas] == singles
    assert state.aborted == ("delta_0000001_0000002_v0000009",)

    plan = plan_compaction(
        listing, write_ids(4), MetastoreKind.HIVE3, CompactionType.MAJOR, table=TABLE, valid_txns_text=open_11
    )
    assert plan.targets == ("base_0000004",)
    # Our base supersedes the singles and the aborted directory; never Hive's open base.
    assert sorted(plan.obsolete_after) == sorted([*singles, "delta_0000001_0000002_v0000009"])
    assert "base_0000004_v0000011" not in plan.obsolete_after


def test_two_compactions_of_one_range_read_the_higher_visibility_and_the_other_is_obsolete(tmp_path: Path) -> None:
    """HIVE-29210: a duplicate compaction job left two delta_1_3 with different T; both committed."""
    streaming_deltas(tmp_path, 1, 2, 3)
    hive4_directory(tmp_path, "delta_0000001_0000003_v0000008")
    hive4_directory(tmp_path, "delta_0000001_0000003_v0000009")
    state = acid_state(
        listing_of(tmp_path), ValidWriteIdList.from_string(write_ids(3)), ValidTxnList.from_string(txns(10))
    )
    assert [d.name for d in state.deltas] == ["delta_0000001_0000003_v0000009"]
    assert "delta_0000001_0000003_v0000008" in state.obsolete


def test_the_cleaner_refuses_a_claim_on_hive_output_and_waits_for_its_own_open_transaction(tmp_path: Path) -> None:
    streaming_deltas(tmp_path, 1, 2)
    hive4_directory(tmp_path, "base_0000002_v0000007", base=True)  # Hive's, committed
    streaming_deltas(tmp_path, 3, 4)
    hive4_directory(tmp_path, "delta_0000003_0000004_v0000012")  # ours, committed through T=12
    listing = listing_of(tmp_path)
    ids = cleaner_ids(MetastoreKind.HIVE3, write_ids(4), 4).valid_ids()
    committed = ValidTxnList.from_string(txns(13))
    own = ["delta_0000003_0000004_v0000012"]
    fine = verify_claims(own, ["delta_0000003_0000003_0000", "delta_0000004_0000004_0000"], listing, ids, committed, 4)
    assert fine.deletable == ("delta_0000003_0000003_0000", "delta_0000004_0000004_0000")
    greedy = verify_claims(own, ["delta_0000001_0000001_0000"], listing, ids, committed, 4)  # Hive's to clean
    assert greedy.refused is not None and not greedy.deletable
    still_open = verify_claims(
        own, ["delta_0000003_0000003_0000"], listing, ids, ValidTxnList.from_string(txns(13, "12")), 4
    )
    assert still_open.waiting is not None and "transaction 12" in still_open.waiting
