"""readyToClean from a lock snapshot and the current locks; due times and delay envelopes."""

from __future__ import annotations

import itertools
from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from acidclean.consumers.rules.readiness import not_checked, ready_to_clean
from acidclean.consumers.scheduling import (
    BUNDLE_DUE_SPREAD_MS,
    BUSY_POLL_CAP_S,
    IDLE_POLL_CAP_S,
    cohorts_by_carries,
    delay_envelope,
    due_time_problem,
    poll_timeout_s,
    runs_due_together,
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


@given(st.lists(st.integers(min_value=0, max_value=200), max_size=60))
def test_runs_due_together_keep_every_record_once_in_due_order_each_run_within_the_spread(dues: list[int]) -> None:
    runs = runs_due_together(list(enumerate(dues)), lambda item: item[1])
    flat = [item for run in runs for item in run]
    assert sorted(flat) == sorted(enumerate(dues))  # each record once
    assert [due for _, due in flat] == sorted(dues)
    for run in runs:
        assert run and run[-1][1] - run[0][1] <= BUNDLE_DUE_SPREAD_MS
    # A new run starts only for a record too late for the one before: as few bundles as the spread allows.
    for before, after in itertools.pairwise(runs):
        assert after[0][1] - before[0][1] > BUNDLE_DUE_SPREAD_MS


def test_records_checked_apart_are_not_bundled_to_be_due_when_the_last_one_is() -> None:
    """A batch that checked two bundles 40 ms apart writes their records in two runs, each due when its
    own check's records are; records of one check (one due time) stay together."""
    first, second = [("a", 1000)] * 3, [("b", 1040)] * 2
    assert runs_due_together(second + first, lambda item: item[1]) == [first, second]
    assert runs_due_together([("a", 1000), ("b", 1000 + BUNDLE_DUE_SPREAD_MS)], lambda item: item[1]) == [
        [("a", 1000), ("b", 1000 + BUNDLE_DUE_SPREAD_MS)]
    ]


@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(min_value=0, max_value=200)), max_size=60))
def test_runs_due_together_by_key_keep_each_keys_records_in_one_run_never_due_before_any_of_them(
    items: list[tuple[str, int]],
) -> None:
    numbered = list(enumerate(items))
    runs = runs_due_together(numbered, lambda item: item[1][1], key=lambda item: item[1][0])
    flat = [item for run in runs for item in run]
    assert sorted(flat) == sorted(numbered)  # each record once
    runs_of_key: dict[str, set[int]] = {}
    for index, run in enumerate(runs):
        assert run
        due = max(item[1][1] for item in run)  # a bundle is due when its last member is
        assert all(item[1][1] <= due for item in run)
        keys = [item[1][0] for item in run]
        for key in set(keys):
            runs_of_key.setdefault(key, set()).add(index)
            first = keys.index(key)
            assert keys[first : first + keys.count(key)] == [key] * keys.count(key)  # next to each other
    assert all(len(indexes) == 1 for indexes in runs_of_key.values()), runs_of_key
    # Without the key the cut is the plain one: a run per spread.
    assert len(runs) <= len(runs_due_together(numbered, lambda item: item[1][1]))


def test_a_tables_two_records_checked_apart_in_one_batch_go_on_in_one_bundle() -> None:
    """Two bundles checked 40 ms apart in one batch each had a record of table t: both records go in the
    later run (one bundle, whose next check merges them), the other records stay where their checks
    put them."""
    first = [("t", 1000), ("a", 1000)]
    second = [("b", 1040), ("t", 1040)]
    runs = runs_due_together(second + first, lambda item: item[1], key=lambda item: item[0])
    assert runs == [[("a", 1000)], [("t", 1000), ("t", 1040), ("b", 1040)]]


Record = tuple[str, int | None]  # (key, carries left; None: no summary)


def _cohorts(items: list[Record], width: int = 8, min_size: int = 3) -> list[list[Record]]:
    return cohorts_by_carries(items, lambda item: item[1], lambda item: item[0], width=width, min_size=min_size)


@given(
    st.lists(
        st.tuples(st.sampled_from("abcdefghijklmnopqrstuvwxyz"), st.none() | st.integers(min_value=-1, max_value=40)),
        max_size=60,
    ),
    st.integers(min_value=1, max_value=10),
    st.integers(min_value=1, max_value=6),
)
def test_cohorts_keep_every_record_once_and_never_mix_one_that_cannot_be_carried_with_those_that_can(
    items: list[Record], width: int, min_size: int
) -> None:
    cohorts = _cohorts(items, width, min_size)
    flat = [item for cohort in cohorts for item in cohort]
    assert sorted(flat, key=repr) == sorted(items, key=repr)  # each record once
    assert all(cohorts)
    repeated = {key for key, _ in items if sum(1 for other, _ in items if other == key) > 1}
    carried = []
    for cohort in cohorts:
        # A bundle whose summary is lost to one member is read member by member: such members go apart.
        carriable = [left is not None and left > 0 and key not in repeated for key, left in cohort]
        assert all(carriable) or not any(carriable), cohort
        if all(carriable):
            carried.append(sorted(left for _, left in cohort if left is not None))
    keys_in = [{key for key, _ in cohort} for cohort in cohorts]
    assert all(not (first & second) for first, second in itertools.combinations(keys_in, 2))  # a key in one cohort
    # Ranges of checks left that do not overlap, in order: and fewer than min_size apart only when there
    # is nothing else to join.
    assert all(below[-1] <= above[0] for below, above in itertools.pairwise(carried))
    assert all(len(cohort) >= min_size for cohort in carried) or len(carried) == 1


def test_records_far_apart_in_checks_left_go_in_separate_bundles_and_those_without_a_summary_apart() -> None:
    """A pass's records with 8-10 checks left, 20-22 and 30 go in three cohorts (each carried on whole
    until its own members are due to be read), the one without a summary and a table with two records
    in a fourth; a cohort too small to stand alone joins the one below it."""
    low = [("a", 9), ("b", 8), ("c", 10)]
    middle = [("d", 21), ("e", 20), ("f", 22)]
    high = [("g", 30), ("h", 31), ("i", 30)]
    loose = [("j", None), ("k", 12), ("k", 25), ("l", 0)]
    cohorts = _cohorts(high + loose + middle + low)
    assert cohorts == [
        [("b", 8), ("a", 9), ("c", 10)],
        [("e", 20), ("d", 21), ("f", 22)],
        [("g", 30), ("i", 30), ("h", 31)],
        [("j", None), ("k", 12), ("k", 25), ("l", 0)],
    ]
    assert _cohorts([*low, ("z", 29)]) == [[("b", 8), ("a", 9), ("c", 10), ("z", 29)]]
    assert _cohorts([("z", 2), *middle]) == [[("z", 2), ("e", 20), ("d", 21), ("f", 22)]]
