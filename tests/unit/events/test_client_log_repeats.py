"""librdkafka's repeated lines (a dead broker is retried many times a second) reach the log once per window."""

from __future__ import annotations

import logging

from acidclean.shared.bus.client_logs import RepeatFilter


def record(message: str) -> logging.LogRecord:
    return logging.LogRecord("acidclean.kafka", logging.ERROR, __file__, 1, message, (), None)


def test_a_repeated_line_passes_once_per_window_then_says_how_often_it_was_held() -> None:
    now = [0.0]
    repeats = RepeatFilter(window_s=30, clock=lambda: now[0])
    passed = []
    for step in range(200):  # 20 s of a failure every 100 ms
        now[0] = step * 0.1
        line = record("FAIL [consumer-2]: 127.0.0.1:9092/bootstrap: Connect failed: Connection refused")
        if repeats.filter(line):
            passed.append(line.getMessage())
    assert len(passed) == 1
    now[0] = 31.0
    later = record("FAIL [consumer-2]: 127.0.0.1:9092/bootstrap: Connect failed: Connection refused")
    assert repeats.filter(later)
    assert later.getMessage().endswith("(and 199 more times in the last 30 s)")
    assert repeats.filter(record("another line"))  # other lines are not held back
