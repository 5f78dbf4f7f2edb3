"""Ctrl-C ends any command within a second: exit 130, the one line "interrupted", no traceback and
no click "Aborted!". The hard case is a command blocked in C, where Python's own handler cannot
run: ``audit`` asking an unreachable broker for metadata (librdkafka waits up to 30 s)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from acidclean.cli import EXIT_INTERRUPTED
from acidclean.deploy.local.process import free_port, process_start_time, stop_process

pytestmark = pytest.mark.integration


class Command:
    """One ``acidclean`` process, Ctrl-C'd on demand."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.start_time = process_start_time(self.process.pid)
        self.stdout = ""

    def interrupt_after(self, seconds: float) -> tuple[int, float, str]:
        """Send SIGINT after ``seconds``; the exit code, how long the process took to end after it, stderr."""
        time.sleep(seconds)
        assert self.process.poll() is None, self.process.communicate()
        self.process.send_signal(signal.SIGINT)
        sent = time.monotonic()
        self.stdout, stderr = self.process.communicate(timeout=30)
        return self.process.returncode, time.monotonic() - sent, stderr


@pytest.fixture
def acidclean(tmp_path: Path) -> Iterator[type[Command]]:
    started: list[Command] = []
    env = {
        **os.environ,
        "ACIDCLEAN_STATE_DIR": str(tmp_path / "no-stack"),
        "ACIDCLEAN_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port()}",  # nobody listens there
        "ACIDCLEAN_METASTORE_URIS": f"thrift://127.0.0.1:{free_port()}",
        "ACIDCLEAN_ALLOWED_ROOTS": f'{{"default": ["{tmp_path / "warehouse"}"]}}',
    }

    class Started(Command):
        def __init__(self, *args: str, code: str | None = None) -> None:
            argv = [sys.executable, "-c", code] if code else [sys.executable, "-m", "acidclean", *args]
            super().__init__(argv, env)
            started.append(self)

    try:
        yield Started
    finally:
        for command in started:
            stop_process(command.process.pid, "acidclean", timeout_s=5, start_time=command.start_time)
            command.process.communicate()


def assert_interrupted(code: int, seconds: float, stderr: str) -> None:
    assert code == EXIT_INTERRUPTED, stderr
    assert seconds < 1.5, f"took {seconds:.1f} s to stop"
    assert stderr.splitlines()[-1] == "interrupted"
    assert "Traceback" not in stderr and "Aborted!" not in stderr


def test_audit_against_an_unreachable_broker_stops_on_ctrl_c(acidclean: type[Command]) -> None:
    assert_interrupted(*acidclean("audit").interrupt_after(2.0))


def test_the_cleaner_stops_on_ctrl_c(acidclean: type[Command]) -> None:
    assert_interrupted(*acidclean("cleaner").interrupt_after(2.0))


def test_a_command_that_stops_on_ctrl_c_by_itself_still_exits_130(acidclean: type[Command]) -> None:
    # As the cleaner's loop does once it runs: SIGINT asks it to stop, and it returns normally.
    code = textwrap.dedent(
        """
        import signal, sys, time
        import click
        from acidclean.cli import main

        @main.command("wait-for-stop")
        def wait_for_stop():
            '''Wait until asked to stop.'''
            stopped = []
            signal.signal(signal.SIGINT, lambda *_: stopped.append(True))
            while not stopped:
                time.sleep(0.05)
            click.echo("stopped cleanly")

        sys.argv = ["acidclean", "wait-for-stop"]
        main()
        """
    )
    command = acidclean(code=code)
    assert_interrupted(*command.interrupt_after(2.0))
    assert command.stdout == "stopped cleanly\n"


def test_a_python_loop_stops_on_ctrl_c_at_once(acidclean: type[Command]) -> None:
    code = textwrap.dedent(
        """
        import sys, time
        from acidclean.cli import main

        @main.command("busy")
        def busy():
            '''Sleep in Python until interrupted.'''
            try:
                while True:
                    time.sleep(0.05)
            finally:
                print("unwound", flush=True)  # the watchdog's os._exit runs no finally block

        sys.argv = ["acidclean", "busy"]
        main()
        """
    )
    command = acidclean(code=code)
    code_, seconds, stderr = command.interrupt_after(2.0)
    assert_interrupted(code_, seconds, stderr)
    # Unwound by KeyboardInterrupt, not ended by the watchdog (timing said so only on a quiet machine:
    # with the test session's services busy, a clean exit took 0.8 s here).
    assert command.stdout == "unwound\n"
