"""A test session stopped by SIGTERM, or by SIGINT when it runs in the background, still stops by
process id what its fixtures started (``session_signals``): a session of its own is started, with
a fixture that starts a process, then stopped by the signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from acidclean.deploy.local.process import pid_alive, stop_process

pytestmark = pytest.mark.integration

TESTS = Path(__file__).resolve().parents[1]

CONFTEST = textwrap.dedent(
    """
    from session_signals import stop_cleanly_on_signals


    def pytest_configure(config):
        stop_cleanly_on_signals()
    """
)

SESSION = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from pathlib import Path

    import pytest


    @pytest.fixture(scope="session")
    def started():
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        try:
            yield child
        finally:
            child.terminate()
            child.wait(30)
            Path(os.environ["TORN_DOWN"]).write_text("yes")


    def test_runs_until_stopped(started):
        Path(os.environ["STARTED"]).write_text(str(started.pid))
        time.sleep(600)
    """
)


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a non-interactive shell starts a job with &


@pytest.mark.parametrize(
    ("stop_signal", "preexec"),
    [(signal.SIGTERM, None), (signal.SIGINT, _ignore_sigint)],
    ids=["sigterm", "sigint-in-the-background"],
)
def test_a_session_stopped_by_a_signal_tears_its_fixtures_down(
    tmp_path: Path, stop_signal: signal.Signals, preexec: Callable[[], None] | None
) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_session.py").write_text(SESSION)
    started, torn_down = tmp_path / "started", tmp_path / "torn_down"
    env = {**os.environ, "PYTHONPATH": str(TESTS), "STARTED": str(started), "TORN_DOWN": str(torn_down)}
    session = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=preexec,
    )
    child = 0
    try:
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline and session.poll() is None:
            time.sleep(0.1)
        assert started.exists(), f"the session never started its test: {session.communicate(timeout=30)[0]!r}"
        child = int(started.read_text())
        session.send_signal(stop_signal)
        output, _ = session.communicate(timeout=60)
        assert torn_down.exists(), f"the session was not torn down: {output!r}"
        assert not pid_alive(child), "the process its fixture started outlived the session"
        assert session.returncode != 0  # interrupted, not passed
    finally:
        if session.poll() is None:
            session.kill()
            session.wait(30)
        if child:
            stop_process(child, "the session's fixture's process", timeout_s=5)
