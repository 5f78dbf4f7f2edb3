"""The tiers can be chosen (issue 50): every file under tests/integration and tests/e2e starts real
services and says so with a module-level ``pytestmark`` holding ``pytest.mark.integration``, so
``-m "not integration"`` (``make test-fast``) selects the pure tier and starts nothing."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICE_TIERS = ("tests/integration", "tests/e2e")


def marks_module_integration(source: str) -> bool:
    """Whether the module assigns ``pytestmark`` a ``pytest.mark.integration`` (alone or in a list)."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        names_pytestmark = any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets)
        if names_pytestmark and any(ast.unparse(part) == "pytest.mark.integration" for part in ast.walk(value)):
            return True
    return False


def service_test_files() -> list[Path]:
    return sorted(path for tier in SERVICE_TIERS for path in (ROOT / tier).rglob("test_*.py"))


def test_every_integration_and_e2e_file_is_marked_integration() -> None:
    files = service_test_files()
    assert len(files) > 30 and any(path.parent.name == "e2e" for path in files)  # the walk sees both tiers
    unmarked = [
        str(path.relative_to(ROOT)) for path in files if not marks_module_integration(path.read_text(encoding="utf-8"))
    ]
    assert unmarked == [], "add `pytestmark = pytest.mark.integration` to " + ", ".join(unmarked)


@pytest.mark.parametrize(
    ("source", "marked"),
    [
        ("import pytest\npytestmark = pytest.mark.integration\n", True),
        ("import pytest\npytestmark = [pytest.mark.integration, pytest.mark.metastore]\n", True),
        ("import pytest\npytestmark: list = [pytest.mark.metastore, pytest.mark.integration]\n", True),
        ("import pytest\npytestmark = pytest.mark.metastore\n", False),
        ("import pytest\n@pytest.mark.integration\ndef test_x():\n    pass\n", False),
        ("import pytest\nintegration = pytest.mark.integration\n", False),
        ("def test_x(kafka_bootstrap):\n    pass\n", False),
    ],
)
def test_only_a_module_level_integration_mark_counts(source: str, marked: bool) -> None:
    assert marks_module_integration(source) is marked
