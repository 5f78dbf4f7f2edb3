"""Hive's own getAcidState scenarios (TestAcidUtils), restated with the results Hive asserts.

Paths are Hive's mock files relative to ``mock:/tbl/part1``. Where Hive asserts an order, so do we;
where it asserts a set, so do we. ``testBestBase`` exists in the stored Hive sources only in its
Hive 2 form (transaction-id lists, every base treated as a compactor's), so it is restated with
:class:`ValidTxnList`; the Hive 4 difference for the min open write id is tested beside it.
"""

from __future__ import annotations

import pytest

from acidclean.shared.acid import (
    AcidState,
    Listing,
    ValidCompactorWriteIdList,
    ValidIdList,
    ValidTxnList,
    ValidWriteIdList,
    acid_state,
)
from acidclean.shared.acid.names import LONG_MAX, LONG_MIN
from acidclean.shared.errors import NotEnoughHistoryError

MAX = str(LONG_MAX)


def state(paths: list[str], valid_ids: ValidIdList, **formats: str) -> AcidState:
    return acid_state(Listing.from_paths(paths, data_formats=formats, location="mock:/tbl/part1"), valid_ids)


def reader(text: str) -> ValidWriteIdList:
    return ValidWriteIdList.from_string(text)


def names(state_: AcidState) -> list[str]:
    return [d.name for d in state_.deltas]


def test_original_files_only() -> None:  # testOriginal
    result = state(
        [
            "000000_0",
            "000000_0_copy_1",
            "000000_0_copy_2",
            "000001_1",
            "000002_0",
            "random",
            "_done",
            "subdir/000000_0",
        ],
        reader("tbl:100:" + MAX + ":"),
    )
    assert result.base is None
    assert result.deltas == () and result.obsolete == ()
    assert [f.path for f in result.original_files] == [
        "000000_0",
        "000000_0_copy_1",
        "000000_0_copy_2",
        "000001_1",
        "000002_0",
        "random",
        "subdir/000000_0",
    ]


def test_originals_plus_deltas() -> None:  # testOriginalDeltas
    result = state(
        [
            "000000_0",
            "000001_1",
            "000002_0",
            "random",
            "_done",
            "subdir/000000_0",
            "delta_025_025/bucket_0",
            "delta_029_029/bucket_0",
            "delta_025_030/bucket_0",
            "delta_050_100/bucket_0",
            "delta_101_101/bucket_0",
        ],
        reader("tbl:100:" + MAX + ":"),
    )
    assert result.base is None
    assert list(result.obsolete) == ["delta_025_025", "delta_029_029"]
    assert [f.path for f in result.original_files] == ["000000_0", "000001_1", "000002_0", "random", "subdir/000000_0"]
    assert [(d.name, d.min_write_id, d.max_write_id) for d in result.deltas] == [
        ("delta_025_030", 25, 30),
        ("delta_050_100", 50, 100),
    ]


def test_base_and_deltas() -> None:  # testBaseDeltas
    result = state(
        [
            "base_5/bucket_0",
            "base_10/bucket_0",
            "base_49/bucket_0",
            "delta_025_025/bucket_0",
            "delta_029_029/bucket_0",
            "delta_025_030/bucket_0",
            "delta_050_105/bucket_0",
            "delta_90_120/bucket_0",
        ],
        reader("tbl:100:" + MAX + ":"),
    )
    assert result.base is not None and result.base.name == "base_49"
    # Hive 4 asserts the set; Hive 2 asserted this exact order (bases as HDFS lists them, then deltas).
    assert list(result.obsolete) == ["base_10", "base_5", "delta_025_030", "delta_025_025", "delta_029_029"]
    assert result.original_files == ()
    assert [(d.name, d.min_write_id, d.max_write_id) for d in result.deltas] == [("delta_050_105", 50, 105)]


def test_base_found_with_a_side_file_and_an_all_valid_list() -> None:  # testRecursiveDirListingIsReused...
    result = state(["base_0/bucket_0", "base_0/_orc_acid_version"], ValidWriteIdList.all_committed())
    assert result.base is not None and result.base.name == "base_0"
    assert result.obsolete == () and result.original_files == () and result.deltas == ()


def test_originals_are_obsolete_once_there_is_a_base() -> None:  # testObsoleteOriginals
    result = state(["base_10/bucket_0", "base_5/bucket_0", "000000_0", "000001_1"], reader("tbl:150:" + MAX + ":"))
    assert len(result.obsolete) == 3
    assert result.obsolete[0] == "base_5"
    assert set(result.obsolete) == {"base_5", "000000_0", "000001_1"}
    assert result.base is not None and result.base.name == "base_10"
    assert result.original_files == ()


