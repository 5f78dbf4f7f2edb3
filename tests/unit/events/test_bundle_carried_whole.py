"""A bundle carried on whole (issue 14): its summary, and when a check may write it on without reading
its members. Pure: no loop, no bus. Only ever "still waiting": every case where a member could be
ready, stuck or unreadable must give None (checked member by member)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import msgspec
import pytest

from acidclean.schemas.events import DelayEnvelope
from acidclean.shared.bus.bundle import (
    MAX_WHOLE_CARRIES,
    SUMMARY_HEADER,
    Bundle,
    BundleSummary,
    ReadBundle,
    carried_on,
    summary_of_members,
    unpack,
    whole_carry_refused,
)
from acidclean.shared.bus.records import OutgoingRecord, RawRecord

from .factories import delay, vacuum

pytestmark = [pytest.mark.rule1]

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
HOUR = 3600.0


def as_read(record: OutgoingRecord, offset: int = 7) -> RawRecord:
    return RawRecord("acme.delay", record.partition or 0, offset, record.key, record.value, record.headers)


def member(index: int) -> DelayEnvelope:
    return delay(vacuum(table=f"sales.t{index}", partition=None), occurred_at=NOW, due_at=NOW + timedelta(seconds=2))


def summarised(lock_ids: list[list[int]], carries_left: list[int]) -> ReadBundle:
    members = tuple(member(index) for index in range(len(lock_ids)))
    summary = summary_of_members(lock_ids, carries_left, [NOW - timedelta(minutes=5)] * len(lock_ids))
    bundle = Bundle(uuid.uuid4(), "acme", 3, members, NOW, NOW - timedelta(minutes=5), summary)
    read = unpack(as_read(bundle.outgoing("test")))
    assert read is not None
    return read


def test_a_read_bundle_keeps_a_view_of_its_members_bytes_not_a_copy() -> None:
    """A paused delay partition holds up to 16 MB of bundles: a copy of each one's members doubled that."""
    read = summarised([[1, 2], [2, 3]], [5, 9])
    assert isinstance(read.member_bytes, memoryview) and read.member_bytes.obj is read.source.value
    assert read.summary is not None and [m.key for m in read.members] == [b"acme/sales.t0", b"acme/sales.t1"]


@pytest.mark.parametrize("members", [b"[]", b" []\n"])
def test_a_summarised_bundle_with_no_members_does_not_read(members: bytes) -> None:
    value = summarised([[1]], [5]).source
    cut = value.value.index(b',"records":') + len(b',"records":')
    empty = RawRecord(
        value.topic, value.partition, value.offset, value.key, value.value[:cut] + members + b"}", value.headers
    )
    assert unpack(empty) is None


def test_a_bundle_whose_locks_are_all_listed_is_carried_on_with_the_same_member_bytes() -> None:
    read = summarised([[1, 2], [2, 3]], [5, 9])
    assert read.summary is not None and read.summary.lock_ids == [1, 2, 3]
    assert read.summary.carries_left == 5 and read.summary.carried == 0
    later = NOW + timedelta(seconds=2)
    carried = carried_on(read, partition=3, held_ids={1, 2, 3, 4}, checked_at=later, due_at_ms=99, max_wait_s=HOUR)
    assert carried is not None
    again = carried_on(read, partition=3, held_ids={1, 2, 3}, checked_at=later, due_at_ms=99, max_wait_s=HOUR)
    assert again is not None and again.event_id == carried.event_id  # a replay writes the same id
    out = carried.outgoing("test")
    headers = dict(out.headers)
    assert headers["causation_id"] == str(read.event_id).encode()
    assert int.from_bytes(headers["x-due-at"], "big", signed=True) == 99
    assert out.partition == 3
    next_read = unpack(as_read(out))
    assert next_read is not None and next_read.event_id == carried.event_id != read.event_id
    assert [(m.key, m.headers, m.value) for m in next_read.members] == [
        (m.key, m.headers, m.value) for m in read.members
    ]
    assert next_read.summary is not None
    assert next_read.summary.carries_left == 4 and next_read.summary.carried == 1
    assert next_read.summary.lock_ids == [1, 2, 3]


