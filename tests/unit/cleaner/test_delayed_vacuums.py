"""DelayedVacuums (issue 14): several waiting vacuums of one key parked in one delay record, re-checked
without the event models, and handed back one by one when ready. The rules it must keep: never early
(a record is checked no sooner than its due time), never clean while a snapshot lock is held (rule 1),
fail closed when the metastore cannot answer, offsets only past acknowledged outcomes, nothing lost."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_support import examples

from acidclean.consumers.loop import CleanerLoop
from acidclean.consumers.rules.readiness import Readiness
from acidclean.consumers.scheduling import delay_envelope
from acidclean.consumers.waiting import build_groups, entry_of_envelope, read_group, still_waiting
from acidclean.schemas.events import (
    CleanupDone,
    CleanupRejected,
    DelayedVacuums,
    DelayEnvelope,
    VacuumCommitted,
)
from acidclean.shared.acid.names import delta_name
from acidclean.shared.bus.codec import decode, encode
from acidclean.shared.bus.records import RawRecord
from acidclean.shared.errors import MetastoreError

from .fakes import LOCATION, TOPICS, FakeConsumer, Rig, lock, loop_over, run_for, vacuum, waiting_vacuum_ids

pytestmark = [pytest.mark.rule1, pytest.mark.rule5]

V, D = TOPICS.vacuum_committed, TOPICS.cleanup_delay
SINGLES = ["delta_0000001_0000001_0000", "delta_0000002_0000002_0000", "delta_0000003_0000003_0000"]


def forward_delays(rig: Rig, consumer: FakeConsumer, seen: list[int]) -> list[RawRecord]:
    """Copy the delay records published since the last call into the consumer's delay partition 0,
    byte for byte (headers included): the loop reads what the handler wrote."""
    records = rig.bus.records.get(D, [])
    fresh = records[seen[0] :]
    seen[0] = len(records)
    log = consumer.logs.setdefault((D, 0), [])
    copied = []
    for record in fresh:
        copy = RawRecord(D, 0, len(log), record.key, record.value, record.headers)
        log.append(copy)
        copied.append(copy)
    return copied


def groups(rig: Rig) -> list[DelayedVacuums]:
    return [event for event in rig.published(D) if isinstance(event, DelayedVacuums)]


def checks_so_far(group: DelayedVacuums) -> list[int]:
    """Each vacuum's checks so far: its attempt, plus the checks its group's summary counted since."""
    return [item.attempt + (group.unchanged.checks if group.unchanged else 0) for item in group.waiting]


def envelopes(rig: Rig) -> list[DelayEnvelope]:
    return [event for event in rig.published(D) if isinstance(event, DelayEnvelope)]


def dones(rig: Rig) -> list[CleanupDone]:
    return [event for event in rig.published(TOPICS.cleanup_done) if isinstance(event, CleanupDone)]


def three_waiting(rig: Rig) -> list[VacuumCommitted]:
    """Three successive minor vacuums of sales.orders/ds=2025-03-14 (deltas 1-3, 4-6, 7-9, each over
    its three single deltas), each with reader lock 7 in its snapshot."""
    rig.metastore.add_table("sales.orders", "file:" + LOCATION, "ds=2025-03-14")
    rig.metastore.take_lock(7, "sales.orders", "ds=2025-03-14")
    events = []
    for i in range(3):
        singles = [delta_name(w, w, 0) for w in range(3 * i + 1, 3 * i + 4)]
        compacted = delta_name(3 * i + 1, 3 * i + 3)
        rig.fs.add_acid_dirs(LOCATION, [*singles, compacted])
        events.append(
            vacuum(
                event_id=uuid.uuid4(),
                vacuum_job_id=f"job-{i}",
                new_directories=[compacted],
                obsolete_directories=singles,
                highest_write_id=3 * i + 3,
            )
        )
    for event in events:
        rig.fs.mark_vacuum_output(event)
    return events


def parked_group(rig: Rig) -> tuple[FakeConsumer, CleanerLoop, list[int], list[VacuumCommitted]]:
    """Three vacuums of one key checked once (all parked in one DelayedVacuums), whose record is
    already on the consumer's delay partition; returns the consumer, the loop, the forwarding
    position (for :func:`forward_delays`) and the vacuums."""
    consumer = FakeConsumer(rig.clock)
    events = three_waiting(rig)
    for event in events:
        consumer.append(V, 0, event)
    loop = loop_over(rig, consumer)
    seen = [0]
    loop.step()
    forward_delays(rig, consumer, seen)
    return consumer, loop, seen, events


def test_vacuums_of_one_key_waiting_after_one_check_share_one_delay_record() -> None:
    rig = Rig()
    consumer = FakeConsumer(rig.clock)
    events = three_waiting(rig)
    for event in events:
        consumer.append(V, 0, event)
    loop = loop_over(rig, consumer)
    run_for(loop, rig, 0.1)
    [group] = groups(rig)
    assert envelopes(rig) == []
    assert [item.vacuum for item in group.waiting] == events
    assert [item.attempt for item in group.waiting] == [1, 1, 1]
    assert all([entry.lock_id for entry in item.locks_held] == [7] for item in group.waiting)
    assert group.due_at == group.occurred_at + timedelta(milliseconds=2000)
    assert set(group.merged_from) == {event.event_id for event in events}
    assert consumer.committed[(V, 0)] == 3
    assert rig.fs.deleted == []


def test_a_group_is_checked_again_at_its_due_time_and_parked_again_while_the_lock_is_held() -> None:
    rig = Rig()
    consumer, loop, _seen, events = parked_group(rig)
    run_for(loop, rig, 1.5)
    assert len(groups(rig)) == 1  # not yet due: never early
    run_for(loop, rig, 1.0)
    first, second = groups(rig)
    assert second.occurred_at >= first.due_at
    assert second.causation_id == first.event_id and second.merged_from == [first.event_id]
    assert checks_so_far(second) == [2, 2, 2]
    # Every lock they wait on still listed: the entries go on as they were, counted by the summary.
    assert first.unchanged is not None and (first.unchanged.lock_ids, first.unchanged.checks) == ([7], 0)
    assert second.unchanged is not None and (second.unchanged.lock_ids, second.unchanged.checks) == ([7], 1)
    assert second.waiting == first.waiting
    assert [item.vacuum.event_id for item in second.waiting] == [event.event_id for event in events]
    assert second.due_at == second.occurred_at + timedelta(milliseconds=2000)
    assert consumer.committed[(D, 0)] == 1
    assert rig.fs.deleted == []


def test_once_the_lock_is_released_each_vacuum_leaves_its_group_and_is_cleaned_in_order() -> None:
    rig = Rig()
    consumer, loop, seen, events = parked_group(rig)
    rig.metastore.release(7)
    run_for(loop, rig, 2.5)
    handed_back = envelopes(rig)
    assert [e.vacuum.event_id for e in handed_back] == [event.event_id for event in events]
    assert all(e.due_at == e.occurred_at and e.locks_held == [] and e.attempt == 2 for e in handed_back)
    forward_delays(rig, consumer, seen)
    run_for(loop, rig, 1.0)
    assert [done.correlation_id for done in dones(rig)] == [event.event_id for event in events]
    assert sorted(path.rsplit("/", 1)[1] for path in rig.fs.deleted) == sorted(
        name for event in events for name in event.obsolete_directories
    )
    assert consumer.committed[(D, 0)] == 4  # the group record and the three envelopes


def test_one_ready_and_one_waiting_split_the_group() -> None:
    rig = Rig()
    consumer = FakeConsumer(rig.clock)
    rig.metastore.add_table("sales.orders", "file:" + LOCATION, "ds=2025-03-14")
    rig.fs.add_acid_dirs(LOCATION, [*SINGLES, "delta_0000001_0000003"])
    rig.metastore.take_lock(7, "sales.orders", "ds=2025-03-14")
    rig.metastore.take_lock(8, "sales.orders", "ds=2025-03-14")
    older = vacuum(event_id=uuid.uuid4(), lock_snapshot=[lock(7)])
    newer = vacuum(event_id=uuid.uuid4(), lock_snapshot=[lock(7), lock(8)])
    for event in (older, newer):
        rig.fs.mark_vacuum_output(event)
        consumer.append(V, 0, event)
    loop = loop_over(rig, consumer)
    seen = [0]
    loop.step()
    forward_delays(rig, consumer, seen)
    rig.metastore.release(7)
    run_for(loop, rig, 2.5)
    [ready] = envelopes(rig)
    assert ready.vacuum == older and ready.due_at == ready.occurred_at
    _, still = groups(rig)
    assert [item.vacuum for item in still.waiting] == [newer]
    assert [entry.lock_id for entry in still.waiting[0].locks_held] == [8]


def test_a_group_whose_check_fails_waits_with_the_error_and_deletes_nothing() -> None:
    rig = Rig()
    _consumer, loop, _seen, _events = parked_group(rig)
    rig.metastore.release(7)
    rig.metastore.down = True
    run_for(loop, rig, 2.5)
    _, again = groups(rig)
    assert envelopes(rig) == []
    assert all(item.check_error and "metastore" in item.check_error for item in again.waiting)
    assert all([entry.lock_id for entry in item.locks_held] == [7] for item in again.waiting)  # as last known
    assert rig.fs.deleted == []


def test_a_group_not_acknowledged_is_not_committed_and_is_handled_again() -> None:
    rig = Rig()
    consumer, loop, _seen, _events = parked_group(rig)
    rig.bus.fail_next(1)
    run_for(loop, rig, 2.5)
    assert consumer.committed.get((D, 0), 0) == 0
    run_for(loop, rig, 3.0)  # rewound, retried after one interval
    assert consumer.committed[(D, 0)] == 1
    assert len(groups(rig)) == 2


def test_a_vacuum_waiting_past_the_max_wait_is_stuck_and_keeps_its_first_stuck_time() -> None:
    rig = Rig(max_wait_s=3.0)
    consumer = FakeConsumer(rig.clock)
    events = three_waiting(rig)
    for event in events:
        consumer.append(V, 0, event)
    loop = loop_over(rig, consumer)
    seen = [0]
    loop.step()
    for _ in range(3):
        forward_delays(rig, consumer, seen)
        run_for(loop, rig, 2.2)
    later = groups(rig)[-2:]
    assert all(item.stuck for group in later for item in group.waiting)
    first_stuck = {item.vacuum.event_id: item.stuck_since for item in later[0].waiting}
    assert {item.vacuum.event_id: item.stuck_since for item in later[1].waiting} == first_stuck
    assert rig.fs.deleted == []


def test_a_forged_vacuum_in_a_group_is_refused_when_it_leaves_and_deletes_nothing() -> None:
    """A group is read without the models; a vacuum claiming a location outside the tenant's roots is
    refused by the usual checks once it is handed back, before anything is listed or deleted."""
    rig = Rig()
    consumer = FakeConsumer(rig.clock)
    rig.metastore.add_table("sales.orders", "file:" + LOCATION, "ds=2025-03-14")
    rig.fs.add_acid_dirs("/etc/acidtest", [*SINGLES, "delta_0000001_0000003"])
    forged = vacuum(event_id=uuid.uuid4(), location="/etc/acidtest", lock_snapshot=[])
    honest = vacuum(event_id=uuid.uuid4(), lock_snapshot=[])
    group = build_groups(
        tenant="acme",
        table="sales.orders",
        partition="ds=2025-03-14",
        entries=[entry_of_envelope(_envelope(forged)), entry_of_envelope(_envelope(honest))],
        sources=[forged.event_id],
        checked_at=rig.clock.now() - timedelta(seconds=2),
        due_at=rig.clock.now(),
    )[0].event
    consumer.append(D, 0, group)
    loop = loop_over(rig, consumer)
    seen = [0]
    run_for(loop, rig, 0.5)
    forward_delays(rig, consumer, seen)
    run_for(loop, rig, 0.5)
    rejected = [e for e in rig.published(TOPICS.dead_letter) if isinstance(e, CleanupRejected)]
    assert [r.correlation_id for r in rejected] == [forged.event_id]
    assert not any(path.startswith("/etc") for path in rig.fs.deleted)


def _envelope(event: VacuumCommitted, **changes: Any) -> DelayEnvelope:
    fields: dict[str, Any] = dict(
        tenant=event.tenant,
        table=event.table,
        partition=event.partition,
        occurred_at=event.occurred_at + timedelta(seconds=2),
        causation_id=event.event_id,
        correlation_id=event.event_id,
        vacuum=event,
        attempt=1,
        due_at=event.occurred_at + timedelta(seconds=4),
        locks_held=list(event.lock_snapshot),
    )
    fields.update(changes)
    return DelayEnvelope(**fields)


@settings(max_examples=examples(60), deadline=None)
@given(
    count=st.integers(1, 7),
    attempts=st.lists(st.integers(1, 50), min_size=7, max_size=7),
    held=st.sets(st.sampled_from([7, 8, 9])),
    stuck=st.booleans(),
    error=st.none() | st.text(min_size=1, max_size=40),
)
def test_groups_written_without_the_models_are_what_the_models_read(
    count: int, attempts: list[int], held: set[int], stuck: bool, error: str | None
) -> None:
    """Every DelayedVacuums the cleaner writes with msgspec is a valid event for the models, carries
    each vacuum byte for byte, and reads back to the same group."""
    events = [
        vacuum(event_id=uuid.uuid4(), lock_snapshot=[lock(7), lock(8)], vacuum_job_id=f"j{i}") for i in range(count)
    ]
    entries = [entry_of_envelope(_envelope(e, attempt=attempts[i])) for i, e in enumerate(events)]
    now = events[0].occurred_at + timedelta(seconds=10)
    [out] = build_groups(
        tenant="acme",
        table="sales.orders",
        partition="ds=2025-03-14",
        entries=entries,
        sources=[events[0].event_id],
        checked_at=now,
        due_at=now + timedelta(seconds=2),
    )
    wire = encode(out.event)
    record = RawRecord(D, 0, 0, wire.key, wire.value, wire.headers)
    model = decode(record, rejected_by="t", tenant="acme", expected=(DelayedVacuums,))
    assert isinstance(model, DelayedVacuums), model
    assert [item.vacuum for item in model.waiting] == events
    assert [item.attempt for item in model.waiting] == attempts[:count]
    group = read_group(record, "acme")
    assert group is not None and group.event_id == model.event_id and group.due_at == model.due_at
    again = [
        still_waiting(
            member,
            held_ids=None if error else held,
            check_error=error,
            open_txns=[3, 1],
            now=now,
            max_wait_s=0 if stuck else 3600,
        )
        for member in group.members
    ]
    [next_out] = build_groups(
        tenant="acme",
        table="sales.orders",
        partition="ds=2025-03-14",
        entries=again,
        sources=[group.event_id],
        checked_at=now,
        due_at=now + timedelta(seconds=2),
    )
    wire = encode(next_out.event)
    second = decode(RawRecord(D, 0, 1, wire.key, wire.value, wire.headers), rejected_by="t", tenant="acme")
    assert isinstance(second, DelayedVacuums), second
    assert [item.attempt for item in second.waiting] == [a + 1 for a in attempts[:count]]
    expected_held = [7, 8] if error else sorted(held & {7, 8})
    assert all(sorted(entry.lock_id for entry in item.locks_held) == expected_held for item in second.waiting)
    assert all(item.stuck == stuck and (item.stuck_since is not None) == stuck for item in second.waiting)
    assert waiting_vacuum_ids([second]) == [e.event_id for e in events]


def test_a_group_with_a_vacuum_of_another_key_is_left_to_the_models_which_refuse_it() -> None:
    events = [vacuum(event_id=uuid.uuid4()), vacuum(event_id=uuid.uuid4(), partition="ds=2025-03-15")]
    [out] = build_groups(
        tenant="acme",
        table="sales.orders",
        partition="ds=2025-03-14",
        entries=[entry_of_envelope(_envelope(e)) for e in events],
        sources=[events[0].event_id],
        checked_at=events[0].occurred_at,
        due_at=events[0].occurred_at + timedelta(seconds=2),
    )
    wire = encode(out.event)
    record = RawRecord(D, 0, 0, wire.key, wire.value, wire.headers)
    assert read_group(record, "acme") is None
    refused = decode(record, rejected_by="t", tenant="acme", expected=(DelayedVacuums,))
    assert isinstance(refused, CleanupRejected) and refused.reason_code == "invalid_event"


def test_a_fresh_vacuum_of_a_waiting_key_joins_its_record_and_is_checked_with_it() -> None:
    """A vacuum arriving while vacuums of its key wait is checked with their record at its due time
    (not at once, not early) and waits on in the same record; its offset is committed only then."""
    rig = Rig()
    consumer = FakeConsumer(rig.clock)
    first, second, third = three_waiting(rig)
    consumer.append(V, 0, first)
    loop = loop_over(rig, consumer)
    seen = [0]
    run_for(loop, rig, 0.1)
    [parked] = envelopes(rig)
    forward_delays(rig, consumer, seen)
    run_for(loop, rig, 0.5)
    consumer.append(V, 0, second)
    consumer.append(V, 0, third)
    loop.step()
    loop.step()
    assert rig.clock.now() < parked.due_at
    assert groups(rig) == [] and len(envelopes(rig)) == 1  # the newcomers wait for the record's check
    assert consumer.committed[(V, 0)] == 1
    run_for(loop, rig, 2.0)
    [together] = groups(rig)
    assert together.occurred_at >= parked.due_at
    assert [item.vacuum for item in together.waiting] == [first, second, third]
    assert [item.attempt for item in together.waiting] == [2, 1, 1]
    assert together.due_at == together.occurred_at + timedelta(milliseconds=2000)
    run_for(loop, rig, 0.1)
    assert consumer.committed[(V, 0)] == 3 and consumer.committed[(D, 0)] == 1
    assert rig.fs.deleted == []


def test_a_joiner_whose_record_never_comes_is_checked_alone_after_its_deadline() -> None:
    rig = Rig()
    consumer = FakeConsumer(rig.clock)
    first, second, _ = three_waiting(rig)
    consumer.append(V, 0, first)
    loop = loop_over(rig, consumer)
    run_for(loop, rig, 0.1)  # first parked; its envelope is never read back (another process's partition)
    consumer.append(V, 0, second)
    loop.step()
    loop.step()
    [parked] = envelopes(rig)
    run_for(loop, rig, (parked.due_at - rig.clock.now()).total_seconds())
    assert [e.vacuum for e in envelopes(rig)] == [first]
    run_for(loop, rig, 1.5)  # the deadline: half an interval (at least 0.5 s) after the record's due time
    assert [e.vacuum for e in envelopes(rig)] == [first, second]
    assert consumer.committed[(V, 0)] == 2


def test_a_keys_records_due_at_different_times_are_checked_together_once_and_wait_on_in_one() -> None:
    """Two vacuums of one key parked in separate records (other checks, or another process), due 0.5 s
    apart on one delay partition: the earlier one waits for the later one (late, never early), both
    are checked in one batch and go on waiting in one DelayedVacuums; another key's record due between
    them (another partition of the table, still behind the reader) is not held back."""
    rig = Rig()
    consumer = FakeConsumer(rig.clock)
    first, second, _ = three_waiting(rig)
    next_day = LOCATION.replace("2025-03-14", "2025-03-15")
    other = vacuum(event_id=uuid.uuid4(), vacuum_job_id="other", partition="ds=2025-03-15", location=next_day)
    rig.metastore.add_table("sales.orders", "file:" + next_day, "ds=2025-03-15")
    now = rig.clock.now()
    early, between, late = (now + timedelta(seconds=seconds) for seconds in (1.0, 1.2, 1.5))
    parked = [
        delay_envelope(event, Readiness(False, ()), now=now, interval_ms=2000, max_wait_s=3600, due=due)
        for event, due in ((first, early), (other, between), (second, late))
    ]
    for envelope in parked:
        consumer.append(D, 0, envelope)
    loop = loop_over(rig, consumer)
    run_for(loop, rig, 1.8)
    alone, together = rig.published(D)
    assert isinstance(alone, DelayEnvelope) and alone.correlation_id == other.event_id
    assert between <= alone.occurred_at < late  # checked at its own due time, not held back
    assert isinstance(together, DelayedVacuums)
    assert {item.vacuum.event_id for item in together.waiting} == {first.event_id, second.event_id}
    assert together.occurred_at >= late  # never early: checked at the later one's due time
    assert together.occurred_at - early < timedelta(milliseconds=2000)  # late by less than an interval
    run_for(loop, rig, 0.1)
    assert consumer.committed[(D, 0)] == 3 and rig.fs.deleted == []


def waiting_on_tables(rig: Rig, count: int, round_: int, first: int = 0) -> list[VacuumCommitted]:
    """One waiting vacuum on each of ``count`` unpartitioned tables from ``first`` on (reader lock 100+i
    held on each); ``round_`` numbers the vacuum (its deltas) so a table's rounds are distinct vacuums."""
    events = []
    for i in range(first, first + count):
        table, location = f"sales.t{i}", f"/warehouse/sales.db/t{i}"
        if round_ == 0:
            rig.metastore.add_table(table, "file:" + location)
            rig.metastore.take_lock(100 + i, table)
        singles = [delta_name(w, w, 0) for w in range(3 * round_ + 1, 3 * round_ + 4)]
        events.append(
            vacuum(
                event_id=uuid.uuid4(),
                table=table,
                partition=None,
                location="file:" + location,
                vacuum_job_id=f"t{i}-{round_}",
                new_directories=[delta_name(3 * round_ + 1, 3 * round_ + 3)],
                obsolete_directories=singles,
                highest_write_id=3 * round_ + 3,
                lock_snapshot=[lock(lock_id=100 + i)],
            )
        )
    return events


