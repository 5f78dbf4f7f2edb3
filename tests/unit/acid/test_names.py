"""The ACID directory and file name grammar, as Hive's AcidUtils parses and writes names."""

from __future__ import annotations

import pytest

from acidclean.shared.acid.events import decode_bucket_property, encode_bucket_property
from acidclean.shared.acid.names import (
    LONG_MIN,
    DirectoryKind,
    ParsedDirectory,
    base_name,
    bucket_file_name,
    delta_name,
    is_hidden,
    original_file_name,
    parse_bucket_file,
    parse_bucket_id,
    parse_directory_name,
    parse_original_file,
)
from acidclean.shared.errors import AcidLayoutError


def parsed(name: str) -> ParsedDirectory:
    result = parse_directory_name(name)
    assert result is not None
    return result


@pytest.mark.parametrize(
    ("name", "kind", "low", "high", "statement", "visibility"),
    [
        ("base_0000059", DirectoryKind.BASE, 0, 59, None, 0),
        ("base_000123", DirectoryKind.BASE, 0, 123, None, 0),
        ("base_0000059_v0000070", DirectoryKind.BASE, 0, 59, None, 70),
        ("base_-9223372036854775808", DirectoryKind.BASE, 0, LONG_MIN, None, 0),
        ("delta_0000060_0000070", DirectoryKind.DELTA, 60, 70, None, 0),
        ("delta_0000071_0000071_0000", DirectoryKind.DELTA, 71, 71, 0, 0),
        ("delta_00061_61", DirectoryKind.DELTA, 61, 61, None, 0),
        ("delta_0060_60_7", DirectoryKind.DELTA, 60, 60, 7, 0),
        ("delta_0000001_0000003_v0000012", DirectoryKind.DELTA, 1, 3, None, 12),
        ("delta_0000001_0000001_0002_v0000012", DirectoryKind.DELTA, 1, 1, 2, 12),
        ("delete_delta_0000072_0000072_0000", DirectoryKind.DELETE_DELTA, 72, 72, 0, 0),
        ("delete_delta_000005_000006", DirectoryKind.DELETE_DELTA, 5, 6, None, 0),
        ("delete_delta_1_4_v9", DirectoryKind.DELETE_DELTA, 1, 4, None, 9),
    ],
)
def test_directory_names_parse_into_kind_write_ids_statement_and_visibility(
    name: str, kind: DirectoryKind, low: int, high: int, statement: int | None, visibility: int
) -> None:
    result = parsed(name)
    assert (result.name, result.kind, result.min_write_id, result.max_write_id) == (name, kind, low, high)
    assert (result.statement_id, result.visibility_txn_id) == (statement, visibility)


def test_zero_padding_does_not_change_the_parsed_ids() -> None:
    padded, bare = parsed("delta_0000061_0000061_0003"), parsed("delta_61_61_3")
    assert padded.sort_key()[:3] == bare.sort_key()[:3]
    assert parsed("base_0000050").write_id == parsed("base_50").write_id == 50


@pytest.mark.parametrize("name", ["000000_0", "random", "subdir", "basement", "_tmp_delta_1_1", "deltas"])
def test_names_without_an_acid_prefix_are_not_acid_directories(name: str) -> None:
    assert parse_directory_name(name) is None


@pytest.mark.parametrize(
    "name",
    [
        "base_x",
        "base_",
        "base_5_v",
        "base_5_x",
        "delta_1",
        "delta_a_2",
        "delta_1_2_3_4",
        "delta_1_2_",
        "delete_delta_1",
        "delta_1_2_99999999999",
        "base_99999999999999999999",
        "delta_ 1_2",
    ],
)
def test_acid_prefixed_names_that_do_not_parse_are_rejected_with_the_name(name: str) -> None:
    with pytest.raises(AcidLayoutError, match=name.split(" ")[0]):
        parse_directory_name(name)


def test_delta_sort_order_is_min_ascending_max_descending_statement_ascending_then_name() -> None:
    names = [
        "delta_11_20",
        "delta_5_10",
        "delta_60_60_0",
        "delta_5_20",
        "delta_60_60",
        "delta_60_60_3",
        "delta_0060_60",
        "delete_delta_5_20",
    ]
    ordered = [d.name for d in sorted(map(parsed, names), key=ParsedDirectory.sort_key)]
    assert ordered == [
        "delete_delta_5_20",  # same range: 'delete_delta' < 'delta' by name
        "delta_5_20",  # wider first
        "delta_5_10",
        "delta_11_20",
        "delta_0060_60",  # no statement id sorts before statement 0; then by name
        "delta_60_60",
        "delta_60_60_0",
        "delta_60_60_3",
    ]


