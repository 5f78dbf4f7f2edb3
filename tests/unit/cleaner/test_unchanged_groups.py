"""A DelayedVacuums whose locks all stay listed is carried on unread (its ``unchanged`` summary), and
never longer than that: a released lock, a vacuum about to be stuck, the key's other delays or its
summary's check limit make the next check read every vacuum again. Safety: carrying on unread only
ever keeps vacuums waiting (nothing is deleted early), and a summary that lies about its vacuums can
delay them by at most its check limit before the models refuse the record."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from itertools import pairwise

import pytest

from acidclean.consumers.waiting import unchanged_checks_limit
from acidclean.schemas.common import event_key
from acidclean.schemas.events import MAX_UNCHANGED_CHECKS, CleanupRejected, DelayedVacuums
from acidclean.shared.acid.names import delta_name
from acidclean.shared.bus.records import RawRecord

from .fakes import LOCATION, TOPICS, FakeConsumer, Rig, lock, loop_over, run_for, vacuum
from .test_delayed_vacuums import (
    D,
    V,
    checks_so_far,
    dones,
    envelopes,
    forward_delays,
    groups,
    parked_group,
    three_waiting,
)

pytestmark = [pytest.mark.rule1, pytest.mark.rule5]

KEY = event_key("acme", "sales.orders", "ds=2025-03-14")


def recheck(loop: object, rig: Rig, consumer: FakeConsumer, seen: list[int], times: int) -> None:
    """``times`` more checks of whatever the loop parked: each delay record read back once it is due."""
    for _ in range(times):
        run_for(loop, rig, 2.1)  # type: ignore[arg-type]
        forward_delays(rig, consumer, seen)


def carried_count(rig: Rig) -> float:
    return rig.metrics.events.labels("carried_unread")._value.get()


def test_a_group_whose_lock_stays_listed_is_carried_unread_up_to_its_limit_then_read_in_full() -> None:
    rig = Rig()
    consumer, loop, seen, events = parked_group(rig)
    limit = unchanged_checks_limit(KEY)
    assert MAX_UNCHANGED_CHECKS // 2 <= limit < MAX_UNCHANGED_CHECKS
    recheck(loop, rig, consumer, seen, limit + 2)
    written = groups(rig)
    assert len(written) == limit + 3
    # Every check counted once for every vacuum, whether it read them or not.
    assert [checks_so_far(group) for group in written] == [[n, n, n] for n in range(1, limit + 4)]
    summaries = [group.unchanged for group in written]
    assert all(summary is not None and summary.lock_ids == [7] for summary in summaries)
    assert [summary.checks for summary in summaries if summary] == [*range(limit + 1), 0, 1]
    # Carried on: the very entries of the first record; read in full at the limit: attempts written out.
    assert all(group.waiting == written[0].waiting for group in written[: limit + 1])
    assert [item.attempt for item in written[limit + 1].waiting] == [limit + 2] * 3
    assert carried_count(rig) == 3 * (limit + 1)
    for earlier, later in pairwise(written):
        assert later.occurred_at >= earlier.due_at  # never early
        assert later.causation_id == earlier.event_id
    assert [item.vacuum for item in written[-1].waiting] == events
    assert rig.fs.deleted == [] and envelopes(rig) == []


def test_once_the_lock_of_a_carried_group_is_released_every_vacuum_leaves_with_its_checks_counted() -> None:
    rig = Rig()
    consumer, loop, seen, events = parked_group(rig)
    recheck(loop, rig, consumer, seen, 3)
    last = groups(rig)[-1]
    assert last.unchanged is not None and last.unchanged.checks == 3
    rig.metastore.release(7)
    recheck(loop, rig, consumer, seen, 1)
    handed_back = envelopes(rig)
    assert [e.vacuum.event_id for e in handed_back] == [event.event_id for event in events]
    assert all(e.attempt == 5 and e.locks_held == [] for e in handed_back)
    run_for(loop, rig, 1.0)
    assert [done.correlation_id for done in dones(rig)] == [event.event_id for event in events]
    assert all(done.attempts == 6 for done in dones(rig))


def test_a_carried_group_split_by_one_released_lock_writes_its_checks_into_the_vacuum_left() -> None:
    rig = Rig()
    consumer = FakeConsumer(rig.clock)
    older, newer = three_waiting(rig)[:2]
    # Taken long after the older vacuum committed: the older one never waits on it.
    rig.metastore.take_lock(8, "sales.orders", "ds=2025-03-14", acquired_at=older.occurred_at + timedelta(hours=1))
    newer = newer.model_copy(update={"lock_snapshot": [lock(7), lock(8)], "locks_observed": 2})
    rig.fs.mark_vacuum_output(newer)
    for event in (older, newer):
        consumer.append(V, 0, event)
    loop = loop_over(rig, consumer)
    seen = [0]
    loop.step()
    forward_delays(rig, consumer, seen)
    recheck(loop, rig, consumer, seen, 2)
    first = groups(rig)[0]
    assert first.unchanged is not None and first.unchanged.lock_ids == [7, 8]
    rig.metastore.release(7)
    recheck(loop, rig, consumer, seen, 1)
    [ready] = envelopes(rig)
    assert ready.vacuum == older and ready.attempt == 4
    left = groups(rig)[-1]
    assert [item.vacuum for item in left.waiting] == [newer]
    assert [item.attempt for item in left.waiting] == [4]
    assert left.unchanged is not None and (left.unchanged.lock_ids, left.unchanged.checks) == ([8], 0)
    assert [entry.lock_id for entry in left.waiting[0].locks_held] == [8]
    run_for(loop, rig, 1.0)
    assert [done.correlation_id for done in dones(rig)] == [older.event_id]
    recheck(loop, rig, consumer, seen, 1)
    assert checks_so_far(groups(rig)[-1]) == [5] and groups(rig)[-1].unchanged.checks == 1  # type: ignore[union-attr]


def test_a_fresh_vacuum_joining_a_carried_group_is_written_with_its_vacuums_read_in_full() -> None:
    rig = Rig()
    consumer, loop, seen, events = parked_group(rig)
    recheck(loop, rig, consumer, seen, 2)
    singles = [delta_name(w, w, 0) for w in range(10, 13)]
    rig.fs.add_acid_dirs(LOCATION, [*singles, delta_name(10, 12)])
    fresh = vacuum(
        event_id=uuid.uuid4(),
        vacuum_job_id="job-3",
        new_directories=[delta_name(10, 12)],
        obsolete_directories=singles,
        highest_write_id=12,
    )
    rig.fs.mark_vacuum_output(fresh)
    consumer.append(V, 0, fresh)
    recheck(loop, rig, consumer, seen, 1)
    together = groups(rig)[-1]
    assert [item.vacuum for item in together.waiting] == [*events, fresh]
    assert checks_so_far(together) == [4, 4, 4, 1]
    assert together.unchanged is not None and together.unchanged.checks == 0
    assert envelopes(rig) == [] and rig.fs.deleted == []
    recheck(loop, rig, consumer, seen, 1)
    again = groups(rig)[-1]
    assert again.waiting == together.waiting and checks_so_far(again) == [5, 5, 5, 2]


def test_a_carried_group_is_read_in_full_when_a_vacuum_reaches_the_max_wait_and_carried_on_stuck() -> None:
    rig = Rig(max_wait_s=7.0)
    consumer, loop, seen, _events = parked_group(rig)
    recheck(loop, rig, consumer, seen, 6)
    written = groups(rig)
    stuck_at = next(index for index, group in enumerate(written) if all(item.stuck for item in group.waiting))
    before, at = written[stuck_at - 1], written[stuck_at]
    assert not any(item.stuck for item in before.waiting)
    assert at.unchanged is not None and at.unchanged.checks == 0 and at.unchanged.oldest_unstuck_commit is None
    assert (at.occurred_at - at.waiting[0].vacuum.occurred_at).total_seconds() >= 7.0
    after = written[stuck_at + 1 :]
    assert after and all(group.waiting == at.waiting for group in after)
    assert [group.unchanged.checks for group in after if group.unchanged] == list(range(1, len(after) + 1))
    assert rig.fs.deleted == []


def _with_summary(record: RawRecord, **changes: object) -> RawRecord:
    value = json.loads(record.value or b"")
    value["unchanged"].update(changes)
    return RawRecord(
        record.topic, record.partition, record.offset, record.key, json.dumps(value).encode(), record.headers
    )


def _forward_forged(rig: Rig, consumer: FakeConsumer, seen: list[int], **changes: object) -> None:
    """The loop's last group record, read back with its summary changed."""
    [record] = rig.bus.records[D][seen[0] :]
    seen[0] += 1
    log = consumer.logs.setdefault((D, 0), [])
    forged = _with_summary(record, **changes)
    log.append(RawRecord(D, 0, len(log), forged.key, forged.value, forged.headers))