def parked_twice(rig: Rig, tables: int, **config: Any) -> tuple[FakeConsumer, CleanerLoop, list[DelayEnvelope]]:
    """Two vacuums on each table, parked by this process in separate delay records (the second came
    after the first's record was due, and that record was not read back in time: a cleaner behind its
    delay partition). None of the records is on the consumer's delay partition yet."""
    consumer = FakeConsumer(rig.clock)
    loop = loop_over(rig, consumer, **config)
    for event in waiting_on_tables(rig, tables, 0):
        consumer.append(V, 0, event)
    run_for(loop, rig, 1.0)
    for event in waiting_on_tables(rig, tables, 1):
        consumer.append(V, 0, event)
    run_for(loop, rig, 2.5)  # the newcomers' wait for the first records ends: each is parked alone
    if len(envelopes(rig)) < 2 * tables:  # a small max_queued held some newcomers back from reading
        run_for(loop, rig, 3.0)
    parked = envelopes(rig)
    assert len(parked) == 2 * tables and groups(rig) == []
    return consumer, loop, parked


def append_delays(consumer: FakeConsumer, rig: Rig, events: list[DelayEnvelope]) -> None:
    """Put the records of ``events`` on the consumer's delay partition 0, as the handler wrote them."""
    ids = {event.event_id for event in events}
    log = consumer.logs.setdefault((D, 0), [])
    for record, event in zip(rig.bus.records[D], rig.published(D), strict=True):
        if event.event_id in ids:
            log.append(RawRecord(D, 0, len(log), record.key, record.value, record.headers))