def test_names_are_formatted_with_hive_padding() -> None:
    assert base_name(59) == "base_0000059"
    assert base_name(59, 70) == "base_0000059_v0000070"
    assert delta_name(1, 3) == "delta_0000001_0000003"
    assert delta_name(71, 71, 0) == "delta_0000071_0000071_0000"
    assert delta_name(100, 200, 7, delete=True) == "delete_delta_0000100_0000200_0007"
    assert delta_name(1, 10, 5, delete=True) == "delete_delta_0000001_0000010_0005"
    assert delta_name(1, 3, visibility_txn_id=12) == "delta_0000001_0000003_v0000012"
    assert delta_name(1234567880, 1234567890, 0) == "delta_1234567880_1234567890_0000"
    assert bucket_file_name(23) == "bucket_00023"
    assert bucket_file_name(0, 1) == "bucket_00000_1"
    assert original_file_name(123) == "000123_0"
    assert original_file_name(0, 2) == "000000_0_copy_2"


def test_formatted_names_parse_back_to_the_same_ids() -> None:
    result = parsed(delta_name(7, 9, 3, visibility_txn_id=11, delete=True))
    assert (result.kind, result.min_write_id, result.max_write_id, result.statement_id, result.visibility_txn_id) == (
        DirectoryKind.DELETE_DELTA,
        7,
        9,
        3,
        11,
    )


@pytest.mark.parametrize(
    ("name", "bucket"),
    [
        ("bucket_00000", 0),
        ("bucket_00023", 23),
        ("bucket_00001_2", 1),
        ("bucket_123", 123),
        ("bucket_00000_flush_length", None),
        ("bucket_x", None),
        ("000000_0", None),
    ],
)
def test_bucket_file_names_give_their_bucket_id(name: str, bucket: int | None) -> None:
    assert parse_bucket_file(name) == bucket


@pytest.mark.parametrize(
    ("name", "bucket"),
    [
        ("000000_0", 0),
        ("000001_1", 1),
        ("000123_0", 123),
        ("000000_0_copy_1", 0),
        ("000002_0_copy_12", 2),
        ("random", None),
        ("000000_0_copy_", None),
        ("000000", None),
    ],
)
def test_original_file_names_give_their_bucket_id(name: str, bucket: int | None) -> None:
    assert parse_original_file(name) == bucket


def test_parse_bucket_id_accepts_original_and_bucket_file_names() -> None:
    assert parse_bucket_id("000123_0") == 123
    assert parse_bucket_id("bucket_00023") == 23
    assert parse_bucket_id("random") is None


@pytest.mark.parametrize(
    ("name", "hidden"),
    [
        ("_tmp_1", True),
        (".hive-staging_x", True),
        ("_done", True),
        ("_orc_acid_version", True),
        ("base_1", False),
        ("000000_0", False),
    ],
)
def test_names_starting_with_underscore_or_dot_are_hidden(name: str, hidden: bool) -> None:
    assert is_hidden(name) is hidden


def test_bucket_property_v1_encodes_bucket_and_statement_ids() -> None:
    assert encode_bucket_property(0) == 536870912
    assert encode_bucket_property(1) == 536936448
    assert encode_bucket_property(3, 2) == (1 << 29) | (3 << 16) | 2
    decoded = decode_bucket_property(encode_bucket_property(4095, 4095))
    assert (decoded.codec_version, decoded.bucket_id, decoded.statement_id) == (1, 4095, 4095)


def test_bucket_property_without_version_bits_is_a_plain_bucket_id() -> None:
    decoded = decode_bucket_property(7)
    assert (decoded.codec_version, decoded.bucket_id, decoded.statement_id) == (0, 7, 0)


@pytest.mark.parametrize(("bucket", "statement"), [(-1, 0), (4096, 0), (0, 4096)])
def test_bucket_property_rejects_ids_outside_the_codec_range(bucket: int, statement: int) -> None:
    with pytest.raises(ValueError, match="range"):
        encode_bucket_property(bucket, statement)
