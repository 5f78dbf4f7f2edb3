"""Python's cyclic garbage collector set for a service that allocates many short-lived objects, and
paused for a read that keeps many objects alive and makes no reference cycles (the audit's fold).

With the default thresholds (a collection every 700 net allocations) a cleaner re-checking thousands
of delay records an interval runs the young collection constantly, and every full collection walks
every object alive since start-up (modules, the event models' schemas, clients). Measured on the
cleaner's re-check path (5,000 waiting tables, fakes, no Kafka, quiet machine): 130-156 us of CPU a
delay record with the defaults, 112-115 us with start-up objects frozen and a young generation of
10,000; in the real process, whose start-up leaves far more objects (clients, every event model's
schema), one process re-checked 9,382 delay records an interval instead of 4,965-6,240, p99 lateness
318 ms instead of 10-45 s (10,000 waiting tables, interval 2 s, ``tests/bench/bench_scale.py``),
at 250 MB instead of 194-220 MB. A young generation of 50,000 was no faster and left the process
larger. Reference cycles are still collected, only in larger steps.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_GENERATION = 10_000


def tune_for_throughput() -> None:
    """Collect once, move every object alive now out of the collector's sight (it is never collected
    anyway), and collect the young generation every ``YOUNG_GENERATION`` allocations."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION, middle, old)


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """The collector off for the block (reference counting still frees everything without cycles)."""
    # The audit's fold keeps tens of thousands of small objects alive while it reads, and the cyclic
    # collector re-scanning them cost more than decoding itself (measured 2-3x on 100,000 events).
    # Nothing the audit builds forms a reference cycle, so reference counting still frees it all.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
