"""The rules load without any adapter: a fresh interpreter imports them and nothing of Thrift,
hmsclient, pyarrow, pyorc, confluent-kafka or Spark comes with them (issue 11)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RULES = [
    "acidclean.shared.acid",
    "acidclean.shared.acid.claims",
    "acidclean.shared.acid.id_lists",
    "acidclean.shared.acid.partition_names",
    "acidclean.shared.acid.locations",
    "acidclean.shared.location_sharing",
    "acidclean.consumers.rules.readiness",
    "acidclean.consumers.rules.obsolete",
    "acidclean.consumers.rules.paths",
    "acidclean.shared.metastore",
    "acidclean.shared.storage",
    "acidclean.shared.storage.interface",
    "acidclean.shared.bus.protocol",
]
ADAPTER_LIBRARIES = ("thrift", "hmsclient", "pyarrow", "pyorc", "confluent_kafka", "pyspark")


@pytest.mark.parametrize("module", RULES)
def test_a_rule_module_loads_no_io_library(module: str) -> None:
    code = f"import sys, {module}; print(sorted(n for n in {ADAPTER_LIBRARIES!r} if n in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd="/")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", f"{module} loads {result.stdout.strip()}"


def test_no_product_module_imports_the_tests() -> None:
    offenders = []
    for folder in ("shared", "schemas", "producers", "consumers", "deploy", "acidclean/cli"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            if any(
                f"import {name}" in text or f"from {name}" in text
                for name in ("tests", "cleaner_support", "producers_support", "conftest")
            ):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
