"""Start, watch and stop one local service process (a JVM) by its own process id.

A service writes its output to a log file in its state directory. Starting waits for a readiness
probe; when the process exits early or the probe never succeeds, the error names the cause and
shows the tail of the log. Stopping sends SIGTERM to the process (its shutdown hooks run), waits,
then SIGKILL. Nothing is ever found or killed by name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from acidclean.shared.errors import StackError

LOG_TAIL_LINES = 25


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def ensure_port_free(port: int, service: str) -> None:
    """Fail with a clear message when ``port`` on 127.0.0.1 is already taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as error:
            raise StackError(
                f"{service} cannot start: port {port} on 127.0.0.1 is already taken ({error.strerror}). "
                f"Stop what uses it (see `ss -ltnp 'sport = :{port}'`) or let acidclean pick a free port "
                "by not setting one."
            ) from error


def port_accepts(port: int, host: str = "127.0.0.1") -> bool:
    """True when something accepts TCP connections on ``host:port``: a cheap probe before a client call."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        return probe.connect_ex((host, port)) == 0


def java_executable() -> str:
    """The ``java`` command, from JAVA_HOME or the PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise StackError(
            "`java` was not found on the PATH and JAVA_HOME is not set: install a Java 17 JDK "
            "(e.g. `apt install openjdk-17-jdk-headless`) and try again."
        )
    return found


def log_tail(log_file: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = log_file.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log written)"
    tail = text.splitlines()[-lines:]
    return "\n".join(f"    {line}" for line in tail) if tail else "(log is empty)"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); reap it if it is ours.
    with contextlib.suppress(ChildProcessError):
        finished, _ = os.waitpid(pid, os.WNOHANG)
        if finished == pid:
            return False
    return True


@dataclass(frozen=True)
class StartedProcess:
    """A service process that answered its readiness probe."""

    name: str
    pid: int
    log_file: Path
    seconds_to_ready: float


def run_to_completion(
    name: str, command: Sequence[str], log_file: Path, timeout_s: float, env: dict[str, str] | None = None
) -> None:
    """Run a one-shot tool (storage format, schema init), failing with its log tail."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        try:
            completed = subprocess.run(
                list(command), stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s, env=env, check=False
            )
        except subprocess.TimeoutExpired as error:
            raise StackError(
                f"{name} did not finish within {timeout_s:.0f} s. Log {log_file}:\n{log_tail(log_file)}"
            ) from error
    if completed.returncode != 0:
        raise StackError(
            f"{name} failed with exit code {completed.returncode}. Log {log_file}:\n{log_tail(log_file)}"
        )


def start_service(
    name: str,
    command: Sequence[str],
    log_file: Path,
    ready: Callable[[], bool],
    timeout_s: float,
    env: dict[str, str] | None = None,
) -> StartedProcess:
    """Start ``command`` in its own session and wait until ``ready()`` returns true.

    The process is stopped again (by its pid) when it does not become ready in time.
    """
    log_file.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log_file.open("ab") as log:
        process = subprocess.Popen(
            list(command), stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )
    deadline = started + timeout_s
    while time.monotonic() < deadline:
        code = process.poll()
        if code is not None:
            raise StackError(
                f"{name} exited with code {code} while starting. Log {log_file}:\n{log_tail(log_file)}"
            )
        if ready():
            return StartedProcess(name, process.pid, log_file, time.monotonic() - started)
        time.sleep(0.25)
    stop_process(process.pid, name)
    raise StackError(
        f"{name} did not become ready within {timeout_s:.0f} s and was stopped. "
        f"Log {log_file}:\n{log_tail(log_file)}"
    )


def stop_process(pid: int, name: str, timeout_s: float = 30.0) -> bool:
    """SIGTERM the process ``pid``, then SIGKILL after ``timeout_s``. Returns whether it was running."""
    if not pid_alive(pid):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and pid_alive(pid):
        time.sleep(0.1)
    if pid_alive(pid):
        raise StackError(f"{name} (pid {pid}) did not stop after SIGKILL")
    return True