def test_a_keys_records_read_after_they_are_due_are_checked_together_once_and_wait_on_in_one() -> None:
    """A cleaner behind its delay partition reads a table's two records after both are due, hundreds
    of offsets apart in production: the earlier one waits for the later one, which this process wrote
    (so it is known to come), and both wait on in one record from then on. Reading is not stopped by
    the records waiting so, even beyond ``max_queued``, or the later ones would never be read."""
    rig = Rig()
    consumer, loop, parked = parked_twice(rig, 3, max_queued=2)
    first_round, second_round = parked[:3], parked[3:]
    rig.clock.advance((max(event.due_at for event in parked) - rig.clock.now()).total_seconds() + 0.5)
    append_delays(consumer, rig, first_round + second_round)
    run_for(loop, rig, 0.2)
    together = groups(rig)
    assert len(together) == 3 and len(envelopes(rig)) == 6  # nothing parked alone again
    for group in together:
        members = [item.vacuum.event_id for item in group.waiting]
        table_records = [event for event in parked if event.table == group.table]
        assert sorted(members) == sorted(event.vacuum.event_id for event in table_records)
        assert group.occurred_at >= max(event.due_at for event in table_records)  # never early
    assert consumer.committed[(D, 0)] == 6 and rig.fs.deleted == []
    # From now on each table has one record: re-read at its due time, it is checked at once.
    seen = [len(rig.bus.records[D]) - 3]
    forward_delays(rig, consumer, seen)
    run_for(loop, rig, 2.2)
    assert len(groups(rig)) == 6 and all(group.occurred_at >= together[0].due_at for group in groups(rig)[3:])


