"""The storage registry: a location's scheme picks its backend, and a new backend is one line."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from acidclean.shared.storage import (
    BACKENDS,
    ArrowFileSystem,
    StorageError,
    open_location,
    register_backend,
    registry,
)
from acidclean.shared.storage.arrow import open_local
from acidclean.shared.storage.hdfs import open_hdfs
from acidclean.shared.storage.s3 import open_s3


class FakeStorage:
    """A backend for ``fake://``: a local directory stands in for the bucket; records what it opened."""

    def __init__(self, root: Path) -> None:
        self.fs = ArrowFileSystem(pafs.LocalFileSystem())
        self.root = root
        self.opened: list[tuple[str, Mapping[str, str] | None]] = []

    def open(self, uri: str, environ: Mapping[str, str] | None) -> tuple[ArrowFileSystem, str]:
        self.opened.append((uri, environ))
        return self.fs, str(self.root / uri.removeprefix("fake://"))


@pytest.fixture
def backends(monkeypatch: pytest.MonkeyPatch) -> dict[str, registry.Opener]:
    """A copy of the registry for one test: what a test registers is gone after it."""
    copy = dict(BACKENDS)
    monkeypatch.setattr(registry, "BACKENDS", copy)
    return copy


def test_a_new_backend_is_one_registry_line(backends: dict[str, registry.Opener], tmp_path: Path) -> None:
    fake = FakeStorage(tmp_path)
    (tmp_path / "bucket" / "db.db" / "t" / "delta_1_1").mkdir(parents=True)

    register_backend("fake", fake.open)  # the one line

    location = open_location("fake://bucket/db.db/t", {"FAKE_TOKEN": "x"})
    assert fake.opened == [("fake://bucket/db.db/t", {"FAKE_TOKEN": "x"})]
    assert location.fs is fake.fs
    assert (location.path, location.uri) == (str(tmp_path / "bucket/db.db/t"), "fake://bucket/db.db/t")
    assert [entry.name for entry in location.fs.list_dir(location.path)] == ["delta_1_1"]
    assert open_location("FAKE://bucket/x").fs is fake.fs  # schemes are case-insensitive, as URIs say


def test_without_its_registry_line_a_scheme_is_refused_as_before(
    backends: dict[str, registry.Opener], tmp_path: Path
) -> None:
    with pytest.raises(StorageError, match=r"cannot open storage location fake://bucket/t: .*Supported: local paths"):
        open_location("fake://bucket/t")


@pytest.mark.parametrize(
    ("scheme", "opener"),
    [("file", open_local), ("hdfs", open_hdfs), ("s3", open_s3), ("s3a", open_s3), ("s3n", open_s3)],
)
def test_the_product_backends_are_registered_by_scheme(scheme: str, opener: registry.Opener) -> None:
    assert BACKENDS[scheme] is opener


def test_a_registered_backend_serves_its_scheme_instead_of_the_builtin_one(
    backends: dict[str, registry.Opener], tmp_path: Path
) -> None:
    fake = FakeStorage(tmp_path)
    register_backend("HDFS", fake.open)
    assert open_location("hdfs://nn:8020/w/t").fs is fake.fs
    assert open_location(str(tmp_path)).fs is not fake.fs  # plain paths stay local


def test_plain_paths_and_file_uris_open_locally(tmp_path: Path) -> None:
    plain = open_location(str(tmp_path / "t"))
    uri = open_location(f"file:{tmp_path / 't'}")
    assert plain.fs.is_local and uri.fs.is_local
    assert plain.path == uri.path == str(tmp_path / "t")
