"""Memory the process freed, given back to the operating system now and then (glibc's ``malloc_trim``).

A cleaner's memory comes and goes in waves: a burst of fresh vacuums, a wave of released locks, a
bundle read in full. glibc keeps what Python frees in its heaps for reuse, and with several threads
(each its own heap) and long-lived objects among the short-lived ones, little of it ever goes back:
the resident size stays at the highest wave's. Measured on the scale bench (10,000 tables, 100,000
vacuums parked, ``tests/bench/bench_scale.py``): 209-216 MB with 10,000 parked, 324-344 MB with
100,000 once they were steady, 537 MB while the burst was taken in, and never lower after; with
``malloc_trim`` every 10 s, 182 MB and 225 MB, each call returning 40-120 MB in 4-49 ms. A trim holds
each heap's lock in turn (another thread's allocation in that heap waits) and never the interpreter
(ctypes lets go of it for the call).

A trim gives back only whole free pages, and what is free at that moment. glibc serves a block of
128 KB or more from a mapping of its own (unmapped the moment it is freed) only until the first such
block is freed: then it raises that threshold to the freed block's size, up to 32 MB, and the large
blocks after it come from the heaps. A cleaner's large blocks are bundles (up to 512 KB) and
librdkafka's fetch and produce buffers, passing through at a rate that grows with the vacuums parked.
:func:`keep_large_blocks_out_of_the_heap` fixes the threshold at 128 KB. On the scale bench at 300,000
parked, what glibc's heaps held freed (resident, not in use) went from 115 MB to 78 and 75 MB (RSS 347
and 364 MB before, 324 and 347 MB after: the run-to-run spread is as large as the gain); at 100,000
from 64 to 43 MB.

Elsewhere than glibc (musl, macOS) there is no ``malloc_trim`` or ``mallopt``: :func:`release_free_memory`
and :func:`keep_large_blocks_out_of_the_heap` do nothing there and return False, and
:class:`MemoryReleaser` says so in the log.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from acidclean.shared.logs import log

LOGGER = logging.getLogger("acidclean.memory")

RELEASE_EVERY_S = 10.0
LARGE_BLOCK_BYTES = 128 * 1024  # glibc's own starting threshold
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number in glibc's malloc.h
SLOW_RELEASE_S = 0.1  # a release slower than this is logged: other threads' allocations waited for it


def _libc(name: str) -> Any:
    """A function of the C library, looked up among the symbols the process already has (the C library
    is loaded: no search of the system's libraries at import), or None where it has none of that name."""
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None


_TRIM: Callable[[int], int] | None = _libc("malloc_trim")
_MALLOPT: Callable[[int, int], int] | None = _libc("mallopt")


def keep_large_blocks_out_of_the_heap(threshold: int = LARGE_BLOCK_BYTES) -> bool:
    """Serve every block of ``threshold`` bytes or more from a mapping of its own, given back to the
    system when it is freed, for the rest of the process (glibc otherwise raises the threshold once
    such a block is freed). False where the C library cannot (not glibc, or a refused value)."""
    if _MALLOPT is None:
        return False
    return _MALLOPT(_M_MMAP_THRESHOLD, threshold) == 1


def release_free_memory() -> bool:
    """Give the memory free in the C heaps back to the system. False where the C library cannot."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


class MemoryReleaser:
    """A daemon thread that calls :func:`release_free_memory` every ``every_s`` until :meth:`stop`."""

    def __init__(self, every_s: float = RELEASE_EVERY_S) -> None:
        self._every_s = every_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-release", daemon=True)
        self.releases = 0

    def start(self) -> MemoryReleaser:
        if _TRIM is None:
            log(LOGGER, logging.INFO, "no malloc_trim in the C library: freed memory stays until reused")
            return self
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while not self._stopped.wait(self._every_s):
            started = time.perf_counter()
            release_free_memory()
            took = time.perf_counter() - started
            self.releases += 1
            if took > SLOW_RELEASE_S:
                log(LOGGER, logging.INFO, "giving freed memory back to the system was slow", took_ms=round(took * 1000))