def test_a_record_waiting_for_a_later_one_that_never_comes_is_checked_alone_after_its_deadline() -> None:
    """The later record may never be read by this process (another process owned the partition when it
    was read, or a rewind dropped it): the waiting one is then checked alone, late but never early."""
    rig = Rig()
    consumer, loop, parked = parked_twice(rig, 1)
    first, second = parked
    rig.clock.advance((second.due_at - rig.clock.now()).total_seconds() + 0.5)
    append_delays(consumer, rig, [first])
    read_at = rig.clock.now()
    run_for(loop, rig, 0.1)
    assert len(envelopes(rig)) == 2  # it waits
    # The deadline: the later record's due time, as late as this one was read, plus an interval.
    deadline = second.due_at + (read_at - first.due_at) + timedelta(milliseconds=2000)
    run_for(loop, rig, (deadline - rig.clock.now()).total_seconds() - 0.2)
    assert len(envelopes(rig)) == 2 and consumer.committed.get((D, 0), 0) == 0
    run_for(loop, rig, 0.5)
    *_, again = envelopes(rig)
    assert again.vacuum.event_id == first.vacuum.event_id and again.occurred_at >= deadline
    run_for(loop, rig, 0.1)
    assert consumer.committed[(D, 0)] == 1 and rig.fs.deleted == []


