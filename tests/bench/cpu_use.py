"""CPU used over a benchmark's window: by the whole box and by each named process (the cleaner, the
metastore, the broker). It says which part a throughput is limited by: a box with no idle core left
cannot run more threads faster, and a metastore using a core of its own is the bottleneck."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")
_LISTEN = "0A"  # TCP state LISTEN in /proc/net/tcp


def box_ticks() -> tuple[int, int]:
    """(busy, total) CPU ticks of every core since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    idle = values[3] + values[4]  # idle and iowait
    return sum(values) - idle, sum(values)


def process_ticks(pid: int) -> int:
    """User and system CPU ticks of one process (all its threads) since it started; 0 once gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of proc(5)


def listening_pid(address: str) -> int | None:
    """The pid of this user's process listening on the port of ``address`` ("host:port" or a URI)."""
    port = urlparse(address if "//" in address else f"//{address}").port
    if port is None:
        return None
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            columns = line.split()
            if columns[3] == _LISTEN and int(columns[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{columns[9]}]")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in inodes for fd in (entry / "fd").iterdir()):
                return int(entry.name)
        except OSError:
            continue
    return None


@dataclass
class CpuWindow:
    """Start it, run the work, stop it (again for more stretches of the same work: they add up); then
    ``cores`` says how many cores the box and each process used on average over the stretches."""

    processes: dict[str, int | None]
    _started: float = 0.0
    _box_at_start: tuple[int, int] = (0, 0)
    _ticks_at_start: dict[str, int] = field(default_factory=dict)
    _wall: float = 0.0
    _box: list[int] = field(default_factory=lambda: [0, 0])
    _ticks: dict[str, int] = field(default_factory=dict)

    def start(self) -> CpuWindow:
        self._started = time.monotonic()
        self._box_at_start = box_ticks()
        self._ticks_at_start = {name: process_ticks(pid) for name, pid in self.processes.items() if pid is not None}
        return self

    def stop(self) -> CpuWindow:
        self._wall += time.monotonic() - self._started
        busy, total = box_ticks()
        self._box[0] += busy - self._box_at_start[0]
        self._box[1] += total - self._box_at_start[1]
        for name, before in self._ticks_at_start.items():
            pid = self.processes[name]
            assert pid is not None
            self._ticks[name] = self._ticks.get(name, 0) + process_ticks(pid) - before
        return self

    @property
    def cores(self) -> dict[str, float]:
        wall = max(self._wall, 1e-9)
        used = {"box": (os.cpu_count() or 1) * self._box[0] / max(1, self._box[1])}
        return used | {name: ticks / TICKS_PER_SECOND / wall for name, ticks in self._ticks.items()}

    def seconds(self, name: str) -> float:
        """The CPU seconds (user and system) one named process used over the stretches."""
        return self._ticks.get(name, 0) / TICKS_PER_SECOND

    def summary(self) -> str:
        return ", ".join(f"{name} {used:.2f}" for name, used in self.cores.items()) + f" cores of {os.cpu_count()}"
