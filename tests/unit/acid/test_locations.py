"""Rule 8's location comparison: one directory in any spelling, and one inside another, overlap."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acidclean.shared.acid.locations import locations_overlap, normalise_location, parse_location

pytestmark = pytest.mark.rule8

segment = st.text(alphabet="abcXYZ019_=-.% ", min_size=1, max_size=8).filter(lambda part: part not in (".", ".."))
paths = st.lists(segment, min_size=1, max_size=5).map(lambda parts: "/" + "/".join(parts))
hosts = st.sampled_from(["nn1", "NN1", "nn2:8020", "namenode.example.com"])


def spellings(path: str) -> st.SearchStrategy[str]:
    """The same local directory written as Hive, Hadoop and operators write it."""
    return st.sampled_from(
        [
            path,
            path + "/",
            "file:" + path,
            "file://" + path,
            "file:///" + path.lstrip("/") + "/",
            path.replace("/", "//"),
        ]
    )


@given(paths.flatmap(lambda path: st.tuples(st.just(path), spellings(path), spellings(path))))
def test_one_directory_in_any_spelling_overlaps_itself(case: tuple[str, str, str]) -> None:
    path, first, second = case
    assert normalise_location(first) == normalise_location(second) or locations_overlap(first, second)
    assert locations_overlap(first, second) and locations_overlap(second, first)
    assert locations_overlap(first, path)


@given(st.one_of(paths, hosts.flatmap(lambda host: paths.map(lambda path: f"hdfs://{host}{path}"))))
def test_normalising_is_idempotent(location: str) -> None:
    once = normalise_location(location)
    assert normalise_location(once) == once


@given(paths, st.lists(segment, min_size=1, max_size=3))
def test_a_directory_inside_another_overlaps_it_both_ways(parent: str, tail: list[str]) -> None:
    child = parent.rstrip("/") + "/" + "/".join(tail)
    assert locations_overlap(parent, child) and locations_overlap(child, parent)
    assert locations_overlap("file:" + parent + "/", child)


@given(paths, st.sampled_from(["0", "_x", "x", "-1"]))
def test_a_sibling_whose_name_only_starts_alike_does_not_overlap(path: str, suffix: str) -> None:
    # p=1 and p=10 share a string prefix, not a directory
    assert not locations_overlap(path, path + suffix)


@given(paths, paths)
def test_overlap_is_symmetric(first: str, second: str) -> None:
    assert locations_overlap(first, second) == locations_overlap(second, first)


@given(paths)
def test_different_name_nodes_are_different_stores_but_an_unqualified_path_may_be_any(path: str) -> None:
    assert not locations_overlap(f"hdfs://nn1:8020{path}", f"hdfs://nn2:8020{path}")
    assert locations_overlap(f"hdfs://NN1:8020{path}", f"hdfs://nn1{path}/")  # host without case, port ignored
    assert locations_overlap(f"hdfs://nn1{path}", path)  # resolved against the default file system
    assert locations_overlap(f"hdfs:///{path.lstrip('/')}", f"hdfs://nn1{path}")  # the default name node
    assert locations_overlap(f"s3a://bucket{path}", f"s3://bucket{path}")


def test_case_differences_and_dot_segments_count_as_the_same_directory() -> None:
    assert locations_overlap("/warehouse/T/P=Real", "/warehouse/t/p=real")
    assert locations_overlap("/warehouse/t/x/../p=real/.", "/warehouse/t/p=real")
    assert parse_location("hdfs://nn:8020/w//t/").path == "/w/t"


def test_escaped_partition_values_overlap_what_they_may_decode_to() -> None:
    assert locations_overlap("file:/w/t/p=a%20b", "/w/t/p=a b")
    assert locations_overlap("/w/t/p=a%2Fb", "/w/t/p=a")  # in doubt: overlap, so a cleanup only waits longer
    assert not locations_overlap("/w/t/p=real", "/w/t/p=latest")
