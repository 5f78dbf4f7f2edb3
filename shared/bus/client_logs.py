"""Where librdkafka's own log lines go: a Python logger, silent unless the application shows it.

librdkafka prints every failed connection attempt to stderr, many a second while a broker is down.
acidclean reports such failures itself, as one actionable error, so by default the client's lines
go to the ``acidclean.kafka`` logger, which has a NullHandler: they appear only where an application
configured logging (the cleaner's JSON logs do). A ``logger`` or ``log_level`` in the user's Kafka
settings wins.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

KAFKA_LOGGER = logging.getLogger("acidclean.kafka")
KAFKA_LOGGER.addHandler(logging.NullHandler())


def with_client_logger(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` plus the acidclean Kafka logger, unless it already says where logs go."""
    result = dict(config)
    if "logger" not in result and "log_level" not in result:
        result["logger"] = KAFKA_LOGGER
    return result