def test_fresh_vacuums_waiting_for_their_keys_records_do_not_stop_those_records_from_being_read() -> None:
    """Fresh vacuums of waiting tables wait to join their tables' delay records; when they fill
    ``max_queued`` they stop more fresh vacuums from being read, but not the delay records they wait
    for (else each would wait out its deadline and be parked alone, as a 100,000-vacuum burst was)."""
    rig = Rig()
    consumer = FakeConsumer(rig.clock)
    loop = loop_over(rig, consumer, max_queued=2)
    for event in waiting_on_tables(rig, 3, 0):
        consumer.append(V, 0, event)
    run_for(loop, rig, 0.5)
    first = envelopes(rig)
    assert len(first) == 3  # not read back yet
    fresh = waiting_on_tables(rig, 3, 1)
    for event in fresh:
        consumer.append(V, 0, event)  # (delay partition 0 is this process's: they may join)
    run_for(loop, rig, 0.5)
    assert len(rig.published(D)) == 3  # two joined their tables' records; the third is not read yet
    rig.clock.advance((max(event.due_at for event in first) - rig.clock.now()).total_seconds() + 0.1)
    append_delays(consumer, rig, first)
    run_for(loop, rig, 0.3)
    together = groups(rig)
    assert len(together) >= 2
    for group in together:
        members = {item.vacuum.event_id for item in group.waiting}
        table_events = [event for event in [*first, *fresh] if event.table == group.table]
        assert members == {getattr(event, "vacuum", event).event_id for event in table_events}
        assert group.occurred_at >= min(event.due_at for event in first)  # never early
    assert not [event for event in envelopes(rig)[3:] if event.table in {group.table for group in together}]
    assert rig.fs.deleted == []


def test_records_read_back_long_after_their_check_are_answered_by_a_list_asked_after_that_check() -> None:
    """A cleaner behind its delay partitions reads its own records back many intervals after the checks
    that wrote them. A lock list asked after such a check answers the record (its snapshot locks were
    all taken before that check), so the batches of a backlog do not each wait for a new list, however
    many records this process wrote meanwhile; a record read again is answered as one read now."""
    rig = Rig()
    rig.handler.lock_call_costs.unfiltered_s = 0.2  # thousands of locks: one list serves an interval
    consumer = FakeConsumer(rig.clock)
    loop = loop_over(rig, consumer)
    for event in waiting_on_tables(rig, 1100, 0):  # more than the 1,000 records kept unpruned
        consumer.append(V, 0, event)
    run_for(loop, rig, 0.5)
    seen = [0]
    parked = forward_delays(rig, consumer, seen)
    assert len(parked) == 1100
    del consumer.logs[(D, 0)][:]  # not read back yet: the cleaner is behind its delay partition
    rig.clock.advance(12.0)  # six intervals
    [late] = waiting_on_tables(rig, 1, 0, first=1100)  # a vacuum on a new table, parked now: a list asked now
    consumer.append(V, 1, late)
    run_for(loop, rig, 0.1)
    asked = rig.metastore.calls["show_locks"]
    log = consumer.logs[(D, 0)]
    for record in parked:
        log.append(RawRecord(D, 0, len(log), record.key, record.value, record.headers))
    run_for(loop, rig, 0.3)
    assert len(rig.published(D)) == 2 * 1100 + 1  # every one re-checked and parked again
    assert rig.metastore.calls["show_locks"] == asked  # by the list asked after their checks
    assert all(rig.handler.take_checked_at_ms(event.event_id) is None for event in rig.published(D)[:1100])


