"""Hive's partition names: escaping as FileUtils does, names as Warehouse.makePartName builds them, and
comparisons that never lose a reader's lock over a spelling (escaped or not, any case)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acidclean.shared.acid.partition_names import (
    DEFAULT_PARTITION_NAME,
    PartitionNameError,
    canonical_partition_name,
    escape_path_name,
    lock_covers_partition,
    make_partition_name,
    may_be_same_partition,
    parse_partition_name,
    unescape_path_name,
    value_readings,
)

# Characters Hive escapes and characters it keeps, non-ASCII included.
NASTY = "'#%/=: \t\n\x00\x7f\"*?\\{[]^}<>|+-.,;~`!@$&()_é中ßİıΣς\U0001f600AZaz09"
values = st.text(alphabet=st.sampled_from(NASTY) | st.characters(), min_size=1, max_size=12)
keys = st.text(alphabet=st.sampled_from("abcxyz_09=/%' é"), min_size=1, max_size=6)
partitions = st.lists(st.tuples(keys, values), min_size=1, max_size=3)


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("St. John's#2", "St. John%27s%232"),
        ("a/b=c:d", "a%2Fb%3Dc%3Ad"),
        ("50% off", "50%25 off"),
        ("x%41y", "x%2541y"),
        ('q?*"[x]^{y}\\z', "q%3F%2A%22%5Bx%5D%5E%7By}%5Cz"),
        ("tab\there\x7f", "tab%09here%7F"),
        ("Zürich Straße 中", "Zürich Straße 中"),  # Hive escapes no non-ASCII character
        ("<a>|b", "<a>|b"),  # escaped only on Windows
        (DEFAULT_PARTITION_NAME, DEFAULT_PARTITION_NAME),
    ],
)
def test_values_are_escaped_exactly_as_hive_escapes_them(raw: str, escaped: str) -> None:
    assert escape_path_name(raw) == escaped
    assert unescape_path_name(escaped) == raw


def test_an_empty_or_missing_value_is_the_default_partition() -> None:
    assert escape_path_name("") == escape_path_name(None) == DEFAULT_PARTITION_NAME
    assert escape_path_name("", "other") == "other"
    assert make_partition_name(["ds"], [None]) == make_partition_name(["ds"], [""]) == f"ds={DEFAULT_PARTITION_NAME}"


@pytest.mark.parametrize(
    ("escaped", "raw"),
    [
        ("%C3%A9", "\u00c3\u00a9"),  # one character per %XX, as Hive does: not UTF-8
        ("%2a%2A", "**"),  # either case of hex digit
        ("50%", "50%"),  # too short to be an escape
        ("%4", "%4"),
        ("%zz%4g", "%zz%4g"),  # not hex
        ("%+1", "\x01"),  # Java's Integer.parseInt takes a sign...
        ("%-1", "%-1"),  # ...and a negative code is no escape
        ("%\uff21\uff41", "\u00aa"),  # and full-width hex letters (FF21 is A, FF41 is a)
        ("%\u0661\u0662", "\x12"),  # and any Unicode decimal digit (Arabic-Indic 1 and 2)
    ],
)
def test_unescaping_follows_hives_java_code_in_its_corners(escaped: str, raw: str) -> None:
    assert unescape_path_name(escaped) == raw


@given(values)
def test_unescape_reverses_escape(value: str) -> None:
    escaped = escape_path_name(value)
    assert unescape_path_name(escaped) == value
    assert "/" not in escaped and "=" not in escaped and ":" not in escaped
    assert escape_path_name(unescape_path_name(escaped)) == escaped


def test_a_partition_name_is_built_like_warehouse_make_part_name() -> None:
    name = make_partition_name(["City", "at"], ["St. John's#2", "2026-01-01 10:30"])
    assert name == "city=St. John%27s%232/at=2026-01-01 10%3A30"
    assert parse_partition_name(name) == (("city", "St. John's#2"), ("at", "2026-01-01 10:30"))
    with pytest.raises(PartitionNameError):
        make_partition_name(["a", "b"], ["1"])
    with pytest.raises(PartitionNameError):
        make_partition_name([], [])


@given(partitions)
def test_a_name_parses_back_into_its_keys_and_values(pairs: list[tuple[str, str]]) -> None:
    name = make_partition_name([key for key, _ in pairs], [value for _, value in pairs])
    assert parse_partition_name(name) == tuple((key.lower(), value) for key, value in pairs)
    assert canonical_partition_name(name) == name


@pytest.mark.parametrize("name", ["", "ds", "=x", "ds=1/", "/ds=1", "ds=1//b=2", "ds=1/=2"])
def test_what_is_not_a_partition_name_is_refused_saying_so(name: str) -> None:
    with pytest.raises(PartitionNameError, match="partition"):
        parse_partition_name(name)


@pytest.mark.parametrize(
    "spelling",
    [
        "city=St. John's#2",
        "city=St. John%27s%232",
        "CITY=St. John's#2",
        "city=St. John%27s%23%32",
        "City=St. John's%232",
    ],
)
def test_the_canonical_name_is_one_for_every_spelling_of_a_partition(spelling: str) -> None:
    assert canonical_partition_name(spelling) == "city=St. John%27s%232"


def test_a_spelling_reads_as_an_escaped_name_first_and_then_as_typed_values() -> None:
    assert value_readings("city=St. John%27s%232", ["city"]) == (("St. John's#2",), ("St. John%27s%232",))
    assert value_readings("city=a/b=c:d", ["city"]) == (("a/b=c:d",),)  # '/' and '=' only as typed
    assert value_readings("city=a/at=b/at=c", ["city", "at"]) == (("a", "b/at=c"), ("a/at=b", "c"))
    assert value_readings("CITY=x/AT=y", ["city", "at"]) == (("x", "y"),)
    assert value_readings("city=\u0130/x/at=y", ["city", "at"]) == (("\u0130/x", "y"),)  # lower() adds a char
    assert value_readings("city=", ["city"]) == ((DEFAULT_PARTITION_NAME,),)
    assert value_readings("ds=1", ["city"]) == ()
    assert value_readings("city=1", []) == ()


@given(st.lists(values, min_size=1, max_size=3))
def test_values_typed_as_they_are_are_among_the_readings(typed: list[str]) -> None:
    names = ["k", "ds", "x"][: len(typed)]
    spelling = "/".join(f"{key}={value}" for key, value in zip(names, typed, strict=True))
    assert tuple(typed) in value_readings(spelling, names)
    assert tuple(typed) in value_readings(make_partition_name(names, typed), names)


# -- locks ------------------------------------------------------------------------------------------


def hive3_lock_name(name: str) -> str:
    """What Hive 3's metastore stores for a lock on ``name``: the name lower-cased."""
    return name.lower()


