"""`pip install acidclean` without extras runs the cleaner, the audit and the stack commands.

How it is proved: each command runs in a child process whose ``sitecustomize`` puts an import
blocker first on ``sys.meta_path``, so ``import pyspark``, ``import pyorc`` and ``import matplotlib``
raise ImportError there as they would where the extras are not installed. A fresh virtualenv with
``pip install --no-deps`` would be closer to a user's install, but it needs every other dependency
(confluent-kafka, pyarrow, hdfs-native...) installed again from the network or a warm pip cache, about
300 MB and a minute per run, and it proves no more about *our* imports: what an uninstalled extra
breaks is an ``import`` executed on the command's path, which the blocker makes fail the same way.
The blocker is given to the child only (its PYTHONPATH): this test process keeps pyspark. The first
test checks the blocker itself, so the others cannot pass because it silently did nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

EXTRA_MODULES = ("numpy", "pyspark", "pyorc", "matplotlib")

BLOCKER = f'''
import sys


class _NotInstalled:
    """Behave as if the extras' packages were not installed."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {EXTRA_MODULES!r}:
            raise ImportError(f"No module named {{name!r}} (blocked by the test)")
        return None


sys.meta_path.insert(0, _NotInstalled())
'''


@pytest.fixture
def without_extras(tmp_path: Path) -> dict[str, str]:
    """The environment of a child process that cannot import the extras."""
    folder = tmp_path / "blocker"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(BLOCKER)
    env = {key: value for key, value in os.environ.items() if not key.startswith("ACIDCLEAN_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), env.get("PYTHONPATH")]))
    env["ACIDCLEAN_STATE_DIR"] = str(tmp_path / "no-stack")  # no local stack: nothing is found by chance
    return env


def acidclean(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acidclean", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def test_the_blocker_hides_the_extras_from_the_child_only(without_extras: dict[str, str]) -> None:
    for module in EXTRA_MODULES:
        child = subprocess.run([sys.executable, "-c", f"import {module}"], env=without_extras, capture_output=True)
        assert child.returncode == 1 and b"blocked by the test" in child.stderr, module
    import pyspark  # noqa: F401  (this process still has it)


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("cleaner", "--help"),
        ("initiator", "--help"),
        ("audit", "--help"),
        ("stack", "--help"),
        ("acid-state", "--help"),
        ("outbox", "list"),
    ],
)
def test_the_commands_without_extras_start(without_extras: dict[str, str], args: tuple[str, ...]) -> None:
    result = acidclean(without_extras, *args)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


def test_the_initiator_imports_nothing_of_the_extras(without_extras: dict[str, str]) -> None:
    """It runs in the cleaner image (no pyspark): its whole module tree imports without the extras."""
    code = (
        "import pkgutil, sys, importlib\n"
        "import acidclean.cli.initiator, acidclean.producers.initiator as p\n"
        "for m in pkgutil.walk_packages(p.__path__, p.__name__ + '.'): importlib.import_module(m.name)\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {EXTRA_MODULES!r}))\n"
    )
    child = subprocess.run([sys.executable, "-c", code], env=without_extras, capture_output=True, text=True)
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("vacuum", "sales.orders"), "acidclean vacuum needs the vacuum extra: pip install 'acidclean[vacuum]'"),
        (("ingest", "sales.orders", "--rows", "1"), "acidclean ingest needs the vacuum extra"),
        (("create-table", "sales.orders", "--columns", "id int"), "acidclean create-table needs the vacuum extra"),
        (("demo",), "acidclean demo needs the vacuum extra"),
        (("vacuum-service",), "acidclean vacuum-service needs the vacuum extra"),
        (
            ("audit", "sales.orders", "--plot", "t.png"),
            "acidclean audit --plot needs the plot extra: pip install 'acidclean[plot]'",
        ),
    ],
)
def test_a_command_that_needs_a_missing_extra_says_which_in_one_line(
    without_extras: dict[str, str], args: tuple[str, ...], line: str
) -> None:
    result = acidclean(without_extras, *args)
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: {line}")
    assert len(result.stderr.splitlines()) == 1, result.stderr


@pytest.mark.integration
def test_the_audit_and_the_cleaner_run_without_extras_on_a_real_broker(
    without_extras: dict[str, str], kafka_bootstrap: str, metastore_uri: str, tmp_path: Path, unique_name: str
) -> None:
    env = {**without_extras, "ACIDCLEAN_KAFKA_BOOTSTRAP": kafka_bootstrap, "ACIDCLEAN_TOPIC_PREFIX": f"{unique_name}."}
    audit = acidclean(env, "audit")
    assert audit.returncode == 0, audit.stderr
    assert "Traceback" not in audit.stderr

    from cleaner_support import cleaner_settings, start_cleaner_process

    settings = cleaner_settings(kafka_bootstrap, metastore_uri, tmp_path, unique_name)
    log_file = tmp_path / "cleaner.log"
    blocker = {"PYTHONPATH": without_extras["PYTHONPATH"]}
    cleaner = start_cleaner_process(settings, log_file, cleaner_id="no-extras", extra_env=blocker)
    try:
        deadline = time.monotonic() + 90
        while "partitions assigned" not in log_file.read_text() and time.monotonic() < deadline:
            assert cleaner.process.poll() is None, log_file.read_text()
            time.sleep(0.3)
        assert "partitions assigned" in log_file.read_text(), log_file.read_text()
    finally:
        assert cleaner.stop() == 0, log_file.read_text()
    assert "Traceback" not in log_file.read_text()
