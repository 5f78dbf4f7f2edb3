"""How long a Python thread keeps the GIL while another waits for it, set for a service whose threads
mostly wait on sockets (the cleaner: the loop on Kafka, the workers and the lock-list renewal on the
metastore and the broker).

Every blocking call gives the GIL up, and taking it back waits until the thread holding it is asked
to let go: by default after 5 ms. A thread reading a reply in many pieces pays that per piece while
other threads compute. Measured: a 1.5 MB reply read in 367 pieces (a 10,000-lock ``show_locks``)
took 2.6-2.9 s with three busy threads at 5 ms, 0.6 s at 1 ms, 25 ms alone; the loop thread pays it
too each time a delay record comes due.
"""

from __future__ import annotations

import sys

SWITCH_INTERVAL_S = 0.001


def shorten_thread_switches() -> None:
    """Ask the thread holding the GIL to let a waiting thread go after ``SWITCH_INTERVAL_S``."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)
