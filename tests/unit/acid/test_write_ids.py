"""Hive's valid id lists: string form, single ids, ranges, and the compactor, cleaner and Hive 2 variants."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acidclean.shared.acid.names import LONG_MAX
from acidclean.shared.acid.write_ids import (
    RangeResponse,
    ValidCleanerTxnList,
    ValidCleanerWriteIdList,
    ValidCompactorTxnList,
    ValidCompactorWriteIdList,
    ValidTxnList,
    ValidWriteIdList,
)
from acidclean.shared.errors import AcidLayoutError

ALL, SOME, NONE = RangeResponse.ALL, RangeResponse.SOME, RangeResponse.NONE


def test_reader_list_parses_hive_string_form_with_open_and_aborted_ids() -> None:
    ids = ValidWriteIdList.from_string("db.t:10:5:5,7:6,9")
    assert (ids.table_name, ids.high_watermark, ids.min_open_write_id) == ("db.t", 10, 5)
    assert (ids.open_ids, ids.aborted_ids, ids.exceptions) == ((5, 7), (6, 9), (5, 6, 7, 9))
    assert ids.to_string() == "db.t:10:5:5,7:6,9"


def test_reader_list_without_exceptions_prints_long_max_and_empty_sections() -> None:
    ids = ValidWriteIdList.from_string("tbl:100:" + str(LONG_MAX) + ":")
    assert ids.min_open_write_id is None
    assert ids.exceptions == ()
    assert ids.to_string() == "tbl:100:9223372036854775807::"


def test_four_part_string_lists_only_open_ids_as_hive_reads_it() -> None:
    ids = ValidWriteIdList.from_string("tbl:100:4:4")
    assert (ids.open_ids, ids.aborted_ids, ids.min_open_write_id) == ((4,), (), 4)


def test_null_table_name_reads_as_none_and_prints_as_null() -> None:
    ids = ValidWriteIdList.from_string("null:5:9223372036854775807::")
    assert ids.table_name is None
    assert ids.to_string().startswith("null:5:")


def test_empty_string_means_everything_committed() -> None:
    ids = ValidWriteIdList.from_string("")
    assert ids.high_watermark == LONG_MAX and ids.is_write_id_valid(10**12)


@pytest.mark.parametrize("text", ["tbl", "tbl:x:1::", "tbl:5:1:a:", "tbl:5"])
def test_malformed_strings_are_rejected_with_the_text(text: str) -> None:
    with pytest.raises(AcidLayoutError, match="not a valid id list"):
        ValidWriteIdList.from_string(text)


def test_from_ids_takes_the_smallest_open_id_as_min_open_write_id() -> None:
    ids = ValidWriteIdList.from_ids(20, open_ids=[9, 4], aborted_ids=[2])
    assert ids.min_open_write_id == 4
    assert ValidWriteIdList.from_ids(20, aborted_ids=[2]).min_open_write_id is None
    assert ValidWriteIdList.from_ids(20, [9], min_open_write_id=3).min_open_write_id == 3


def test_single_ids_are_valid_only_at_or_below_the_watermark_and_not_excepted() -> None:
    ids = ValidWriteIdList.from_ids(10, open_ids=[4], aborted_ids=[6])
    assert [w for w in range(0, 13) if ids.is_write_id_valid(w)] == [0, 1, 2, 3, 5, 7, 8, 9, 10]
    assert ids.is_write_id_aborted(6) and not ids.is_write_id_aborted(4)


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (1, 3, ALL),  # before the first exception
        (1, 5, SOME),  # holds open 4
        (4, 4, NONE),  # only the open id
        (11, 20, NONE),  # wholly above the watermark
        (9, 12, SOME),  # partly above the watermark
        (4, 6, SOME),
        (6, 6, NONE),  # only an aborted id
        (7, 10, ALL),
    ],
)
def test_reader_range_validity_counts_exceptions_and_ids_above_the_watermark(
    low: int, high: int, expected: RangeResponse
) -> None:
    ids = ValidWriteIdList.from_ids(10, open_ids=[4], aborted_ids=[6])
    assert ids.is_write_id_range_valid(low, high) is expected


def test_reader_range_is_all_when_the_first_exception_lies_beyond_it_even_above_the_watermark() -> None:
    # Hive checks "first exception above max" before counting ids above the watermark.
    ids = ValidWriteIdList(10, open_ids=(20,), min_open_write_id=20)
    assert ids.is_write_id_range_valid(5, 15) is ALL
    assert ValidWriteIdList(10).is_write_id_range_valid(5, 15) is SOME


@pytest.mark.parametrize(
    ("low", "high", "expected"), [(5, 5, ALL), (5, 6, ALL), (4, 6, SOME), (1, 3, NONE), (11, 12, NONE)]
)
def test_range_aborted_counts_only_aborted_ids(low: int, high: int, expected: RangeResponse) -> None:
    ids = ValidWriteIdList.from_ids(10, open_ids=[4], aborted_ids=[5, 6])
    assert ids.is_write_id_range_aborted(low, high) is expected


def test_base_is_valid_only_below_min_open_and_at_or_below_the_watermark() -> None:
    ids = ValidWriteIdList.from_ids(150, open_ids=[121], aborted_ids=[99])
    assert ids.is_valid_base(100) and ids.is_valid_base(120)
    assert not ids.is_valid_base(121) and not ids.is_valid_base(151)
    assert ValidWriteIdList.from_ids(150).is_valid_base(150)


def test_compactor_list_accepts_only_ranges_at_or_below_the_watermark() -> None:
    ids = ValidCompactorWriteIdList.from_string("tbl:4:" + str(LONG_MAX))
    assert ids.is_write_id_range_valid(1, 1) is ALL
    assert ids.is_write_id_range_valid(2, 5) is NONE
    assert ids.is_write_id_range_valid(4, 4) is ALL


def test_compactor_list_drops_exceptions_above_its_watermark() -> None:
    ids = ValidCompactorWriteIdList.from_ids(5, aborted_ids=[3, 8])
    assert ids.aborted_ids == (3,) and ids.exceptions == (3,)
    assert ids.is_write_id_aborted(3) and not ids.is_write_id_aborted(8)
    assert ids.is_write_id_range_valid(1, 5) is ALL  # even with an aborted id inside


def test_cleaner_list_treats_ranges_reaching_above_its_watermark_as_none() -> None:
    reader = ValidWriteIdList.from_ids(50)
    cleaner = ValidCleanerWriteIdList.from_ids(50)
    assert reader.is_write_id_range_valid(40, 60) is SOME
    assert cleaner.is_write_id_range_valid(40, 60) is NONE
    assert cleaner.is_write_id_range_valid(40, 50) is ALL


def test_cleaner_list_never_calls_an_id_above_its_watermark_aborted() -> None:
    cleaner = ValidCleanerWriteIdList(5, aborted_ids=(3, 8))
    assert cleaner.is_write_id_aborted(3) and not cleaner.is_write_id_aborted(8)


def test_hive2_transaction_list_has_no_table_name_in_its_string_form() -> None:
    txns = ValidTxnList.from_string("150:121:99:121")
    assert (txns.high_watermark, txns.min_open_write_id, txns.open_ids, txns.aborted_ids) == (150, 121, (99,), (121,))
    assert txns.to_string() == "150:121:99:121"
    five_open = ValidTxnList.from_string("125:5:5")
    assert five_open.is_txn_valid(4) and not five_open.is_txn_valid(5)
    assert ValidTxnList.from_string("10:9:8,9:7").is_txn_aborted(7)


def test_hive2_compactor_transaction_list_is_all_or_none_by_watermark() -> None:
    txns = ValidCompactorTxnList.from_string("4:" + str(LONG_MAX))
    assert txns.is_write_id_range_valid(1, 4) is ALL and txns.is_write_id_range_valid(2, 5) is NONE


def test_lists_of_different_kinds_are_not_equal() -> None:
    assert ValidWriteIdList.from_ids(5) != ValidCleanerWriteIdList.from_ids(5)
    assert ValidWriteIdList.from_ids(5, [3]) == ValidWriteIdList.from_string("null:5:3:3:")


ids_below = st.lists(st.integers(min_value=1, max_value=40), max_size=8, unique=True)


@given(hwm=st.integers(min_value=0, max_value=40), open_ids=ids_below, aborted=ids_below)
def test_string_form_round_trips(hwm: int, open_ids: list[int], aborted: list[int]) -> None:
    aborted = [a for a in aborted if a not in open_ids]
    ids = ValidWriteIdList.from_ids(hwm, open_ids, aborted, table_name="db.t")
    assert ValidWriteIdList.from_string(ids.to_string()) == ids
    txns = ValidTxnList.from_ids(hwm, open_ids, aborted)
    assert ValidTxnList.from_string(txns.to_string()) == txns


@given(
    hwm=st.integers(min_value=0, max_value=30),
    open_ids=ids_below,
    aborted=ids_below,
    low=st.integers(min_value=1, max_value=35),
    width=st.integers(min_value=0, max_value=10),
)
def test_range_answers_agree_with_checking_every_id(
    hwm: int, open_ids: list[int], aborted: list[int], low: int, width: int
) -> None:
    # Hive's counting shortcut must give the same answer as looking at each id, when the exceptions
    # lie at or below the watermark (as the metastore builds them).
    open_ids = [i for i in open_ids if i <= hwm]
    aborted = [a for a in aborted if a <= hwm and a not in open_ids]
    ids = ValidWriteIdList.from_ids(hwm, open_ids, aborted)
    high = low + width
    valid = [ids.is_write_id_valid(w) for w in range(low, high + 1)]
    expected = ALL if all(valid) else NONE if not any(valid) else SOME
    assert ids.is_write_id_range_valid(low, high) is expected
    was_aborted = [ids.is_write_id_aborted(w) for w in range(low, high + 1)]
    expected_aborted = NONE if low > hwm or not any(was_aborted) else ALL if all(was_aborted) else SOME
    assert ids.is_write_id_range_aborted(low, high) is expected_aborted
    assert ids.all_write_ids_valid(low, high) is all(valid)


def test_hive2_cleaner_transaction_list_applies_the_cleaner_rule_without_a_table_name() -> None:
    txns = ValidCleanerTxnList.from_ids(50, aborted_ids=[3])
    assert txns.is_write_id_range_valid(40, 60) is NONE
    assert txns.is_write_id_range_valid(40, 50) is ALL
    assert txns.is_write_id_aborted(3) and not ValidCleanerTxnList(5, aborted_ids=(8,)).is_write_id_aborted(8)
    assert txns.to_string() == "50:9223372036854775807::3"
    assert txns.hive2_base_rules
