"""docs/safety.md maps every safety rule to the code that decides it and to its marked tests."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAP = (ROOT / "docs" / "safety.md").read_text(encoding="utf-8")
ROWS = {int(m.group(1)): m.group(0) for m in re.finditer(r"^\| (\d+) \|.*$", MAP, re.M)}


def test_every_rule_of_design_section_7_has_a_row() -> None:
    assert sorted(ROWS) == list(range(1, 11))


@pytest.mark.parametrize("rule", range(1, 11))
def test_every_named_function_exists(rule: int) -> None:
    references = re.findall(r"`(acidclean\.[\w.]+):(\w+)`", ROWS[rule])
    assert references, f"rule {rule} names no code"
    for module, name in references:
        assert hasattr(importlib.import_module(module), name), f"{module}:{name} (rule {rule})"


@pytest.mark.parametrize("rule", range(1, 11))
def test_every_rule_has_marked_tests_in_the_files_it_names(rule: int) -> None:
    files = re.findall(r"`(tests/[\w/]+\.py)`", ROWS[rule])
    assert files, f"rule {rule} names no tests"
    for file in files:
        source = (ROOT / file).read_text(encoding="utf-8")
        assert re.search(rf"pytest\.mark\.rule{rule}\b", source), f"{file} has no test marked rule{rule}"
