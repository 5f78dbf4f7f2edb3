"""readyToClean from a lock snapshot and the current locks; due times and delay envelopes."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from acidclean.consumers.rules.readiness import not_checked, ready_to_clean
from acidclean.consumers.scheduling import (
    BUSY_POLL_CAP_S,
    IDLE_POLL_CAP_S,
    delay_envelope,
    due_time_problem,
    in_due_order_by_key,
    poll_timeout_s,
)
from acidclean.schemas.common import derived_event_id
from acidclean.shared.bus.codec import due_at_ms
from acidclean.shared.metastore import LockInfo

from .fakes import T0, lock, vacuum


def listed(lock_id: int, state: str = "ACQUIRED", partition: str | None = None) -> LockInfo:
    return LockInfo(lock_id, 1, "sales", "orders", partition, "SHARED_READ", state, "bob", "h", None, None)


def test_snapshot_lock_still_listed_keeps_the_event_waiting() -> None:
    readiness = ready_to_clean([lock(7), lock(8)], [listed(8), listed(99)])
    assert not readiness.ready
    assert [entry.lock_id for entry in readiness.locks_held] == [8]


def test_a_waiting_or_other_state_lock_still_counts_as_held() -> None:
    assert not ready_to_clean([lock(7)], [listed(7, state="WAITING")]).ready


def test_reader_that_locked_after_the_vacuum_does_not_delay_the_cleanup() -> None:
    readiness = ready_to_clean([lock(7)], [listed(42), listed(43, partition="ds=1")])
    assert readiness.ready and readiness.locks_held == ()


def test_empty_snapshot_is_ready_at_once() -> None:
    assert ready_to_clean([], [listed(1)]).ready


def test_metastore_error_is_not_ready_and_keeps_the_last_known_holders() -> None:
    readiness = not_checked([lock(7), lock(8)], [lock(8)], "connection refused")
    assert not readiness.ready and readiness.check_error == "connection refused"
    assert [entry.lock_id for entry in readiness.locks_held] == [8]
    assert [e.lock_id for e in not_checked([lock(7)], None, "x").locks_held] == [7]


@given(
    snapshot=st.sets(st.integers(0, 50), max_size=8),
    current=st.sets(st.integers(0, 50), max_size=8),
)
def test_ready_exactly_when_no_snapshot_lock_is_listed(snapshot: set[int], current: set[int]) -> None:
    readiness = ready_to_clean([lock(i) for i in sorted(snapshot)], [listed(i) for i in current])
    assert readiness.ready == (not snapshot & current)
    assert {entry.lock_id for entry in readiness.locks_held} == snapshot & current


# -- envelopes ----------------------------------------------------------------------------------------


def test_first_delay_is_attempt_one_due_one_interval_after_the_check() -> None:
    v = vacuum()
    now = T0 + timedelta(seconds=1)
    envelope = delay_envelope(v, ready_to_clean(v.lock_snapshot, [listed(7)]), now=now, interval_ms=2000, max_wait_s=60)
    assert envelope.attempt == 1
    assert envelope.due_at == now + timedelta(milliseconds=2000)
    assert envelope.causation_id == v.event_id and envelope.correlation_id == v.event_id
    assert envelope.event_id == derived_event_id(v.event_id, "delay")
    assert [entry.lock_id for entry in envelope.locks_held] == [7]
    assert (envelope.tenant, envelope.table, envelope.partition) == (v.tenant, v.table, v.partition)
    assert not envelope.stuck


def test_a_recheck_adds_one_attempt_and_chains_causation() -> None:
    v = vacuum()
    first = delay_envelope(v, ready_to_clean(v.lock_snapshot, [listed(7)]), now=T0, interval_ms=2000, max_wait_s=60)
    second = delay_envelope(
        first,
        ready_to_clean(v.lock_snapshot, [listed(7)]),
        now=T0 + timedelta(seconds=2),
        interval_ms=2000,
        max_wait_s=60,
    )
    assert second.attempt == 2 and second.causation_id == first.event_id and second.vacuum == v


def test_stuck_after_max_wait_keeps_the_first_stuck_time_and_names_the_holders() -> None:
    v = vacuum(lock_snapshot=[lock(7, user="carol", host="etl-3")])
    held = ready_to_clean(v.lock_snapshot, [listed(7)])
    late = T0 + timedelta(seconds=61)
    first = delay_envelope(v, held, now=late, interval_ms=2000, max_wait_s=60)
    assert first.stuck and first.stuck_since == late
    later = delay_envelope(first, held, now=late + timedelta(seconds=2), interval_ms=2000, max_wait_s=60)
    assert later.stuck and later.stuck_since == late
    assert later.locks_held[0].user == "carol" and later.locks_held[0].host == "etl-3"


def test_a_group_due_time_is_used_as_given() -> None:
    v = vacuum()
    due = T0 + timedelta(seconds=5)
    envelope = delay_envelope(
        v, ready_to_clean(v.lock_snapshot, [listed(7)]), now=T0, interval_ms=2000, max_wait_s=60, due=due
    )
    assert envelope.due_at == due


def test_due_time_header_is_rounded_up_so_it_is_never_early() -> None:
    due = T0 + timedelta(microseconds=1500)
    assert due_at_ms(due) == int(T0.timestamp() * 1000) + 2


def test_implausible_due_times_are_refused() -> None:
    assert due_time_problem(-5) is not None
    assert due_time_problem(10 * 24 * 3600 * 1000) is None  # far ahead: clamped when read, not refused
    assert due_time_problem(2000) is None


def test_poll_timeout_waits_for_the_next_due_time_but_never_longer_than_the_cap() -> None:
    assert poll_timeout_s(1000, 1037, busy=False) == 0.037
    assert poll_timeout_s(1000, 900, busy=False) == 0.0
    assert poll_timeout_s(1000, 10**9, busy=False) == IDLE_POLL_CAP_S
    assert poll_timeout_s(1000, None, busy=False) == IDLE_POLL_CAP_S
    assert poll_timeout_s(1000, 10**9, busy=True) == BUSY_POLL_CAP_S


@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(min_value=0, max_value=200)), max_size=60))
def test_in_due_order_by_key_keeps_every_record_once_and_each_keys_records_next_to_each_other(
    items: list[tuple[str, int]],
) -> None:
    numbered = list(enumerate(items))
    ordered = in_due_order_by_key(numbered, lambda item: item[1][1], lambda item: item[1][0])
    assert sorted(ordered) == sorted(numbered)  # each record once
    keys = [item[1][0] for item in ordered]
    for key in set(keys):
        first = keys.index(key)
        assert keys[first : first + keys.count(key)] == [key] * keys.count(key)  # next to each other
        own = [item[1][1] for item in ordered if item[1][0] == key]
        assert own == sorted(own)  # a key's records in due order
    # Keys in the order of their first-due record.
    firsts = [min(due for other, due in items if other == key) for key in dict.fromkeys(keys)]
    assert firsts == sorted(firsts)


def test_a_tables_two_records_checked_apart_in_one_batch_go_on_in_one_bundle() -> None:
    """Two bundles checked 40 ms apart in one batch each had a record of table t: both records go next to
    each other (one bundle, whose next check merges them), the other records in due order."""
    first = [("t", 1000), ("a", 1000)]
    second = [("b", 1040), ("t", 1040)]
    ordered = in_due_order_by_key(second + first, lambda item: item[1], lambda item: item[0])
    assert ordered == [("t", 1000), ("t", 1040), ("a", 1000), ("b", 1040)]