@given(partitions)
def test_a_lock_taken_the_way_hive_takes_it_covers_its_partition_however_it_is_spelled(
    pairs: list[tuple[str, str]],
) -> None:
    keys_, values_ = [key for key, _ in pairs], [value for _, value in pairs]
    hive_name = make_partition_name(keys_, values_)
    for lock in (hive_name, hive3_lock_name(hive_name)):
        assert lock_covers_partition(lock, hive_name)
        if all("/" not in key + value and "=" not in key for key, value in pairs):
            typed = "/".join(f"{key}={value}" for key, value in pairs)
            assert lock_covers_partition(lock, typed), typed


@pytest.mark.parametrize(
    ("lock", "partition"),
    [
        ("city=st. john%27s%232", "city=St. John's#2"),
        ("city=St. John%27s%232", "CITY=St. John%27s%232"),
        ("city=a%2fb%3dc%3ad", "city=a/b=c:d"),
        ("city=x%2541y", "city=x%41y"),
        ("city=zürich", "city=Zürich"),
        ("city=i̇stanbul", "city=İstanbul"),  # U+0130 lower-cased by Java: i and a combining dot
        ("city=\u0131stanbul", "city=Istanbul"),  # a JVM in a Turkish locale: a dotless i
        ("city=straße", "city=STRASSE"),
        (None, "city=St. John's#2"),  # a table lock covers every partition
        ("city=x", None),
        ("not a name", "city=x"),  # a name that cannot be read: in doubt, it counts
        ("city=a//b", "city=x"),  # not an escaped name, even if it reads as typed values
        ("city=x", "not a name"),
    ],
)
def test_a_lock_covers_its_partition_in_every_spelling_and_in_doubt(lock: str | None, partition: str | None) -> None:
    assert lock_covers_partition(lock, partition)


@pytest.mark.parametrize(
    ("lock", "partition"),
    [
        ("city=st. john%27s%233", "city=St. John's#2"),
        ("city=a", "city=a/at=b"),
        ("city=a/at=b", "city=a/at=c"),
        ("ds=a", "city=a"),
    ],
)
def test_a_lock_on_another_partition_does_not_cover_it(lock: str, partition: str) -> None:
    assert not lock_covers_partition(lock, partition)


def test_two_spellings_of_one_partition_are_the_same_partition_and_case_of_values_matters() -> None:
    assert may_be_same_partition("city=St. John%27s%232", "CITY=St. John's#2")
    assert may_be_same_partition(None, None)
    assert not may_be_same_partition("city=a", None)
    assert not may_be_same_partition("city=A", "city=a")
    assert may_be_same_partition("garbage", "garbage") and not may_be_same_partition("garbage", "city=a")