def test_a_summary_naming_a_held_lock_no_vacuum_waits_on_delays_them_at_most_its_limit_then_is_refused() -> None:
    """The adversary: a record whose summary names lock 9 (held on the table, in no vacuum's snapshot)
    after the vacuums' own lock 7 was released. Carried on unread while lock 9 is listed, it can hold
    them back no longer than its check limit: then the vacuums are read, the lie is found and the
    models dead-letter the record whole. Nothing is deleted at any point."""
    rig = Rig()
    consumer = FakeConsumer(rig.clock)
    for event in three_waiting(rig):
        consumer.append(V, 0, event)
    rig.metastore.take_lock(9, "sales.orders", "ds=2025-03-14")
    loop = loop_over(rig, consumer)
    seen = [0]
    loop.step()
    _forward_forged(rig, consumer, seen, lock_ids=[9])
    rig.metastore.release(7)
    limit = unchanged_checks_limit(KEY)
    checks = 0
    while not rig.published(TOPICS.dead_letter):
        run_for(loop, rig, 2.1)
        checks += 1
        assert checks <= limit + 1
        assert rig.fs.deleted == [] and envelopes(rig) == []
        if rig.bus.records[D][seen[0] :]:
            forward_delays(rig, consumer, seen)
    assert checks == limit + 1
    [rejected] = rig.published(TOPICS.dead_letter)
    assert isinstance(rejected, CleanupRejected) and rejected.reason_code == "invalid_event"
    assert "unchanged" in rejected.reason and "lock_ids" in rejected.reason
    # Every record read (one a check) was answered, the last one by the dead letter.
    assert consumer.committed[(D, 0)] == checks
    assert rig.fs.deleted == []


