"""Start, watch and stop one local service process (a JVM) by its own process id.

A service writes its output to a log file in its state directory. Starting waits for a readiness
probe; when the process exits early or the probe never succeeds, the error names the cause and
shows the tail of the log. Stopping sends SIGTERM to the process (its shutdown hooks run), waits,
then SIGKILL. Nothing is ever found or killed by name, and a recorded pid is signalled only while
the process holding it started when the recorded one did: a pid is reused once its process is gone,
and the newcomer is a stranger.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from acidclean.shared.errors import StackError

LOG_TAIL_LINES = 25


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    return free_ports(1)[0]


def free_ports(count: int, *, taken: Iterable[int] = ()) -> list[int]:
    """``count`` different TCP ports on 127.0.0.1 that nothing listens on right now, none of ``taken``.

    Every probe stays bound until all are picked: two ``free_port()`` calls in a row may get the same
    port back (the first probe is closed before the second binds), and a service given that port
    twice refuses to start (Kafka: "two listeners on the same port")."""
    avoid = set(taken)
    probes: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            probes.append(probe)
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
            if port not in avoid:
                ports.append(port)
    finally:
        for probe in probes:
            probe.close()
    return ports


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


# Only the JIT's first tier, for the local stack's services (the metastore and the broker): they live
# minutes, on the cores the cleaner and the tests share. The metastore's optimising compiler took 19 of
# the 42 s of CPU it used in a 27 s run of table lookups (2026-11-29); warm, a lookup costs it 1.5 ms
# of CPU a table against 1.1-1.3 ms fully compiled. The broker's compilers took 0.7-0.8 of its 1.5 s
# of CPU in each of a cleaner benchmark's runs, while the cleaner needed the box's cores.
QUICK_JIT = ("-XX:TieredStopAtLevel=1",)


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


def process_start_time(pid: int) -> int | None:
    """When process ``pid`` started, as the system counts it (clock ticks since boot: field 22 of
    ``/proc/<pid>/stat``; where there is no ``/proc``, seconds since the epoch from ``ps``). With the
    pid, it names one process: a reused pid has another start time. None when no such process runs."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except FileNotFoundError:
        return None if Path("/proc/self/stat").exists() else _ps_start_time(pid)
    except OSError:
        return None
    # Field 2 (the command name) may hold spaces and parentheses: count the fields after its last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])


def process_started_at(pid: int) -> float | None:
    """When process ``pid`` started, in seconds since the epoch (to the clock tick); None when none runs."""
    ticks = process_start_time(pid)
    if ticks is None or not Path("/proc/stat").exists():
        return None if ticks is None else float(ticks)  # without /proc, ``ps`` gave seconds already
    boot = next(
        int(line.split()[1])
        for line in Path("/proc/stat").read_text(encoding="ascii").splitlines()
        if line.startswith("btime ")
    )
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _ps_start_time(pid: int) -> int | None:
    completed = subprocess.run(
        ["ps", "-o", "lstart=", "-p", str(pid)], capture_output=True, text=True, check=False, env={"LC_ALL": "C"}
    )
    text = completed.stdout.strip()
    if completed.returncode != 0 or not text:
        return None
    return int(time.mktime(time.strptime(text, "%a %b %d %H:%M:%S %Y")))


def pid_alive(pid: int, start_time: int | None = None) -> bool:
    """Whether process ``pid`` runs, and when ``start_time`` is given, whether it is still the process
    that started then (see :func:`process_start_time`) rather than a newcomer given the same pid."""
    if start_time is not None and process_start_time(pid) != start_time:
        return False
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
    start_time: int | None = None  # see process_start_time: with the pid, which process this is


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
        raise StackError(f"{name} failed with exit code {completed.returncode}. Log {log_file}:\n{log_tail(log_file)}")


def start_service(
    name: str,
    command: Sequence[str],
    log_file: Path,
    ready: Callable[[], bool],
    timeout_s: float,
    env: dict[str, str] | None = None,
) -> StartedProcess:
    """Start ``command`` in its own session and wait until ``ready()`` returns true.

    The process is stopped again (by its pid) when it does not become ready in time, and when the
    wait is cut short (Ctrl-C, a readiness check that raises): no caller holds its pid yet.
    """
    log_file.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log_file.open("ab") as log:
        process = subprocess.Popen(list(command), stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    # Read now: until this process reaps its child, the pid cannot pass to another process.
    start_time = process_start_time(process.pid)
    deadline = started + timeout_s
    try:
        while time.monotonic() < deadline:
            code = process.poll()
            if code is not None:
                raise StackError(
                    f"{name} exited with code {code} while starting. Log {log_file}:\n{log_tail(log_file)}"
                )
            if ready():
                return StartedProcess(name, process.pid, log_file, time.monotonic() - started, start_time)
            time.sleep(0.25)
    except BaseException:
        stop_process(process.pid, name, start_time=start_time)
        raise
    stop_process(process.pid, name, start_time=start_time)
    raise StackError(
        f"{name} did not become ready within {timeout_s:.0f} s and was stopped. Log {log_file}:\n{log_tail(log_file)}"
    )


def stop_process(pid: int, name: str, timeout_s: float = 30.0, *, start_time: int | None = None) -> bool:
    """SIGTERM the process ``pid``, then SIGKILL after ``timeout_s``. Returns whether it was running.

    With ``start_time`` (see :func:`process_start_time`), a process that has another start time is
    not the one meant: it is left alone and counts as not running (:func:`process_replaced` tells).
    """
    if not pid_alive(pid, start_time):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not pid_alive(pid, start_time):
            return True
        time.sleep(0.1)
    if not pid_alive(pid, start_time):  # checked again right before SIGKILL: the pid may have passed on
        return True
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and pid_alive(pid, start_time):
        time.sleep(0.1)
    if pid_alive(pid, start_time):
        raise StackError(f"{name} (pid {pid}) did not stop after SIGKILL")
    return True


def process_replaced(pid: int, start_time: int | None) -> bool:
    """True when ``pid`` now belongs to another process than the one that started at ``start_time``."""
    if start_time is None:
        return False
    current = process_start_time(pid)
    return current is not None and current != start_time
