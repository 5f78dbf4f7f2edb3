"""`pip install acidclean` with no extra, into a fresh virtual environment, as a new user does it.

The wheel is built from this checkout (``pip wheel``, reproducible: SOURCE_DATE_EPOCH) and installed
with its base dependencies from PyPI into a venv kept in the cache dir per wheel hash, so a rerun of
unchanged code reuses it. In that venv numpy, pyspark, pyorc and matplotlib do not import (checked):
every base command must start there, each command of an extra must say which extra in one line, and
a real ``acidclean cleaner`` from it must clean a table the vacuum (this dev environment's) compacted.
The import blocker of tests/unit/deploy/test_extras.py only hides modules it was told about; this
venv has exactly the base dependencies, so a new import of a module outside them fails here.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cleaner_support import Watcher, settings_environment
from producers_support import DB, directories, snapshot, vacuum, write

from acidclean.deploy.local.jars import cache_dir
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.settings import Settings

pytestmark = pytest.mark.integration

REPOSITORY = Path(__file__).resolve().parents[2]
EXTRA_MODULES = ("numpy", "pyspark", "pyorc", "matplotlib")
BASE_COMMANDS = (
    ("--help",),
    ("cleaner", "--help"),
    ("audit", "--help"),
    ("initiator", "--help"),
    ("stack", "--help"),
    ("stack", "up", "--help"),
    ("stack", "status", "--help"),
    ("acid-state", "--help"),
    ("scan", "--help"),
    ("outbox", "list", "--help"),
    ("outbox", "flush", "--help"),
    ("read", "--help"),
)
# Each command of an extra, with arguments enough to get past click's own checks.
EXTRA_COMMANDS = (
    ("vacuum", "vacuum", ("vacuum", "db.t")),
    ("vacuum", "create-table", ("create-table", "db.t", "--columns", "id int")),
    ("vacuum", "ingest", ("ingest", "db.t", "--rows", "1")),
    ("vacuum", "demo", ("demo",)),
    ("vacuum", "vacuum-service", ("vacuum-service",)),
    ("vacuum", "vacuum-request", ("vacuum-request", "{}")),
    ("plot", "audit --plot", ("audit", "db.t", "--plot", "timeline.png")),
)


def _build_wheel(folder: Path) -> Path:
    env = {**os.environ, "SOURCE_DATE_EPOCH": "315532800"}  # 1980: the same code gives the same wheel
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(folder), str(REPOSITORY)],
        check=True,
        env=env,
        timeout=600,
    )
    (wheel,) = folder.glob("acidclean-*.whl")
    return wheel


def _slim_venv(wheel: Path) -> Path:
    """A venv with ``wheel`` and its base dependencies, made once per wheel hash in the cache dir."""
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()[:16]
    venvs = cache_dir() / "slim-venv"
    venv = venvs / digest
    if not (venv / ".complete").exists():
        shutil.rmtree(venv, ignore_errors=True)
        for old in venvs.glob("*"):  # one slim venv is kept: each is some 300 MB
            shutil.rmtree(old, ignore_errors=True)
        venvs.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        subprocess.run(
            [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", str(wheel)],
            check=True,
            timeout=1200,
        )
        (venv / ".complete").write_text(wheel.name + "\n")
    return venv


@pytest.fixture(scope="module")
def slim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``acidclean`` command of the slim venv."""
    venv = _slim_venv(_build_wheel(tmp_path_factory.mktemp("wheel")))
    return venv / "bin" / "acidclean"


def _environment(tmp_path: Path, settings: Settings | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACIDCLEAN_", "PYTHON", "VIRTUAL_ENV"))}
    env["ACIDCLEAN_STATE_DIR"] = str(tmp_path / "state")  # no local stack found by chance
    if settings is not None:
        env.update(settings_environment(settings))
    return env


def _run(slim: Path, env: dict[str, str], *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(slim), *args], env=env, capture_output=True, text=True, timeout=timeout_s, cwd="/")


def test_the_slim_venv_has_no_module_of_an_extra(slim: Path, tmp_path: Path) -> None:
    python = slim.parent / "python"
    env = _environment(tmp_path)
    for module in EXTRA_MODULES:
        child = subprocess.run(
            [str(python), "-c", f"import {module}"], env=env, cwd="/", capture_output=True, text=True
        )
        assert child.returncode == 1 and "ModuleNotFoundError" in child.stderr, (module, child.stderr)
    code = "import acidclean; print(acidclean.__file__)"
    installed = subprocess.run([str(python), "-c", code], env=env, cwd="/", capture_output=True, text=True)
    assert installed.stdout.startswith(str(slim.parent.parent)), f"acidclean must come from the wheel: {installed}"


