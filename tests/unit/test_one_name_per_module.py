"""Each top-level folder imports only as part of the acidclean package (issue 11: one module, one name)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("folder", ["shared", "schemas", "producers", "consumers", "deploy"])
def test_a_folder_imported_under_its_bare_name_is_refused(folder: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", f"import {folder}"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert f"import acidclean.{folder}, not {folder}" in result.stderr


def test_the_package_names_load_one_copy_of_each_class() -> None:
    code = (
        "import sys; sys.path.insert(0, '.');"
        "import acidclean.shared.errors as e; import acidclean.consumers.handler;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('shared', 'schemas', 'producers', 'consumers', 'deploy')))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
