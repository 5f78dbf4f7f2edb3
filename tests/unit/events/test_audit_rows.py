"""The fold builds its rows without AuditRow.__init__ (for speed): they must be the rows __init__ makes."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from acidclean.consumers.audit import AuditRow, fold

from .factories import T0, delay, delayed_vacuums, done, lock, rejected, requested, started, vacuum, vacuum_started


def test_every_row_has_every_field_and_equals_the_row_init_makes() -> None:
    cleaned, waiting, refused = (
        vacuum(occurred_at=T0 + timedelta(minutes=n), lock_snapshot=[lock(n)]) for n in (0, 1, 2)
    )
    asked = requested(occurred_at=T0 + timedelta(minutes=3))
    events: list[Any] = [
        cleaned,
        delay(cleaned, 1),
        started(cleaned),
        done(cleaned),
        waiting,
        delayed_vacuums(waiting, refused, attempt=2),
        rejected(refused),
        asked,
        vacuum_started(asked),
    ]
    rows = fold(events, now=T0 + timedelta(hours=1), overdue_after=timedelta(minutes=1))
    assert sorted(row.state for row in rows) == ["cleaned", "overdue", "rejected", "running"]
    names = [field.name for field in dataclasses.fields(AuditRow)]
    for row in rows:
        assert list(vars(row)) == names
        rebuilt = AuditRow(**vars(row))
        assert rebuilt == row and hash(rebuilt) == hash(row) and repr(rebuilt) == repr(row)
        assert dataclasses.replace(row) == row