@pytest.mark.parametrize(
    ("held", "checked_at", "reason", "why"),
    [
        ({1, 2}, NOW, "lock_gone", "lock 3 is gone: a member may be ready"),
        (set(), NOW, "lock_gone", "no lock listed"),
        ({1, 2, 3}, NOW + timedelta(hours=1), "max_wait", "a vacuum near the max wait: its full check counts it stuck"),
    ],
)
def test_a_bundle_a_member_of_which_may_be_ready_or_stuck_is_checked_member_by_member(
    held: set[int], checked_at: datetime, reason: str, why: str
) -> None:
    read = summarised([[1, 2], [2, 3]], [5, 9])
    assert carried_on(read, partition=3, held_ids=held, checked_at=checked_at, due_at_ms=1, max_wait_s=HOUR) is None, (
        why
    )
    assert whole_carry_refused(read, held_ids=held, checked_at=checked_at, max_wait_s=HOUR) == reason
    assert whole_carry_refused(read, held_ids={1, 2, 3}, checked_at=NOW, max_wait_s=HOUR) is None


def test_a_bundle_with_no_carries_left_is_checked_member_by_member() -> None:
    read = summarised([[1]], [1])
    once = carried_on(read, partition=0, held_ids={1}, checked_at=NOW, due_at_ms=1, max_wait_s=HOUR)
    assert once is not None
    next_read = unpack(as_read(once.outgoing("test")))
    assert next_read is not None and next_read.summary is not None and next_read.summary.carries_left == 0
    assert carried_on(next_read, partition=0, held_ids={1}, checked_at=NOW, due_at_ms=1, max_wait_s=HOUR) is None
    assert whole_carry_refused(next_read, held_ids={1}, checked_at=NOW, max_wait_s=HOUR) == "no_carries_left"


def test_no_summary_when_a_member_must_be_read_in_full_at_its_next_check() -> None:
    assert summary_of_members([[1], [2]], [3, 0], [NOW, NOW]) is None
    assert summary_of_members([], [], []) is None


def with_header(record: OutgoingRecord, value: bytes | None = None, summary: bytes | None = None) -> RawRecord:
    headers = tuple(
        (name, summary if name == SUMMARY_HEADER and summary is not None else data) for name, data in record.headers
    )
    return RawRecord("acme.delay", 0, 1, record.key, record.value if value is None else value, headers)


def test_a_bundle_whose_members_were_changed_after_its_summary_was_written_has_no_summary() -> None:
    read = summarised([[1], [2]], [5, 5])
    record = Bundle(read.event_id, "acme", 0, (member(0), member(1)), NOW, NOW, read.summary).outgoing("test")
    assert unpack(with_header(record)) is not None and unpack(with_header(record)).summary is not None  # type: ignore[union-attr]
    tampered = record.value.replace(b"sales.t1", b"sales.t9")
    assert tampered != record.value
    read_again = unpack(with_header(record, value=tampered))
    assert read_again is not None and read_again.summary is None and read_again.records is None


@pytest.mark.parametrize(
    "summary",
    [
        b"not json",
        b'{"lock_ids": [], "carries_left": 3, "carried": 0, "oldest_commit": "2026-03-01T12:00:00Z"}',
        b'{"lock_ids": [1], "carries_left": -1, "carried": 0, "oldest_commit": "2026-03-01T12:00:00Z"}',
        b'{"lock_ids": [1], "carries_left": %d, "carried": 0, "oldest_commit": "2026-03-01T12:00:00Z"}'
        % (MAX_WHOLE_CARRIES + 1),
        b'{"lock_ids": [1], "carries_left": 3, "carried": 0, "oldest_commit": "2026-03-01T12:00:00"}',
        b'{"lock_ids": [1], "carries_left": 3, "carried": 0, "oldest_commit": "x", "extra": 1}',
    ],
)
def test_a_summary_that_does_not_read_as_one_must_is_ignored_and_the_bundle_still_reads(summary: bytes) -> None:
    read = summarised([[1]], [5])
    record = Bundle(read.event_id, "acme", 0, (member(0),), NOW, NOW, read.summary).outgoing("test")
    bad = unpack(with_header(record, summary=summary))
    assert bad is not None and len(bad.members) == 1  # checked member by member, as any bundle
    assert bad.summary is None
    assert carried_on(bad, partition=0, held_ids={1}, checked_at=NOW, due_at_ms=1, max_wait_s=HOUR) is None
    assert whole_carry_refused(bad, held_ids={1}, checked_at=NOW, max_wait_s=HOUR) == "no_summary"


def test_the_summary_header_round_trips() -> None:
    summary = BundleSummary(lock_ids=[4, 5], carries_left=2, carried=1, oldest_commit="2026-03-01T12:00:00Z")
    assert msgspec.json.decode(msgspec.json.encode(summary), type=BundleSummary) == summary