@pytest.mark.parametrize("args", BASE_COMMANDS, ids=" ".join)
def test_every_base_command_starts_without_the_extras(slim: Path, tmp_path: Path, args: tuple[str, ...]) -> None:
    done = _run(slim, _environment(tmp_path), *args)
    assert done.returncode == 0, done.stderr
    assert "Usage: acidclean" in done.stdout and "Traceback" not in done.stderr


@pytest.mark.parametrize(("extra", "command", "args"), EXTRA_COMMANDS, ids=[c for _, c, _ in EXTRA_COMMANDS])
def test_a_command_of_an_extra_names_it_in_one_line(
    slim: Path, tmp_path: Path, extra: str, command: str, args: tuple[str, ...]
) -> None:
    done = _run(slim, _environment(tmp_path), *args)
    assert done.returncode == 1, done.stdout + done.stderr
    line = f"error: acidclean {command} needs the {extra} extra: pip install 'acidclean[{extra}]'"
    assert done.stderr.strip().splitlines() == [line], done.stderr


# The local stack, a SparkSession and eight commands, each its own process: more than the default 600 s
# on a busy 2-core machine.
@pytest.mark.timeout(1200)
def test_the_slim_cleaner_cleans_a_vacuumed_table_and_the_slim_readers_see_its_rows(
    slim: Path,
    metastore: HiveMetastore,
    spark: Any,
    table_settings: Settings,
    table_watcher: Watcher,
    table_location: Path,
    unique_name: str,
    tmp_path: Path,
) -> None:
    env = _environment(tmp_path, table_settings)
    write(metastore, unique_name, rows=40, commits=3, delete_fraction=0.25)
    expected = snapshot(metastore, unique_name)
    assert expected.num_rows < 120  # delete deltas: the slim reader must apply them (without numpy)

    scanned = _run(slim, env, "scan", str(table_location), "--count")
    assert scanned.returncode == 0, scanned.stderr
    assert scanned.stdout.strip().splitlines()[-1] == str(expected.num_rows)
    rows = _run(slim, env, "scan", str(table_location), "--with-row-id", "--format", "jsonl")
    assert rows.returncode == 0, rows.stderr
    identities = sorted(
        (r["originalTransaction"], r["bucket"], r["rowId"]) for r in map(json.loads, rows.stdout.splitlines())
    )
    assert identities == sorted(
        zip(*(expected.column(c).to_pylist() for c in ("originalTransaction", "bucket", "rowId")), strict=True)
    )
    state = _run(slim, env, "acid-state", str(table_location))
    assert state.returncode == 0 and json.loads(state.stdout), state.stderr

    result = vacuum(metastore, table_settings, spark, unique_name, full=True)
    assert result.publish is not None
    event = result.publish.event
    assert event.obsolete_directories

    log = tmp_path / "slim-cleaner.log"
    with log.open("wb") as out:
        cleaner = subprocess.Popen([str(slim), "cleaner", "--cleaner-id", "slim"], env=env, stdout=out, stderr=out)
    try:
        table_watcher.wait_for(lambda: table_watcher.done(event), 90, f"CleanupDone from the slim cleaner:\n{log}")
    finally:
        if cleaner.poll() is None:
            cleaner.terminate()
        stopped = cleaner.wait(30)
    assert stopped == 0, log.read_text()[-3000:]
    assert directories(metastore, unique_name) == sorted(event.new_directories)

    read = _run(slim, env, "read", f"{DB}.{unique_name}", "--count")
    assert read.returncode == 0, read.stderr
    assert read.stdout.strip().splitlines()[-1] == str(expected.num_rows)
    deadline = time.monotonic() + 60
    audit = _run(slim, env, "audit", f"{DB}.{unique_name}")
    while " cleaned " not in audit.stdout and time.monotonic() < deadline:
        time.sleep(1)
        audit = _run(slim, env, "audit", f"{DB}.{unique_name}")
    assert " cleaned " in audit.stdout, audit.stdout + audit.stderr
    outbox = _run(slim, env, "outbox", "list")
    assert outbox.returncode == 0 and "0 event(s)" in outbox.stdout, outbox.stdout + outbox.stderr
