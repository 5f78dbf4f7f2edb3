"""Freed memory given back to the system (glibc's malloc_trim), checked in a fresh interpreter: the test
session's own heap would blur the numbers."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from acidclean.shared import memory_release
from acidclean.shared.memory_release import MemoryReleaser, keep_large_blocks_out_of_the_heap, release_free_memory

# Run in a fresh interpreter before each script below: its resident anonymous memory, in KB.
ANON_KB = """
import sys

def anon_kb():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
"""


def run_fresh(script: str, *args: object) -> list[str]:
    """What ``script`` (after :data:`ANON_KB`) prints, run with ``args`` in a fresh interpreter."""
    result = subprocess.run(
        [sys.executable, "-c", ANON_KB + script, *map(str, args)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


# Many 100 KB buffers (below glibc's mmap threshold: they come from its heap) with a 1 KB buffer kept
# alive after each (also from glibc's heap: Python's own allocator serves only objects up to 512
# bytes), so freeing the large ones leaves holes that free() alone never returns.
FRAGMENTED_THEN_RELEASED = """
from acidclean.shared.memory_release import release_free_memory

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
    before_kb, after_kb, released = run_fresh(FRAGMENTED_THEN_RELEASED, 100_000, 1000)
    assert released == "True"
    # About 200 MB were freed in holes; glibc kept them until the release, which gave back most of it.
    before, after = int(before_kb), int(after_kb)
    assert before - after > 100_000 and after < before / 4, (before, after)


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


# One 4 MB block freed (glibc then raises its mmap threshold to 4 MB), then many 200 KB buffers with a
# small one kept after each, as above: with the threshold left to glibc they come from its heaps and
# their holes stay resident once freed; fixed at 128 KB, each has a mapping of its own, unmapped on free.
LARGE_BLOCKS_FREED = """
from acidclean.shared.memory_release import keep_large_blocks_out_of_the_heap

fixed = sys.argv[1] == "fixed" and keep_large_blocks_out_of_the_heap()
raise_threshold = b"r" * int(sys.argv[2])
del raise_threshold
start = anon_kb()
large, small = int(sys.argv[3]), int(sys.argv[4])
kept, buffers = [], []
for index in range(1000):
    buffers.append(b"x" * large)
    kept.append(b"k" * small)  # a size known only at run time, as above
del buffers
print(fixed, anon_kb() - start)
"""


def _grown_kb_after_freeing_large_blocks(mode: str) -> tuple[str, int]:
    fixed, grown_kb = run_fresh(LARGE_BLOCKS_FREED, mode, 4 << 20, 200_000, 1000)
    return fixed, int(grown_kb)


@pytest.mark.skipif(memory_release._MALLOPT is None, reason="the C library has no mallopt (not glibc)")
def test_large_blocks_are_given_back_when_freed_once_the_threshold_is_fixed() -> None:
    # The premise: after a 4 MB block was freed, glibc keeps 1,000 freed 200 KB buffers (200 MB) resident.
    fixed, kept_kb = _grown_kb_after_freeing_large_blocks("default")
    assert fixed == "False" and kept_kb > 150_000, kept_kb
    fixed, kept_kb = _grown_kb_after_freeing_large_blocks("fixed")
    assert fixed == "True" and kept_kb < 20_000, kept_kb


def test_without_mallopt_the_threshold_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory_release, "_MALLOPT", None)
    assert keep_large_blocks_out_of_the_heap() is False