def test_batches_share_a_fresh_lock_list_and_ask_again_for_events_read_after_it() -> None:
    """One unfiltered show_locks answers every batch that starts within a quarter interval of it, but
    never a batch holding an event read after it was asked (its vacuum may have committed after)."""
    rig = Rig()
    read = rig.clock.now_ms() - 1  # the batch's events were read before the list is asked

    def lock_list_of_a_new_batch(read_by_ms: int) -> None:
        rig.handler.batch(3, read_by_ms).check.all_locks()

    lock_list_of_a_new_batch(read)
    lock_list_of_a_new_batch(read)
    assert rig.metastore.calls["show_locks"] == 1
    lock_list_of_a_new_batch(read + 1)  # an event read in the millisecond the list was asked: maybe after
    assert rig.metastore.calls["show_locks"] == 2
    rig.clock.advance(0.1)
    lock_list_of_a_new_batch(rig.clock.now_ms())  # an event read after the list was asked
    assert rig.metastore.calls["show_locks"] == 3
    rig.clock.advance(0.6)  # older than a quarter of the 2 s interval
    lock_list_of_a_new_batch(read)
    assert rig.metastore.calls["show_locks"] == 4
    rig.metastore.down = True
    with pytest.raises(MetastoreError):
        lock_list_of_a_new_batch(rig.clock.now_ms() + 1)
    rig.metastore.down = False
    failed = rig.metastore.calls["show_locks"]  # (a failed call is retried a few times first)
    lock_list_of_a_new_batch(read)  # a failed answer is not kept: asked again
    assert rig.metastore.calls["show_locks"] == failed + 1


def test_a_slow_lock_list_serves_the_batches_of_an_interval_but_never_an_event_read_after_it() -> None:
    """With thousands of locks (an unfiltered show_locks measured at 200 ms) one list answers the batches
    of most of an interval: each re-check needs only a list asked after its own previous check, an
    interval earlier. An event read after the list was asked still gets a new one."""
    rig = Rig()
    rig.handler.lock_call_costs.unfiltered_s = 0.2
    assert rig.handler.lock_view_max_age_ms == rig.handler.config.interval_ms
    read = rig.clock.now_ms() - 1
    rig.handler.batch(3, read).check.all_locks()
    rig.clock.advance(1.5)  # three quarters of the 2 s interval (renewed in the background only after 1.6 s)
    rig.handler.batch(3, read).check.all_locks()
    assert rig.metastore.calls["show_locks"] == 1
    rig.handler.batch(3, rig.clock.now_ms()).check.all_locks()  # an event read after the list was asked
    assert rig.metastore.calls["show_locks"] == 2
    rig.handler.lock_call_costs.unfiltered_s = 0.01  # a quick list lives a quarter interval, as before
    assert rig.handler.lock_view_max_age_ms == rig.handler.config.interval_ms // 4


def test_a_slow_lock_list_whose_renewal_is_late_keeps_serving_until_it_lands_but_never_past_twice_its_age() -> None:
    """A renewal in the background that takes longer than planned (measured: 270 ms under load for a
    10,000-lock list planned at 130 ms) leaves the batches with the list it renews, not waiting for a
    call of their own, up to twice the list's age limit; an event read after the list was asked still
    gets a new one, and once the renewal lands the batches take it."""
    rig = Rig()
    rig.handler.lock_call_costs.unfiltered_s = 0.2
    assert rig.handler.lock_view_max_age_ms == 2000
    answer, entered = hang_renewals(rig)
    read = rig.clock.now_ms() - 1
    first = rig.handler.batch(3, read).check
    first.all_locks()
    asked = rig.metastore.calls["show_locks"]
    rig.clock.advance(1.7)  # past the renewal point (2 s - 2 x 200 ms): the renewal starts, and hangs
    assert rig.handler.lock_view(read) is first._answers()
    assert entered.wait(10)
    rig.clock.advance(0.5)  # older than its age limit, its renewal still under way: it serves
    assert rig.handler.has_lock_view(read)
    assert rig.handler.lock_view(read) is first._answers()
    assert rig.metastore.calls["show_locks"] == asked  # no batch asked (the renewal's call is counted once answered)
    fresh = rig.handler.lock_view(rig.clock.now_ms())  # an event read after it was asked: a new list
    assert fresh is not first._answers()
    fresh.all_locks()
    assert rig.metastore.calls["show_locks"] == asked + 1
    answer.set()
    deadline = time.monotonic() + 10
    while rig.handler.lock_views._refreshing and time.monotonic() < deadline:
        time.sleep(0.01)
    assert rig.metastore.calls["show_locks"] == asked + 2 and not rig.handler.lock_views._refreshing


def test_a_batch_the_last_answered_lock_list_serves_does_not_wait_for_a_newer_one_being_asked() -> None:
    """Fresh vacuums read after the last list was asked need a newer one; while that call is under way
    (hundreds of ms at 10,000 locks), a batch of records the last answered list serves (its own check
    an interval ago) takes that one instead of waiting for the call; once the newer list is back, it
    serves both."""
    rig = Rig()
    answer, entered = hang_renewals(rig, thread="fresh-batch")
    checked = rig.clock.now_ms() - 1
    answered = rig.handler.lock_view(checked)
    answered.all_locks()
    rig.clock.advance(0.01)
    fresh_read = rig.clock.now_ms()
    rig.clock.advance(0.01)
    fresh = threading.Thread(target=lambda: rig.handler.lock_view(fresh_read).all_locks(), name="fresh-batch")
    fresh.start()
    try:
        assert entered.wait(10)
        newer = rig.handler.lock_view(fresh_read)
        assert newer is not answered and not newer.answered  # the fresh batch's call, under way
        assert rig.handler.lock_view(checked) is answered  # served at once, no wait for that call
    finally:
        answer.set()
        fresh.join(10)
    assert newer.answered and rig.handler.lock_view(checked) is newer
    assert rig.metastore.calls["show_locks"] == 2


