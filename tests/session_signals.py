"""A test session stopped by a signal still runs its fixtures' finalisers, which stop by process id
the brokers, metastores and cleaners they started.

Python's default SIGTERM kills the session at once, and a session started in the background by a
non-interactive shell inherits SIGINT ignored: either way nothing was torn down. Both now raise
``KeyboardInterrupt``, which pytest answers by tearing down every fixture set up so far.
"""

from __future__ import annotations

import signal
from types import FrameType


def stop_cleanly_on_signals() -> None:
    """SIGTERM, and SIGINT when it was ignored, interrupt the session as Ctrl-C does."""
    signal.signal(signal.SIGTERM, _interrupt)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"stopped by signal {signal.Signals(signum).name}")
