"""``acidclean stack down`` and ``status`` never signal a process that merely inherited a recorded
pid: the start time recorded beside the pid must still match. A stranger (here a ``sleep``) holding
a stack's pid is left alone and named."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from acidclean.cli import EXIT_FAILED, main
from acidclean.deploy.local.process import free_port, pid_alive, process_start_time, stop_process
from acidclean.deploy.local.stack import STATE_FILE

pytestmark = pytest.mark.integration


@pytest.fixture
def stranger() -> Iterator[subprocess.Popen[bytes]]:
    """A process that is no service of any stack."""
    process = subprocess.Popen(["sleep", "120"])
    start_time = process_start_time(process.pid)
    try:
        yield process
    finally:
        stop_process(process.pid, "sleep", timeout_s=5, start_time=start_time)
        process.wait(5)


def write_stack(state_dir: Path, pid: int, start_time: int | None, *, written_at: float | None = None) -> None:
    """A stack.json whose Kafka is ``pid`` (started at ``start_time``) and whose metastore is long gone."""
    kafka: dict[str, object] = {
        "name": "Kafka",
        "pid": pid,
        "address": f"127.0.0.1:{free_port()}",
        "log_file": "kafka.log",
        "seconds_to_ready": 1.0,
    }
    if start_time is not None:
        kafka["start_time"] = start_time
    gone = subprocess.Popen(["true"])
    gone.wait()
    state_dir.mkdir(parents=True, exist_ok=True)
    state = {
        "state_dir": str(state_dir),
        "kafka": kafka,
        "metastore": {
            "name": "Hive Metastore (hive2)",
            "pid": gone.pid,
            "address": f"thrift://127.0.0.1:{free_port()}",
            "log_file": "metastore.log",
            "seconds_to_ready": 1.0,
        },
        "metastore_flavour": "hive2",
        "warehouse": str(state_dir / "warehouse"),
        "started_at": time.time(),
    }
    (state_dir / STATE_FILE).write_text(json.dumps(state))
    if written_at is not None:
        os.utime(state_dir / STATE_FILE, (written_at, written_at))


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_stack_down_leaves_a_process_that_now_has_the_recorded_pid_alone(
    tmp_path: Path, stranger: subprocess.Popen[bytes]
) -> None:
    start_time = process_start_time(stranger.pid)
    assert start_time is not None
    write_stack(tmp_path / "stack", stranger.pid, start_time - 1)  # the recorded Kafka started earlier
    result = run("stack", "down", "--state-dir", str(tmp_path / "stack"))
    assert result.exit_code == 0, result.output
    assert f"pid {stranger.pid} (Kafka) is now another process; not stopping it" in result.stderr
    assert result.stdout == "nothing was running\n"
    time.sleep(0.2)
    assert stranger.poll() is None and pid_alive(stranger.pid)


def test_stack_status_says_the_pid_is_another_process_and_exits_1(
    tmp_path: Path, stranger: subprocess.Popen[bytes]
) -> None:
    start_time = process_start_time(stranger.pid)
    assert start_time is not None
    write_stack(tmp_path / "stack", stranger.pid, start_time - 1)
    result = run("stack", "status", "--state-dir", str(tmp_path / "stack"))
    assert result.exit_code == EXIT_FAILED
    assert f"stopped (pid {stranger.pid} is now another process)" in result.stdout
    assert "kafka and metastore not running" in result.stderr


def test_a_command_does_not_use_a_stack_whose_pid_is_another_process(
    tmp_path: Path, stranger: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    start_time = process_start_time(stranger.pid)
    assert start_time is not None
    write_stack(tmp_path / "stack", stranger.pid, start_time - 1)
    monkeypatch.setenv("ACIDCLEAN_STATE_DIR", str(tmp_path / "stack"))
    result = run("outbox", "list", "--outbox", str(tmp_path / "outbox"))
    assert result.exit_code == 0, result.output
    assert "is not running" in result.stderr


def gone(process: subprocess.Popen[bytes], start_time: int | None) -> bool:
    process.wait(5)  # stop_process reaped it already (its exit status is lost to Popen)
    return process_start_time(process.pid) != start_time


def test_stack_down_stops_the_process_it_recorded(tmp_path: Path, stranger: subprocess.Popen[bytes]) -> None:
    start_time = process_start_time(stranger.pid)
    write_stack(tmp_path / "stack", stranger.pid, start_time)
    result = run("stack", "down", "--state-dir", str(tmp_path / "stack"))
    assert result.exit_code == 0, result.output
    assert result.stdout == f"stopped Kafka (pid {stranger.pid})\n"
    assert gone(stranger, start_time)
    assert not (tmp_path / "stack").exists()


def test_an_old_stack_json_without_start_times_never_stops_a_process_younger_than_the_file(
    tmp_path: Path, stranger: subprocess.Popen[bytes]
) -> None:
    write_stack(tmp_path / "stack", stranger.pid, None, written_at=time.time() - 3600)
    result = run("stack", "down", "--state-dir", str(tmp_path / "stack"))
    assert f"pid {stranger.pid} (Kafka) is now another process; not stopping it" in result.stderr
    assert stranger.poll() is None


def test_an_old_stack_json_without_start_times_still_stops_its_services(
    tmp_path: Path, stranger: subprocess.Popen[bytes]
) -> None:
    start_time = process_start_time(stranger.pid)
    write_stack(tmp_path / "stack", stranger.pid, None)  # written after the process started, as stack up does
    result = run("stack", "down", "--state-dir", str(tmp_path / "stack"))
    assert result.stdout == f"stopped Kafka (pid {stranger.pid})\n", result.output
    assert gone(stranger, start_time)
