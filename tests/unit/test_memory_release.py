"""Freed memory given back to the system (glibc's malloc_trim), checked in a fresh interpreter: the test
session's own heap would blur the numbers."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from acidclean.shared import memory_release
from acidclean.shared.memory_release import MemoryReleaser, release_free_memory

# Many 100 KB buffers (below glibc's mmap threshold: they come from its heap) with a 1 KB buffer kept
# alive after each (also from glibc's heap: Python's own allocator serves only objects up to 512
# bytes), so freeing the large ones leaves holes that free() alone never returns.
FRAGMENTED_THEN_RELEASED = """
import sys
from acidclean.shared.memory_release import release_free_memory

def anon_kb():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1])

large, small = int(sys.argv[1]), int(sys.argv[2])
kept, buffers = [], []
for index in range(2000):
    buffers.append(b"x" * large)  # written: every page resident
    kept.append(b"k" * small)  # a size known only at run time: b"k" * 1000 is one folded constant
del buffers
before = anon_kb()
released = release_free_memory()
print(before, anon_kb(), released)
"""


@pytest.mark.skipif(memory_release._TRIM is None, reason="the C library has no malloc_trim (not glibc)")
def test_memory_freed_in_holes_of_the_heap_goes_back_to_the_system() -> None:
    result = subprocess.run(
        [sys.executable, "-c", FRAGMENTED_THEN_RELEASED, "100000", "1000"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    before_kb, after_kb, released = result.stdout.split()
    assert released == "True"
    # About 200 MB were freed in holes; glibc kept them until the release, which gave back most of it.
    before, after = int(before_kb), int(after_kb)
    assert before - after > 100_000 and after < before / 4, result.stdout


def test_without_malloc_trim_nothing_is_released_and_the_releaser_starts_no_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(memory_release, "_TRIM", None)
    assert release_free_memory() is False
    releaser = MemoryReleaser(every_s=0.01).start()
    time.sleep(0.05)
    assert releaser.releases == 0
    assert not any(thread.name == "memory-release" for thread in threading.enumerate())
    releaser.stop()


def test_the_releaser_releases_on_its_period_and_its_thread_ends_on_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(memory_release, "_TRIM", calls.append)
    releaser = MemoryReleaser(every_s=0.01).start()
    deadline = time.monotonic() + 5
    while len(calls) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    releaser.stop()
    assert len(calls) >= 3 and calls[0] == 0
    assert not any(thread.name == "memory-release" for thread in threading.enumerate())
    stopped_at = len(calls)
    time.sleep(0.05)
    assert len(calls) == stopped_at
