"""The local stack's warehouse is a folder Hive 4 reads: no path component starts with '.' or '_'."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from acidclean.deploy.local.warehouse import hive_readable, local_warehouse

pytestmark = pytest.mark.rule10


def test_the_default_state_dir_keeps_its_tables_beside_it_not_under_the_dot(tmp_path: Path) -> None:
    project = tmp_path / "project"
    assert local_warehouse(project / ".stack") == project / "stack-warehouse"
    assert not hive_readable(project / ".stack" / "warehouse")


def test_a_state_dir_hive_reads_keeps_its_warehouse_inside(tmp_path: Path) -> None:
    assert local_warehouse(tmp_path / "stack") == tmp_path / "stack" / "warehouse"


def test_from_inside_a_hidden_folder_the_warehouse_goes_to_the_temporary_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    hidden = tmp_path / "home" / ".local" / "project" / ".stack"
    warehouse = local_warehouse(hidden)
    assert warehouse.parent == tmp_path / "tmp" and warehouse.name.startswith("acidclean-warehouse-")
    assert hive_readable(warehouse)
    assert local_warehouse(hidden) == warehouse, "the same state dir finds the same warehouse again"
    assert local_warehouse(hidden.parent / ".other") != warehouse


@pytest.mark.parametrize("path", ["/a/_tmp/w", "/a/.b/w", "/a/b/.w"])
def test_any_hidden_component_makes_a_path_unreadable_to_hive4(path: str) -> None:
    assert not hive_readable(Path(path))
