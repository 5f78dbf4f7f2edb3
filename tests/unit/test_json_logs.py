"""The JSON-line log format every service writes: one object per line, fields as given."""

from __future__ import annotations

import io
import json
import logging
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from acidclean.shared.logs import QueuedLineHandler, configure_json_logging, flush_logs, log


@pytest.fixture
def logged() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    root = logging.getLogger("acidclean")
    handlers, level, propagate = root.handlers[:], root.level, root.propagate
    stream = io.StringIO()
    configure_json_logging("INFO", stream)
    ours = root.handlers[:]
    try:
        yield logging.getLogger("acidclean.cleaner"), stream
    finally:
        for handler in ours:
            handler.close()
        root.handlers[:], root.propagate = handlers, propagate
        root.setLevel(level)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    flush_logs()
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_each_record_is_one_json_object_with_its_fields_and_none_left_out(
    logged: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = logged
    event_id = uuid.uuid4()
    due = datetime(2026, 11, 28, 2, 0, tzinfo=timezone.utc)
    log(
        logger,
        logging.INFO,
        "not ready;\n2 vacuum(s) delayed together",
        event_id=event_id,
        table="db.t",
        partition=None,
        vacuums=2,
        due_at=due,
        removed=["delta_1_1", "delta_2_2"],
        where=Path("/warehouse/t"),
    )
    log(logger, logging.DEBUG, "below the level: not written", table="db.t")

    [line] = lines(stream)
    assert line["level"] == "info"
    assert line["logger"] == "acidclean.cleaner"
    assert line["message"] == "not ready;\n2 vacuum(s) delayed together"
    assert line["event_id"] == str(event_id)
    assert line["due_at"] == "2026-11-28T02:00:00Z"
    assert line["removed"] == ["delta_1_1", "delta_2_2"]
    assert line["where"] == "/warehouse/t"  # a type the encoder does not know: its str()
    assert line["vacuums"] == 2 and line["table"] == "db.t"
    assert "partition" not in line
    assert datetime.fromisoformat(str(line["ts"])).tzinfo is not None


def test_an_exception_is_carried_in_the_line(logged: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = logged
    try:
        raise ValueError("the metastore said no")
    except ValueError:
        logger.exception("check failed")
    [line] = lines(stream)
    assert line["level"] == "error"
    assert "ValueError: the metastore said no" in str(line["exception"])


def test_lines_logged_by_many_threads_are_each_written_once_whole_and_flush_waits_for_them(
    logged: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = logged

    def worker(number: int) -> None:
        for line in range(500):
            log(logger, logging.INFO, "cleaned", worker=number, line=line, removed=["delta_1_1"] * 20)

    threads = [threading.Thread(target=worker, args=(number,)) for number in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    written = lines(stream)  # flushes first: everything logged before is written when it returns
    assert sorted((line["worker"], line["line"]) for line in written) == [
        (number, line) for number in range(4) for line in range(500)
    ]
    by_worker = [[line["line"] for line in written if line["worker"] == number] for number in range(4)]
    assert by_worker == [list(range(500))] * 4  # each thread's lines in the order it logged them


def test_closing_writes_what_is_queued_and_stops_the_writer() -> None:
    stream = io.StringIO()
    handler = QueuedLineHandler(stream)
    for number in range(100):
        handler.handle(logging.LogRecord("acidclean.cleaner", logging.INFO, __file__, 1, f"line {number}", None, None))
    handler.close()
    assert stream.getvalue().splitlines() == [f"line {number}" for number in range(100)]
    handler.writer.join(timeout=5)
    assert not handler.writer.is_alive()