def test_a_batch_read_before_the_renewal_under_way_was_asked_waits_for_it_and_asks_nothing_itself() -> None:
    """Records re-checked an interval after their own check need a list asked after it; when the last
    answered list is older but the background renewal was asked after it, their batch waits for that
    renewal's answer instead of asking for a list of its own (at 10,000 locks, a second call of about
    500 ms, both waited for). A renewal under way longer than a list may be old is not waited for
    (test_a_slow_lock_list_stops_serving_at_twice_its_age_even_while_its_renewal_hangs)."""
    rig = Rig()
    rig.handler.lock_call_costs.unfiltered_s = 0.2
    answer, entered = hang_renewals(rig)
    first = rig.handler.lock_view(rig.clock.now_ms() - 1)
    first.all_locks()
    rig.clock.advance(0.5)
    checked = rig.clock.now_ms()  # a check after the first list was asked
    rig.clock.advance(1.2)  # 1.7 s: past the renewal point (2 s - 200 ms call - 250 ms)
    assert rig.handler.lock_view(first.asked_ms - 1) is first  # served, and its renewal starts
    assert entered.wait(10)
    asked = rig.metastore.calls["show_locks"]
    assert rig.handler.has_lock_view(checked)
    renewal = rig.handler.lock_view(checked)
    assert renewal is not first and renewal.asked_ms > checked and not renewal.answered
    waiting = threading.Thread(target=renewal.all_locks, name="batch")
    waiting.start()
    waiting.join(0.2)
    assert waiting.is_alive() and rig.metastore.calls["show_locks"] == asked  # waits, asks nothing
    answer.set()
    waiting.join(10)
    assert renewal.answered and rig.metastore.calls["show_locks"] == asked + 1  # the renewal's call alone
    assert rig.handler.lock_view(checked) is renewal


