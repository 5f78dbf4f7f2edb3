"""getAcidState rules beyond Hive's unit tests: visibility of _vT directories, insert-overwrite
bases, aborted directories, hidden names, and what a cleaner's list may call obsolete."""

from __future__ import annotations

import random

import pytest

from acidclean.shared.acid import (
    AcidState,
    ListedFile,
    Listing,
    ValidCleanerWriteIdList,
    ValidIdList,
    ValidTxnList,
    ValidWriteIdList,
    acid_state,
    obsolete_dirs,
)
from acidclean.shared.errors import AcidLayoutError


def state(
    paths: list[str], valid_ids: ValidIdList, valid_txns: ValidTxnList | None = None, **formats: str
) -> AcidState:
    return acid_state(Listing.from_paths(paths, data_formats=formats), valid_ids, valid_txns)


def deltas(result: AcidState) -> list[str]:
    return [d.name for d in result.deltas]


SINGLES = ["delta_1_1_0000/", "delta_2_2_0000/", "delta_3_3_0000/"]


@pytest.mark.parametrize(
    ("txns", "base", "obsolete", "aborted"),
    [
        ("30:" + "9223372036854775807::", "base_3_v20", SINGLES, []),  # compactor txn 20 committed
        ("30:20:20:", None, [], []),  # still open: invisible, and nothing it covers is obsolete
        ("30:9223372036854775807::20", None, [], ["base_3_v20"]),  # aborted: listed as aborted
    ],
)
def test_visibility_suffix_counts_only_once_its_transaction_committed(
    txns: str, base: str | None, obsolete: list[str], aborted: list[str]
) -> None:
    result = state([*SINGLES, "base_3_v20/"], ValidWriteIdList.from_ids(3), ValidTxnList.from_string(txns))
    assert (result.base.name if result.base else None) == base
    assert sorted(result.obsolete) == sorted(n.rstrip("/") for n in obsolete)
    assert list(result.aborted) == aborted
    if base is None:
        assert deltas(result) == [n.rstrip("/") for n in SINGLES]


def test_minor_compaction_delta_of_an_open_compactor_transaction_is_invisible() -> None:
    txns = ValidTxnList.from_string("30:25:25:")
    result = state([*SINGLES, "delta_1_3_v25/"], ValidWriteIdList.from_ids(3), txns)
    assert deltas(result) == [n.rstrip("/") for n in SINGLES]
    assert result.obsolete == ()


def test_without_a_transaction_list_every_visibility_suffix_counts_as_committed() -> None:
    result = state([*SINGLES, "delta_1_3_v25/"], ValidWriteIdList.from_ids(3))
    assert deltas(result) == ["delta_1_3_v25"]


def test_compactor_base_beats_an_insert_overwrite_base_of_the_same_write_id() -> None:
    result = state(["base_5/", "base_5_v9/", "delta_6_6_0/"], ValidWriteIdList.from_ids(6))
    assert result.base is not None and result.base.name == "base_5_v9"
    assert list(result.obsolete) == ["base_5"]
    assert deltas(result) == ["delta_6_6_0"]


def test_insert_overwrite_base_wins_while_the_compactor_of_the_same_id_is_open() -> None:
    result = state(["base_5/", "base_5_v9/"], ValidWriteIdList.from_ids(6), ValidTxnList.from_string("10:9:9:"))
    assert result.base is not None and result.base.name == "base_5"
    assert result.obsolete == ()


def test_aborted_insert_overwrite_base_is_aborted_not_read() -> None:
    result = state(["delta_1_1_0/", "base_2/"], ValidWriteIdList.from_ids(2, aborted_ids=[2]))
    assert result.base is None
    assert list(result.aborted) == ["base_2"] and result.aborted_write_ids == (2,)
    assert deltas(result) == ["delta_1_1_0"]


def test_open_insert_overwrite_base_is_ignored_without_error_or_obsolescence() -> None:
    result = state(["delta_1_1_0/", "base_3/"], ValidWriteIdList.from_ids(3, open_ids=[2, 3]))
    assert result.base is None and result.obsolete == () and result.aborted == ()
    assert deltas(result) == ["delta_1_1_0"]


def test_any_base_at_or_below_the_min_open_write_id_is_valid_even_an_open_insert_overwrite() -> None:
    # Hive 4's isValidBase checks "id <= minOpenWriteId" before anything else, so an insert overwrite
    # still open at the min open id counts as a valid base. Matched as it is.
    result = state(["delta_1_1_0/", "base_2/"], ValidWriteIdList.from_ids(2, open_ids=[2]))
    assert result.base is not None and result.base.name == "base_2"
    assert list(result.obsolete) == ["delta_1_1_0"]


def test_compacted_base_of_an_aborted_id_is_not_an_aborted_directory() -> None:
    # The compactor's base of ids up to 2 holds 1; the abort of 2 only removed 2's rows.
    result = state(["delta_1_1_0/", "base_2/"], ValidWriteIdList.from_ids(2, aborted_ids=[2]), base_2="compacted")
    assert result.base is not None and result.base.name == "base_2"
    assert result.aborted == ()
    assert list(result.obsolete) == ["delta_1_1_0"]


def test_wholly_aborted_deltas_are_aborted_and_partly_aborted_ones_are_read() -> None:
    result = state(
        ["delta_1_1_0/", "delta_2_2_0/", "delta_3_5/", "delete_delta_2_2_0/"],
        ValidWriteIdList.from_ids(5, aborted_ids=[2, 4]),
    )
    assert sorted(result.aborted) == ["delete_delta_2_2_0", "delta_2_2_0"]
    assert result.aborted_write_ids == (2,)
    assert result.uncompacted_aborts  # delta_3_5 still holds the aborted 4
    assert deltas(result) == ["delta_1_1_0", "delta_3_5"]


