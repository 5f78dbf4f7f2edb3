"""A new user's first hour: every command finds the local stack it stands in, with no variable set.

In a fresh folder and an environment without any ``ACIDCLEAN_*`` variable: ``stack up``, then
``create-table``, ``ingest``, a ``cleaner`` in the background, ``read --hold``, ``vacuum``, ``audit``
and ``stack down``, each as its own ``acidclean`` process, as a user would type them. The table ends
cleaned. The stack is its own (a fresh metastore), stopped by ``stack down`` or, if the test fails
first, by the pids its ``stack.json`` records.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from acidclean.deploy.local.process import stop_process
from acidclean.deploy.local.stack import read_state, stack_down
from acidclean.shared.storage import open_location

pytestmark = pytest.mark.integration


def clean_environment() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if not name.startswith(("ACIDCLEAN_", "AWS_"))}


class User:
    """Types ``acidclean`` commands in one folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.env = clean_environment()

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "acidclean", *args]

    def run(self, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            self.command(*args), cwd=self.folder, env=self.env, capture_output=True, text=True, timeout=timeout_s
        )
        assert done.returncode == 0, f"acidclean {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}"
        return done

    def start(self, *args: str, log: Path) -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            return subprocess.Popen(self.command(*args), cwd=self.folder, env=self.env, stdout=out, stderr=out)


@pytest.fixture
def user(tmp_path: Path) -> Iterator[User]:
    folder = tmp_path / "work"
    folder.mkdir()
    yield User(folder)
    if read_state((folder / ".stack").resolve()) is not None:  # the test failed before `stack down`
        stack_down(folder / ".stack")


def test_after_stack_up_every_command_uses_the_stack_without_any_variable(user: User, tmp_path: Path) -> None:
    up = user.run("stack", "up")
    assert "acidclean commands run from this directory use it" in up.stdout

    created = user.run("create-table", "sales.orders", "--columns", "id int, v string", "--buckets", "2")
    assert "using the local stack in" in created.stderr
    user.run("ingest", "sales.orders", "--rows", "300", "--commits", "3")
    info = read_state((user.folder / ".stack").resolve())
    assert info is not None
    cleaner = user.start("cleaner", "--interval-ms", "300", log=tmp_path / "cleaner.log")
    reader = user.start("read", "sales.orders", "--count", "--hold", "6", log=tmp_path / "reader.log")
    try:
        deadline = time.monotonic() + 60
        while "acquired" not in (tmp_path / "reader.log").read_text() and time.monotonic() < deadline:
            assert reader.poll() is None, (tmp_path / "reader.log").read_text()
            time.sleep(0.1)
        vacuum = user.run("vacuum", "sales.orders")
        assert "lock snapshot" in vacuum.stdout + vacuum.stderr
        assert reader.wait(60) == 0, (tmp_path / "reader.log").read_text()
        cleaned = ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and " cleaned " not in cleaned:
            cleaned = user.run("audit", "sales.orders").stdout
            time.sleep(0.5)
        assert " cleaned " in cleaned, cleaned + (tmp_path / "cleaner.log").read_text()[-2000:]
    finally:
        for process in (reader, cleaner):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    stop_process(process.pid, "acidclean")

    with_location = subprocess.run(
        user.command("read", "sales.orders", "--count"), cwd=user.folder, env=user.env, capture_output=True, text=True
    )
    assert with_location.returncode == 0
    location = open_location(f"{info.warehouse}/sales.db/orders")
    left = sorted(entry.name for entry in location.fs.list_dir(location.path))
    assert left == ["delta_0000001_0000003"], left  # a fresh metastore: the three commits were txns 1-3
    assert with_location.stdout.strip().splitlines()[-1] == "900"

    down = user.run("stack", "down")
    assert "stopped" in down.stdout
    assert read_state((user.folder / ".stack").resolve()) is None