def test_overlapping_deltas() -> None:  # testOverlapingDelta
    result = state(
        [
            "delta_0000063_63/bucket_0",
            "delta_000062_62/bucket_0",
            "delta_00061_61/bucket_0",
            "delta_40_60/bucket_0",
            "delta_0060_60/bucket_0",
            "delta_052_55/bucket_0",
            "base_50/bucket_0",
        ],
        reader("tbl:100:" + MAX + ":"),
    )
    assert result.base is not None and result.base.name == "base_50"
    assert list(result.obsolete) == ["delta_052_55", "delta_0060_60"]
    assert names(result) == ["delta_40_60", "delta_00061_61", "delta_000062_62", "delta_0000063_63"]


def test_overlapping_deltas_with_statement_ids() -> None:  # testOverlapingDelta2
    result = state(
        [
            "delta_0000063_63_0/bucket_0",
            "delta_000062_62_0/bucket_0",
            "delta_000062_62_3/bucket_0",
            "delta_00061_61_0/bucket_0",
            "delta_40_60/bucket_0",
            "delta_0060_60_1/bucket_0",
            "delta_0060_60_4/bucket_0",
            "delta_0060_60_7/bucket_0",
            "delta_052_55/bucket_0",
            "delta_058_58/bucket_0",
            "base_50/bucket_0",
        ],
        reader("tbl:100:" + MAX + ":"),
    )
    assert result.base is not None and result.base.name == "base_50"
    assert list(result.obsolete) == [
        "delta_052_55",
        "delta_058_58",
        "delta_0060_60_1",
        "delta_0060_60_4",
        "delta_0060_60_7",
    ]
    assert names(result) == [
        "delta_40_60",
        "delta_00061_61_0",
        "delta_000062_62_0",
        "delta_000062_62_3",
        "delta_0000063_63_0",
    ]


def test_open_write_id_in_the_reader_list_keeps_a_partly_open_delta() -> None:  # deltasWithOpenTxnInRead
    result = state(["delta_1_1/bucket_0", "delta_2_5/bucket_0"], reader("tbl:100:4:4"))
    assert names(result) == ["delta_1_1", "delta_2_5"]


def test_open_write_id_in_the_reader_list_skips_deltas_of_only_that_id() -> None:  # deltasWithOpenTxnInRead2
    result = state(
        [
            "delta_1_1/bucket_0",
            "delta_2_5/bucket_0",
            "delta_4_4_1/bucket_0",
            "delta_4_4_3/bucket_0",
            "delta_101_101_1/bucket_0",
        ],
        reader("tbl:100:4:4"),
    )
    assert names(result) == ["delta_1_1", "delta_2_5"]
    assert result.obsolete == ()


def test_compactor_list_skips_deltas_with_unresolved_ids() -> None:  # deltasWithOpenTxnsNotInCompact
    result = state(["delta_1_1/bucket_0", "delta_2_5/bucket_0"], ValidCompactorWriteIdList.from_string("tbl:4:" + MAX))
    assert names(result) == ["delta_1_1"]


def test_compactor_list_skips_a_streaming_delta_with_a_flush_length_file() -> None:  # ...NotInCompact2
    result = state(
        [
            "delta_1_1/bucket_0",
            "delta_2_5/bucket_0",
            "delta_2_5/bucket_0_flush_length",
            "delta_6_10/bucket_0",
        ],
        ValidCompactorWriteIdList.from_string("tbl:3:" + MAX),
    )
    assert names(result) == ["delta_1_1"]


def test_base_with_delete_deltas() -> None:  # testBaseWithDeleteDeltas
    result = state(
        [
            "base_5/bucket_0",
            "base_10/bucket_0",
            "base_49/bucket_0",
            "delta_025_025/bucket_0",
            "delta_029_029/bucket_0",
            "delete_delta_029_029/bucket_0",
            "delta_025_030/bucket_0",
            "delete_delta_025_030/bucket_0",
            "delta_050_105/bucket_0",
            "delete_delta_050_105/bucket_0",
            "delete_delta_110_110/bucket_0",
        ],
        reader("tbl:100:" + MAX + ":"),
    )
    assert result.base is not None and result.base.name == "base_49"
    assert len(result.obsolete) == 7
    assert set(result.obsolete) == {
        "base_5",
        "base_10",
        "delete_delta_025_030",
        "delta_025_030",
        "delta_025_025",
        "delete_delta_029_029",
        "delta_029_029",
    }
    assert result.original_files == ()
    # delete_delta_110_110 is above the high watermark: not read.
    assert names(result) == ["delete_delta_050_105", "delta_050_105"]
    assert [d.name for d in result.delete_deltas] == ["delete_delta_050_105"]