def test_background_renewals_run_one_after_another_on_one_thread_so_they_share_one_metastore_client() -> None:
    """The cleaner gives each thread its own metastore client (a connection): a thread per renewal
    opened one more connection per renewal, one or two an interval, and kept them all."""
    rig = Rig()
    rig.handler.lock_call_costs.unfiltered_s = 0.2
    threads: list[threading.Thread] = []
    ask = rig.metastore.show_locks

    def noting_show_locks(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name == "lock-view":
            threads.append(threading.current_thread())
        return ask(*args, **kwargs)

    rig.metastore.show_locks = noting_show_locks  # type: ignore[method-assign]
    rig.handler.lock_view(rig.clock.now_ms() - 1).all_locks()
    for _ in range(3):
        rig.clock.advance(1.7)  # past the renewal point: a renewal starts
        rig.handler.lock_view(0)
        deadline = time.monotonic() + 10
        while (
            rig.handler.lock_views._refreshing or rig.handler.lock_views._renewing is not None
        ) and time.monotonic() < deadline:
            time.sleep(0.01)
    assert len(threads) == 3
    assert all(thread is threads[0] for thread in threads)


def test_a_background_renewal_indexes_its_list_before_any_batch_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """At 10,000 locks the per-table index took about 10 ms of the interpreter; built by the first
    batch on a renewed list, it held the other batches at the list's guard meanwhile."""
    from acidclean.consumers import lock_views as lock_views_module

    rig = Rig()
    rig.handler.lock_call_costs.unfiltered_s = 0.2
    built_on: list[str] = []
    build = lock_views_module._by_table

    def noting_build(locks: Any) -> Any:
        built_on.append(threading.current_thread().name)
        return build(locks)

    monkeypatch.setattr(lock_views_module, "_by_table", noting_build)
    rig.metastore.take_lock(41, "db.t")
    rig.metastore.take_lock(42, "db.other")
    first = rig.handler.lock_view(rig.clock.now_ms() - 1)
    assert [held.lock_id for held in first.table_locks("db.t")] == [41]
    assert built_on == [threading.current_thread().name]
    rig.clock.advance(1.7)  # past the renewal point: a renewal starts
    rig.handler.lock_view(0)
    deadline = time.monotonic() + 10
    while rig.handler.current_lock_view is first and time.monotonic() < deadline:
        time.sleep(0.01)
    renewed = rig.handler.current_lock_view
    assert renewed is not first and renewed is not None
    assert built_on[1:] == ["lock-view"]
    assert [held.lock_id for held in renewed.table_locks("db.t")] == [41]
    assert renewed.lock_ids() == frozenset({41, 42})
    assert built_on[1:] == ["lock-view"]  # the batches' reads built nothing more


def hang_renewals(rig: Rig, thread: str = "lock-view") -> tuple[threading.Event, threading.Event]:
    """Make the ``show_locks`` calls of ``rig``'s metastore from the thread named ``thread`` (the
    background renewals by default) hang: until the first event is set, once the second says one has
    started."""
    answer, entered = threading.Event(), threading.Event()
    ask = rig.metastore.show_locks

    def hanging_show_locks(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name == thread:
            entered.set()
            assert answer.wait(10)
        return ask(*args, **kwargs)

    rig.metastore.show_locks = hanging_show_locks  # type: ignore[method-assign]
    return answer, entered


def test_a_slow_lock_list_stops_serving_at_twice_its_age_even_while_its_renewal_hangs() -> None:
    rig = Rig()
    rig.handler.lock_call_costs.unfiltered_s = 0.2
    answer, entered = hang_renewals(rig)
    read = rig.clock.now_ms() - 1
    first = rig.handler.lock_view(read)
    first.all_locks()
    rig.clock.advance(1.7)
    rig.handler.lock_view(read)
    assert entered.wait(10)
    rig.clock.advance(2.4)  # 4.1 s: past twice the 2 s limit
    assert not rig.handler.has_lock_view(read)
    later = rig.handler.lock_view(read)
    assert later is not first
    later.all_locks()  # asked by the batch itself
    answer.set()
    deadline = time.monotonic() + 10
    while rig.handler.lock_views._refreshing and time.monotonic() < deadline:
        time.sleep(0.01)
    # The hung renewal, asked before the batch's own list, does not replace the newer one.
    assert rig.handler.lock_view(read) is later


@settings(max_examples=examples(60), deadline=None)
@given(
    attempt=st.integers(1, 500),
    held=st.sets(st.sampled_from([7, 8])),
    stuck_before=st.booleans(),
    max_wait_s=st.sampled_from([1.0, 3600.0]),
)
def test_a_lone_waiting_vacuum_is_parked_again_as_the_models_would_park_it(
    attempt: int, held: set[int], stuck_before: bool, max_wait_s: float
) -> None:
    """A DelayEnvelope re-checked without the models while a snapshot lock is held: the envelope written
    is the one :func:`delay_envelope` builds (same id, causation, attempt, due time, locks, stuck)."""
    held = held or {7}
    rig = Rig(max_wait_s=max_wait_s)
    consumer = FakeConsumer(rig.clock)
    rig.metastore.add_table("sales.orders", "file:" + LOCATION, "ds=2025-03-14")
    for lock_id in sorted(held):
        rig.metastore.take_lock(lock_id, "sales.orders", "ds=2025-03-14")
    event = vacuum(lock_snapshot=[lock(7), lock(8)])
    now = rig.clock.now()
    previous = _envelope(
        event,
        attempt=attempt,
        occurred_at=now - timedelta(seconds=2),
        due_at=now,
        stuck=stuck_before,
        stuck_since=(now - timedelta(seconds=30)) if stuck_before else None,
    )
    consumer.append(D, 0, previous)
    loop = loop_over(rig, consumer)
    loop.step()
    [written] = envelopes(rig)
    checked = written.occurred_at
    expected = delay_envelope(
        previous,
        Readiness(False, tuple(entry for entry in event.lock_snapshot if entry.lock_id in held)),
        now=checked,
        interval_ms=2000,
        max_wait_s=max_wait_s,
    )
    assert written == expected
    assert rig.fs.deleted == []


def test_a_lock_list_asked_in_the_same_millisecond_as_a_record_was_read_never_answers_it() -> None:
    """Found by the batched-history machine: a shared list asked at t, then a reader locks and an envelope
    naming that lock arrives, all within t. Reusing the list would find the lock absent and delete
    under the reader (rule 1); the list must be asked in a later millisecond than the record was read."""
    rig = Rig()
    consumer = FakeConsumer(rig.clock)
    loop = loop_over(rig, consumer)
    for index in (1, 2):
        consumer.append(V, 0, add_unlocked_table(rig, index))
    loop.step()  # a batch of two tables asks the shared (unfiltered) list now
    assert rig.metastore.calls["show_locks"] == 1
    rig.metastore.add_table("sales.orders", "file:" + LOCATION, "ds=2025-03-14")
    rig.fs.add_acid_dirs(LOCATION, [*SINGLES, "delta_0000001_0000003"])
    rig.metastore.take_lock(7, "sales.orders", "ds=2025-03-14")
    event = vacuum(lock_snapshot=[lock(7)])
    rig.fs.mark_vacuum_output(event)
    consumer.append(D, 0, _envelope(event, occurred_at=rig.clock.now(), due_at=rig.clock.now()))
    consumer.append(V, 1, add_unlocked_table(rig, 3))  # read in the same fetch: the clock stays put
    loop.step()
    loop.step()
    assert not any(path.startswith(LOCATION + "/") for path in rig.fs.deleted)
    assert event.event_id in waiting_vacuum_ids(rig.published(D))


def test_one_vacuum_delivered_twice_in_one_batch_is_written_once() -> None:
    """Found by the batched-history machine: a record delivered again (after a lost partition) next to
    the envelope its first delivery wrote; both wait: the key's record lists the vacuum once (a
    vacuum listed twice makes the record invalid, and readers would refuse it)."""
    rig = Rig()
    consumer = FakeConsumer(rig.clock)
    events = three_waiting(rig)
    first = _envelope(events[0], occurred_at=rig.clock.now(), due_at=rig.clock.now())
    again = delay_envelope(
        first,
        Readiness(False, (lock(7),)),
        now=rig.clock.now(),
        interval_ms=2000,
        max_wait_s=3600,
        due=rig.clock.now(),
    )
    for envelope in (first, again, _envelope(events[1], occurred_at=rig.clock.now(), due_at=rig.clock.now())):
        consumer.append(D, 0, envelope)
    loop = loop_over(rig, consumer)
    run_for(loop, rig, 0.2)
    [group] = groups(rig)
    assert [item.vacuum.event_id for item in group.waiting] == [events[0].event_id, events[1].event_id]
    assert consumer.committed[(D, 0)] == 3


def add_unlocked_table(rig: Rig, index: int) -> VacuumCommitted:
    location = f"/warehouse/sales.db/t{index}"
    rig.metastore.add_table(f"sales.t{index}", "file:" + location)
    rig.fs.add_acid_dirs(location, [*SINGLES, "delta_0000001_0000003"])
    event = vacuum(table=f"sales.t{index}", partition=None, location=location, lock_snapshot=[])
    rig.fs.mark_vacuum_output(event)
    return event


def test_pruning_old_check_times_never_fails_while_acknowledged_records_note_their_due_times() -> None:
    """Threads whose records the broker acknowledged note each key's due time while another prunes the
    old ones: the prune's pass once failed mid-way ("dictionary changed size during iteration"), and the
    batch recording its acknowledgement had its records dead-lettered."""
    rig = Rig()
    handler = rig.handler
    now = rig.clock.now_ms()
    handler.note_chain_due((f"sales.old{index}", now - 10**9) for index in range(200_000))
    stop = threading.Event()

    def note_dues() -> None:
        number = 0
        while not stop.is_set():
            handler.note_chain_due([(f"sales.new{number}", now)])
            number += 1

    writers = [threading.Thread(target=note_dues) for _ in range(2)]
    for writer in writers:
        writer.start()
    try:
        for _ in range(20):
            handler.own_checks.pruned_ms = 0  # due for its next prune
            checks = [(SimpleNamespace(event_id=uuid.uuid4()), rig.clock.now()) for _ in range(1001)]
            handler.own_checks.remember(checks, handler.context.now_ms())  # type: ignore[arg-type]
    finally:
        stop.set()
        for writer in writers:
            writer.join()
    assert not any(key.startswith("sales.old") for key in handler.chain_due)  # pruned
    assert any(key.startswith("sales.new") for key in handler.chain_due)  # what was noted since is kept
