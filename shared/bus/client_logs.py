"""Where librdkafka's own log lines go: a Python logger, silent unless the application shows it.

librdkafka prints every failed connection attempt to stderr, many a second while a broker is down.
acidclean reports such failures itself, as one actionable error, so by default the client's lines
go to the ``acidclean.kafka`` logger, which has a NullHandler: they appear only where an application
configured logging (the cleaner's JSON logs do). A ``logger`` or ``log_level`` in the user's Kafka
settings wins. A line repeated within ``REPEAT_WINDOW_S`` (a dead broker is retried many times a
second) is let through once per window, with how often it was held back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

REPEAT_WINDOW_S = 30.0


class RepeatFilter(logging.Filter):
    """Lets a message through once per ``window_s``; the next one let through says how many were held."""

    def __init__(self, window_s: float = REPEAT_WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window_s = window_s
        self._clock = clock
        self._seen: dict[str, tuple[float, int]] = {}  # message -> (when last let through, held since)
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        now = self._clock()
        with self._lock:
            last, held = self._seen.get(message, (None, 0))
            if last is not None and now - last < self.window_s:
                self._seen[message] = (last, held + 1)
                return False
            if len(self._seen) > 1000:  # bounded: forget the oldest half
                for key in sorted(self._seen, key=lambda k: self._seen[k][0])[:500]:
                    del self._seen[key]
            self._seen[message] = (now, 0)
        if held:
            record.msg = f"{message} (and {held} more times in the last {self.window_s:.0f} s)"
            record.args = ()
        return True


KAFKA_LOGGER = logging.getLogger("acidclean.kafka")
KAFKA_LOGGER.addHandler(logging.NullHandler())
KAFKA_LOGGER.addFilter(RepeatFilter())


def with_client_logger(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` plus the acidclean Kafka logger, unless it already says where logs go."""
    result = dict(config)
    if "logger" not in result and "log_level" not in result:
        result["logger"] = KAFKA_LOGGER
    return result