def _one_forged_check(rig: Rig, **changes: object) -> None:
    """Three vacuums of a locked table parked in one record, read back with its summary changed and
    checked once."""
    consumer = FakeConsumer(rig.clock)
    for event in three_waiting(rig):
        consumer.append(V, 0, event)
    loop = loop_over(rig, consumer)
    seen = [0]
    loop.step()
    _forward_forged(rig, consumer, seen, **changes)
    run_for(loop, rig, 2.1)


def test_a_summary_that_does_not_match_its_vacuums_is_refused_at_the_first_check_that_reads_them() -> None:
    rig = Rig()
    _one_forged_check(rig, lock_ids=[6])  # lock 6 is not held: the check reads the vacuums
    [rejected] = rig.published(TOPICS.dead_letter)
    assert isinstance(rejected, CleanupRejected) and "unchanged" in rejected.reason
    assert rig.fs.deleted == [] and envelopes(rig) == [] and len(groups(rig)) == 1


def test_a_summary_with_unsorted_lock_ids_is_left_to_the_models_which_refuse_it() -> None:
    rig = Rig()
    _one_forged_check(rig, lock_ids=[7, 7])
    [rejected] = rig.published(TOPICS.dead_letter)
    assert isinstance(rejected, CleanupRejected) and rejected.reason_code == "invalid_event"
    assert rig.fs.deleted == [] and len(groups(rig)) == 1
    assert isinstance(groups(rig)[0], DelayedVacuums)