def test_overlapping_delta_and_delete_delta() -> None:  # testOverlapingDeltaAndDeleteDelta
    result = state(
        [
            "delta_0000063_63/bucket_0",
            "delta_000062_62/bucket_0",
            "delta_00061_61/bucket_0",
            "delete_delta_00064_64/bucket_0",
            "delta_40_60/bucket_0",
            "delete_delta_40_60/bucket_0",
            "delta_0060_60/bucket_0",
            "delta_052_55/bucket_0",
            "delete_delta_052_55/bucket_0",
            "base_50/bucket_0",
        ],
        reader("tbl:100:" + MAX + ":"),
    )
    assert result.base is not None and result.base.name == "base_50"
    assert list(result.obsolete) == ["delete_delta_052_55", "delta_052_55", "delta_0060_60"]
    assert names(result) == [
        "delete_delta_40_60",
        "delta_40_60",
        "delta_00061_61",
        "delta_000062_62",
        "delta_0000063_63",
        "delete_delta_00064_64",
    ]


def test_minor_compacted_delta_makes_an_inner_delete_delta_obsolete() -> None:
    # testMinorCompactedDeltaMakesInBetweenDelteDeltaObsolete
    result = state(["delta_40_60/bucket_0", "delete_delta_50_50/bucket_0"], reader("tbl:100:" + MAX + ":"))
    assert list(result.obsolete) == ["delete_delta_50_50"]
    assert names(result) == ["delta_40_60"]


def test_compactor_list_with_deltas_and_delete_deltas() -> None:  # deltasAndDeleteDeltasWithOpenTxnsNotInCompact
    result = state(
        [
            "delta_1_1/bucket_0",
            "delete_delta_2_2/bucket_0",
            "delta_2_5/bucket_0",
            "delete_delta_2_5/bucket_0",
            "delta_2_5/bucket_0_flush_length",
            "delete_delta_7_7/bucket_0",
            "delta_6_10/bucket_0",
        ],
        ValidCompactorWriteIdList.from_string("tbl:4:" + MAX + ":"),
    )
    assert names(result) == ["delta_1_1", "delete_delta_2_2"]


def test_delete_deltas_with_an_open_write_id_in_the_reader_list() -> None:  # deleteDeltasWithOpenTxnInRead
    result = state(
        [
            "delta_1_1/bucket_0",
            "delta_2_5/bucket_0",
            "delete_delta_2_5/bucket_0",
            "delete_delta_3_3/bucket_0",
            "delta_4_4_1/bucket_0",
            "delta_4_4_3/bucket_0",
            "delta_101_101_1/bucket_0",
        ],
        reader("tbl:100:4:4"),
    )
    # delete_delta_3_3 is not read when the minor-compacted [delete_]delta_2_5 is present.
    assert names(result) == ["delta_1_1", "delete_delta_2_5", "delta_2_5"]


BEST_BASE = [
    "base_5/bucket_0",
    "base_10/bucket_0",
    "base_25/bucket_0",
    "delta_98_100/bucket_0",
    "base_100/bucket_0",
    "delta_120_130/bucket_0",
    "base_200/bucket_0",
]


def test_best_base_is_the_newest_valid_one() -> None:  # testBestBase (Hive 2), first part
    result = state(BEST_BASE, ValidTxnList.from_string("150:" + MAX + ":"))
    assert result.base is not None and result.base.name == "base_100"
    assert names(result) == ["delta_120_130"]
    assert list(result.obsolete) == ["base_10", "base_25", "base_5", "delta_98_100"]
    assert result.original_files == ()


def test_best_base_at_a_low_watermark_ignores_newer_bases_without_calling_them_obsolete() -> None:
    result = state(BEST_BASE, ValidTxnList.from_string("10:" + MAX + ":"))
    assert result.base is not None and result.base.name == "base_10"
    assert result.deltas == ()
    assert list(result.obsolete) == ["base_5"]


def test_best_base_with_a_min_open_id_above_it() -> None:  # "150:121:99:121"
    result = state(BEST_BASE, ValidTxnList.from_string("150:121:99:121"))
    assert result.base is not None and result.base.name == "base_100"
    assert names(result) == ["delta_120_130"]
    assert list(result.obsolete) == ["base_10", "base_25", "base_5", "delta_98_100"]


