"""The pyarrow file-system adapter on the local file system."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from acidclean.shared.storage import StorageError, normalise_uri, open_location


def make_tree(root: Path) -> None:
    (root / "delta_1_1").mkdir(parents=True)
    (root / "delta_1_1" / "bucket_00000").write_bytes(b"x" * 10)
    (root / "delta_1_1" / "bucket_00001").write_bytes(b"y" * 5)
    (root / "outside").mkdir()
    os.symlink(root / "outside", root / "delta_2_2")


def test_listing_marks_directories_and_symlinks(tmp_path: Path) -> None:
    make_tree(tmp_path / "t")
    location = open_location(f"file:{tmp_path / 't'}")
    entries = {entry.name: entry for entry in location.fs.list_dir(location.path)}
    assert set(entries) == {"delta_1_1", "outside", "delta_2_2"}
    assert entries["delta_1_1"].is_dir and not entries["delta_1_1"].is_symlink
    assert entries["delta_2_2"].is_symlink
    assert location.fs.real_path(location.child("delta_2_2")) == str(tmp_path / "t" / "outside")


def test_tree_size_counts_files_and_bytes(tmp_path: Path) -> None:
    make_tree(tmp_path / "t")
    location = open_location(str(tmp_path / "t"))
    size = location.fs.tree_size(location.child("delta_1_1"))
    assert (size.files, size.bytes) == (2, 15)


def test_delete_is_idempotent(tmp_path: Path) -> None:
    make_tree(tmp_path / "t")
    location = open_location(str(tmp_path / "t"))
    location.fs.delete_dir(location.child("delta_1_1"))
    location.fs.delete_dir(location.child("delta_1_1"))
    assert not location.fs.exists(location.child("delta_1_1"))


def test_rename_refuses_to_overwrite(tmp_path: Path) -> None:
    make_tree(tmp_path / "t")
    location = open_location(str(tmp_path / "t"))
    with pytest.raises(StorageError, match="target exists"):
        location.fs.rename(location.child("delta_1_1"), location.child("outside"))


def test_listing_a_missing_directory_names_it(tmp_path: Path) -> None:
    location = open_location(str(tmp_path / "missing"))
    with pytest.raises(StorageError, match="missing"):
        location.fs.list_dir(location.path)


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("file:/w/db.db/t", "file:///w/db.db/t"),
        ("file:///w/t", "file:///w/t"),
        ("s3a://bucket/w/t", "s3://bucket/w/t"),
        ("hdfs://nn:8020/w/t", "hdfs://nn:8020/w/t"),
        # Hive's partition directories hold '%', spaces and non-ASCII as they are (Hadoop Path strings)
        ("file:/w/t/city=St. John%27s%232", "file:///w/t/city%3DSt.%20John%2527s%25232"),
        ("hdfs://nn:8020/w/t/city=Zürich", "hdfs://nn:8020/w/t/city%3DZ%C3%BCrich"),
    ],
)
def test_hive_location_uris_are_normalised_for_pyarrow(uri: str, expected: str) -> None:
    assert normalise_uri(uri) == expected


def test_a_partition_directory_with_escapes_spaces_and_non_ascii_opens_as_the_metastore_names_it(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "t" / "city=St. John%27s%232" / "at=Zürich 10%3A30"
    make_tree(directory)
    location = open_location(f"file:{directory}")
    assert location.path == str(directory)
    assert "delta_1_1" in {entry.name for entry in location.fs.list_dir(location.path)}
