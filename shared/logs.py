"""JSON-line logs for acidclean's services: one object per line, with the event id, table and attempt.

Operators grep and ship these lines; every record carries ``ts`` (UTC, ISO 8601), ``level``,
``logger`` and ``message``, plus the fields a call passes with :func:`log` (``event_id``,
``vacuum_id``, ``table``, ``partition``, ``attempt``, ``outcome``...). Nothing is global until
:func:`configure_json_logging` is called by the command line.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone
from typing import Any, TextIO

LOGGER_NAME = "acidclean.cleaner"
_FIELDS = "acidclean_fields"


class JsonLineFormatter(logging.Formatter):
    """Formats a record as one JSON object on one line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(getattr(record, _FIELDS, {}))
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, separators=(",", ":"))


def configure_json_logging(level: str = "INFO", stream: TextIO | None = None) -> None:
    """Send acidclean's logs to ``stream`` (stderr) as JSON lines."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonLineFormatter())
    root = logging.getLogger("acidclean")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def log(logger: logging.Logger, level: int, message: str, **fields: Any) -> None:
    """Log ``message`` with structured ``fields`` (None values are left out)."""
    if logger.isEnabledFor(level):
        logger.log(level, message, extra={_FIELDS: {k: v for k, v in fields.items() if v is not None}})