def test_deltas_of_only_open_ids_are_neither_read_nor_obsolete_nor_aborted() -> None:
    result = state(["delta_1_1_0/", "delta_2_2_0/"], ValidWriteIdList.from_ids(2, open_ids=[2]))
    assert deltas(result) == ["delta_1_1_0"]
    assert result.obsolete == () and result.aborted == ()


def test_hidden_children_are_never_read_nor_obsolete() -> None:
    result = state(
        [
            "_tmp_0001/bucket_00000",
            ".hive-staging_hive_1/-ext-10000/000000_0",
            "_orc_acid_version",
            "_metadata_acid",
            "base_1/bucket_00000",
            "base_1/_orc_acid_version",
            "000000_0",
        ],
        ValidWriteIdList.from_ids(1),
    )
    assert result.base is not None and result.base.name == "base_1"
    assert list(result.obsolete) == ["000000_0"]


def test_original_files_skip_hidden_path_parts_and_optionally_empty_files() -> None:
    listing = Listing(
        files=(
            ListedFile("000000_0", 10),
            ListedFile("000001_0", 0),
            ListedFile("sub/_tmp/x", 5),
            ListedFile("sub/y", 3),
        ),
    )
    result = acid_state(listing, ValidWriteIdList.from_ids(1))
    assert [f.path for f in result.original_files] == ["000000_0", "000001_0", "sub/y"]
    result = acid_state(listing, ValidWriteIdList.from_ids(1), ignore_empty_files=True)
    assert [f.path for f in result.original_files] == ["000000_0", "sub/y"]


def test_original_directories_and_files_are_obsolete_once_there_is_a_base() -> None:
    result = state(["000000_0", "HIVE_UNION_SUBDIR_1/000000_0", "base_5/bucket_00000"], ValidWriteIdList.from_ids(5))
    assert list(result.obsolete) == ["000000_0", "HIVE_UNION_SUBDIR_1"]
    assert result.original_files == ()


def test_a_plain_file_named_like_a_base_is_an_original_file() -> None:
    result = state(["base_5", "delta_1_1"], ValidWriteIdList.from_ids(5))
    assert result.base is None and result.deltas == ()
    assert [f.path for f in result.original_files] == ["base_5", "delta_1_1"]


@pytest.mark.parametrize("bad", ["base_x/", "delta_7/bucket_00000", "delete_delta_1_2_3_4/"])
def test_unparseable_acid_directory_names_fail_with_the_name(bad: str) -> None:
    with pytest.raises(AcidLayoutError, match=bad.split("/")[0]):
        state(["delta_1_1_0/", bad], ValidWriteIdList.from_ids(5))


def test_differently_padded_names_of_one_range_pair_like_the_same_range() -> None:
    result = state(["delete_delta_1_1_0000/", "delta_0000001_0000001_0000/"], ValidWriteIdList.from_ids(1))
    assert deltas(result) == ["delete_delta_1_1_0000", "delta_0000001_0000001_0000"]


def test_reader_list_can_call_a_delta_above_its_watermark_obsolete_but_the_cleaner_list_cannot() -> None:
    # Hive's reader list keeps delta_40_60 (SOME) at watermark 50, which then covers delta_48_55,
    # whose ids reach above 50: the reason Hive 4's cleaner uses ValidCleanerWriteIdList (HIVE-27526).
    paths = ["base_39_v1/", "delta_40_60_v2/", "delta_48_55_v3/"]
    assert list(state(paths, ValidWriteIdList.from_ids(50)).obsolete) == ["delta_48_55_v3"]
    cleaner = state(paths, ValidCleanerWriteIdList.from_ids(50))
    assert cleaner.obsolete == () and cleaner.deltas == ()


def test_listing_order_does_not_change_the_state() -> None:
    paths = [
        "base_5/",
        "base_10/",
        "base_0000007/",
        "delta_1_3/",
        "delta_8_12/",
        "delta_11_11_0/",
        "delete_delta_11_11_0/",
    ]
    expected = state(paths, ValidWriteIdList.from_ids(12))
    for seed in range(5):
        shuffled = paths[:]
        random.Random(seed).shuffle(shuffled)
        assert state(shuffled, ValidWriteIdList.from_ids(12)) == expected


def test_obsolete_dirs_is_sorted_and_adds_aborted_directories_on_request() -> None:
    listing = Listing.from_paths(["delta_1_1_0/", "delta_2_2_0/", "delta_1_2/", "delta_3_3_0/"])
    ids = ValidCleanerWriteIdList.from_ids(3, aborted_ids=[3])
    assert obsolete_dirs(listing, ids) == ("delta_1_1_0", "delta_2_2_0")
    assert obsolete_dirs(listing, ids, include_aborted=True) == ("delta_1_1_0", "delta_2_2_0", "delta_3_3_0")


def test_state_reports_current_directories_in_read_order() -> None:
    result = state(["base_2/", "delta_3_3_0/", "delete_delta_3_3_0/"], ValidWriteIdList.from_ids(3))
    assert result.current_directories == ("base_2", "delete_delta_3_3_0", "delta_3_3_0")
    assert [d.name for d in result.insert_deltas] == ["delta_3_3_0"]
