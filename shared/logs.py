"""JSON-line logs for acidclean's services: one object per line, with the event id, table and attempt.

Operators grep and ship these lines; every record carries ``ts`` (UTC, ISO 8601), ``level``,
``logger`` and ``message``, plus the fields a call passes with :func:`log` (``event_id``,
``vacuum_id``, ``table``, ``partition``, ``attempt``, ``outcome``...). Nothing is global until
:func:`configure_json_logging` is called by the command line.
"""

from __future__ import annotations

import logging
import queue
import sys
import threading
from datetime import datetime, timezone
from typing import Any, TextIO

import msgspec

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
        # msgspec, not json.dumps: 1.5 against 16 us a line with an event id, and a cleaner at 100,000
        # parked vacuums writes hundreds of thousands of lines. UUIDs and datetimes come out as ISO
        # strings, anything else it does not know as str().
        return _ENCODER.encode(line).decode("utf-8")


_ENCODER = msgspec.json.Encoder(enc_hook=str)


class QueuedLineHandler(logging.Handler):
    """Formats each record in the thread that logs it and queues the line; one writer thread writes
    whatever has queued up in one write and one flush.

    A ``StreamHandler`` made two system calls a line under its lock, and each released the GIL: with
    four workers logging, threads queued for the lock and the GIL, and logging took 8% of a cleaner's
    samples at 100,000 parked vacuums. A line is written within milliseconds; :meth:`flush` (called by
    ``logging.shutdown`` at exit, and by :func:`flush_logs` before an abrupt exit) waits until every
    line queued before it is written. A SIGKILL loses only the lines still queued."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream
        self._lines: queue.SimpleQueue[str | threading.Event | None] = queue.SimpleQueue()  # None: stop
        self.writer = threading.Thread(target=self._write_lines, name="log-writer", daemon=True)
        self.writer.start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._lines.put(self.format(record))
        except Exception:  # logging never raises into the caller (as StreamHandler)
            self.handleError(record)

    def flush(self) -> None:
        """Return once every line queued so far is written (at most 5 s: a stuck stream never hangs exit)."""
        if not self.writer.is_alive():
            return
        written = threading.Event()
        self._lines.put(written)
        written.wait(5.0)

    def close(self) -> None:
        """Write what is queued, then stop the writer thread."""
        self.flush()
        self._lines.put(None)
        super().close()

    def _write_lines(self) -> None:
        while True:
            item = self._lines.get()
            if item is None:
                return
            lines: list[str] = []
            waiting: list[threading.Event] = []
            while True:
                if item is None:
                    self._lines.put(None)  # stop once these lines are written
                    break
                if isinstance(item, threading.Event):
                    waiting.append(item)
                else:
                    lines.append(item)
                if len(lines) >= _LINES_PER_WRITE:
                    break
                try:
                    item = self._lines.get_nowait()
                except queue.Empty:
                    break
            try:
                if lines:
                    self.stream.write("\n".join(lines) + "\n")
                self.stream.flush()
            except Exception:  # a closed or full stream: the lines are lost, the service goes on
                pass
            for event in waiting:
                event.set()


_LINES_PER_WRITE = 1000


def flush_logs() -> None:
    """Write out every queued log line (before an ``os._exit`` or a SIGKILL of this process)."""
    for handler in logging.getLogger("acidclean").handlers:
        handler.flush()


def configure_json_logging(level: str = "INFO", stream: TextIO | None = None) -> None:
    """Send acidclean's logs to ``stream`` (stderr) as JSON lines, written by a thread of their own."""
    handler = QueuedLineHandler(stream or sys.stderr)
    handler.setFormatter(JsonLineFormatter())
    root = logging.getLogger("acidclean")
    for previous in root.handlers:
        previous.close()  # writes what it has queued first
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def log(logger: logging.Logger, level: int, message: str, **fields: Any) -> None:
    """Log ``message`` with structured ``fields`` (None values are left out)."""
    if logger.isEnabledFor(level):
        logger.log(level, message, extra={_FIELDS: {k: v for k, v in fields.items() if v is not None}})
