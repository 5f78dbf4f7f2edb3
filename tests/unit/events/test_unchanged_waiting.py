"""A DelayedVacuums' ``unchanged`` summary must describe its entries exactly: the union of the lock ids
they wait on and their oldest commits, and only when every vacuum waits on its locks alone."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from acidclean.schemas.events import DelayedVacuums, WaitingVacuum

from .factories import T0, delayed_vacuums, lock, unchanged, vacuum

STUCK_SINCE = T0 + timedelta(hours=1)


# Two vacuums of one key: the older waits on locks 3 and 5, the newer on lock 4.
OLDER = vacuum(occurred_at=T0, lock_snapshot=[lock(5), lock(3)])
NEWER = vacuum(occurred_at=T0 + timedelta(minutes=1), lock_snapshot=[lock(4)])


def _entries(*, older_stuck: bool = False, newer_stuck: bool = False, **newer_changes: Any) -> list[WaitingVacuum]:
    newer: dict[str, Any] = {
        "vacuum": NEWER,
        "attempt": 1,
        "locks_held": NEWER.lock_snapshot,
        "stuck": newer_stuck,
        "stuck_since": STUCK_SINCE if newer_stuck else None,
    }
    return [
        WaitingVacuum(
            vacuum=OLDER,
            attempt=2,
            locks_held=OLDER.lock_snapshot,
            stuck=older_stuck,
            stuck_since=STUCK_SINCE if older_stuck else None,
        ),
        WaitingVacuum(**{**newer, **newer_changes}),
    ]


def _envelope(waiting: list[WaitingVacuum], **summary: Any) -> DelayedVacuums:
    return delayed_vacuums(OLDER, NEWER, waiting=waiting, unchanged=unchanged(waiting, 3, **summary))


def test_a_summary_that_describes_its_entries_is_accepted_and_survives_the_wire() -> None:
    envelope = _envelope(_entries())
    assert envelope.unchanged is not None
    assert envelope.unchanged.lock_ids == [3, 4, 5]
    assert envelope.unchanged.checks == 3
    assert envelope.unchanged.oldest_commit == T0
    assert envelope.unchanged.oldest_unstuck_commit == T0
    assert DelayedVacuums.model_validate_json(envelope.model_dump_json()) == envelope


def test_the_oldest_unstuck_commit_skips_the_stuck_vacuums() -> None:
    envelope = _envelope(_entries(older_stuck=True))
    assert envelope.unchanged is not None
    assert envelope.unchanged.oldest_commit == T0
    assert envelope.unchanged.oldest_unstuck_commit == T0 + timedelta(minutes=1)


def test_a_summary_is_optional_and_old_envelopes_still_read() -> None:
    body = json.loads(delayed_vacuums(OLDER, NEWER).model_dump_json())
    del body["unchanged"]
    assert DelayedVacuums.model_validate_json(json.dumps(body)).unchanged is None


@pytest.mark.parametrize(
    ("summary", "message"),
    [
        ({"lock_ids": [3, 4]}, r"lock_ids must be \[3, 4, 5\]"),  # one missing
        ({"lock_ids": [3, 4, 5, 6]}, r"lock_ids must be \[3, 4, 5\]"),  # one extra
        ({"lock_ids": [5, 4, 3]}, r"lock_ids must be \[3, 4, 5\]"),  # unsorted
        ({"lock_ids": [3, 3, 4, 5]}, r"lock_ids must be \[3, 4, 5\]"),  # twice
        ({"oldest_commit": T0 + timedelta(minutes=1)}, "oldest_commit must be when the oldest vacuum committed"),
        ({"oldest_unstuck_commit": T0 + timedelta(minutes=1)}, "oldest_unstuck_commit must be when the oldest"),
        ({"oldest_unstuck_commit": None}, "oldest_unstuck_commit must be when the oldest"),
    ],
    ids=["missing_lock", "extra_lock", "unsorted", "twice", "oldest_commit", "oldest_unstuck", "unstuck_as_null"],
)
def test_a_summary_that_misstates_its_entries_is_refused(summary: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=f"unchanged does not match the waiting vacuums: {message}"):
        _envelope(_entries(), **summary)


def test_when_every_vacuum_is_stuck_the_oldest_unstuck_commit_must_be_null() -> None:
    waiting = _entries(older_stuck=True, newer_stuck=True)
    assert _envelope(waiting).unchanged is not None  # null, as the factory computes it
    with pytest.raises(ValidationError, match="null if all are"):
        _envelope(waiting, oldest_unstuck_commit=T0)


@pytest.mark.parametrize(
    "newer_changes",
    [{"locks_held": []}, {"check_error": "thrift://hms:9083 timed out"}, {"open_txns": [11]}],
    ids=["no_locks_held", "check_error", "open_txns"],
)
def test_a_summary_is_refused_when_a_vacuum_waits_on_something_other_than_its_locks(
    newer_changes: dict[str, Any],
) -> None:
    waiting = _entries(**newer_changes)
    # The summary the other entries would give: only the entry waiting on something else is wrong.
    summary = unchanged(_entries(), 3)
    with pytest.raises(ValidationError, match="a vacuum waits on something other than its locks"):
        _envelope(waiting, lock_ids=summary.lock_ids)


@pytest.mark.parametrize(
    ("field", "value"),
    [("lock_ids", []), ("checks", -1), ("checks", "3"), ("checks", True), ("oldest_unstuck_commit", "missing")],
)
def test_the_summary_fields_keep_their_own_limits(field: str, value: Any) -> None:
    body = json.loads(_envelope(_entries()).model_dump_json())
    if value == "missing":
        del body["unchanged"][field]
    else:
        body["unchanged"][field] = value
    with pytest.raises(ValidationError, match=f"unchanged.{field}"):
        DelayedVacuums.model_validate_json(json.dumps(body))