@pytest.mark.parametrize(
    ("paths", "snapshot", "message"),
    [
        (
            BEST_BASE,
            "125:5:5",
            "Not enough history available for (125,5).  Oldest available base: mock:/tbl/part1/base_5",
        ),
        (
            ["delta_1_10/bucket_0", "delta_12_25/bucket_0", "base_25/bucket_0", "base_100/bucket_0"],
            "150:7:7",
            "Not enough history available for (150,7).  Oldest available base: mock:/tbl/part1/base_25",
        ),
        (
            ["delta_2_10/bucket_0", "base_25/bucket_0", "base_100/bucket_0"],
            "150:7:7",
            "Not enough history available for (150,7).  Oldest available base: mock:/tbl/part1/base_25",
        ),
    ],
)
def test_not_enough_history_when_no_base_is_usable(paths: list[str], snapshot: str, message: str) -> None:
    with pytest.raises(NotEnoughHistoryError) as raised:
        state(paths, ValidTxnList.from_string(snapshot))
    assert str(raised.value) == message


def test_converted_table_base_of_long_min_is_always_valid() -> None:  # testBestBase, last part
    result = state(
        [f"base_{LONG_MIN}/bucket_0", "delta_1_1/bucket_0", "base_100/bucket_0"],
        ValidTxnList.from_string("1:" + MAX + ":"),
    )
    assert result.base is not None and result.base.name == f"base_{LONG_MIN}"
    assert names(result) == ["delta_1_1"]
    assert result.obsolete == ()


def test_hive4_base_at_the_min_open_write_id_is_valid_where_hive2_had_not_enough_history() -> None:
    # Hive 4's isValidBase accepts a base whose id is <= the min open write id; Hive 2 (above) did not.
    compacted = {name: "compacted" for name in ("base_5", "base_10", "base_25", "base_100", "base_200")}
    result = state(BEST_BASE, ValidWriteIdList.from_string("tbl:125:5:5:"), **compacted)
    assert result.base is not None and result.base.name == "base_5"
    assert names(result) == ["delta_98_100", "delta_120_130"]
    with pytest.raises(NotEnoughHistoryError):
        state(BEST_BASE, ValidTxnList.from_string("125:5:5"))


def test_hive4_not_enough_history_needs_a_compacted_oldest_base() -> None:
    # Marked by _metadata_acid (before Hive 4) ...
    with pytest.raises(NotEnoughHistoryError, match=r"\(150,7\)\.  Oldest available base: mock:/tbl/part1/base_25"):
        state(
            ["delta_2_10/bucket_0", "base_25/bucket_0", "base_100/bucket_0"],
            ValidWriteIdList.from_string("tbl:150:7:7:"),
            base_25="compacted",
            base_100="compacted",
        )
    # ... or by the _v suffix.
    with pytest.raises(NotEnoughHistoryError, match="base_25_v30"):
        state(["delta_2_10/", "base_25_v30/", "base_100_v101/"], ValidWriteIdList.from_string("tbl:150:7:7:"))
    # An insert overwrite's base never raises: it is read like a delta once committed.
    result = state(["delta_2_10/", "base_25/", "base_100/"], ValidWriteIdList.from_string("tbl:150:7:7:"))
    assert result.base is not None and result.base.name == "base_100"


def test_duplicate_compactions_of_one_range_read_the_higher_visibility_one() -> None:  # HIVE-29210
    from acidclean.shared.acid import ValidTxnList, ValidWriteIdList, acid_state

    ids = ValidWriteIdList.from_string(f"db.t:5:{LONG_MAX}::")
    names = [
        "delta_0000001_0000001_0000/",
        "delta_0000001_0000003_v0000010/",
        "delta_0000001_0000003_v0000012/",
        "delete_delta_0000001_0000003_v0000010/",
        "delete_delta_0000001_0000003_v0000012/",
        "delta_0000004_0000004_0000/",
    ]
    committed = acid_state(names, ids, ValidTxnList.from_string(f"20:{LONG_MAX}::"))
    assert [d.name for d in committed.deltas] == [
        "delete_delta_0000001_0000003_v0000012",
        "delta_0000001_0000003_v0000012",
        "delta_0000004_0000004_0000",
    ]
    assert set(committed.obsolete) == {
        "delta_0000001_0000001_0000",
        "delta_0000001_0000003_v0000010",
        "delete_delta_0000001_0000003_v0000010",
    }
    # While the second job's transaction is open, the first job's output is read and nothing is obsolete
    # but the single delta.
    second_open = acid_state(names, ids, ValidTxnList.from_string("20:12:12:"))
    assert [d.name for d in second_open.deltas][:2] == [
        "delete_delta_0000001_0000003_v0000010",
        "delta_0000001_0000003_v0000010",
    ]
    assert set(second_open.obsolete) == {"delta_0000001_0000001_0000"}
