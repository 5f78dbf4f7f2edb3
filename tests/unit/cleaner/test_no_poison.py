"""No poison event loops the cleaner (issue 10, item 6): an event whose handling fails is tried a
bounded number of times and then dead-lettered, error texts are cut to fit their fields, a due time
far in the future is clamped, and a stalled partition shows in the metrics and the audit."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from events.factories import delay as factory_delay
from events.factories import done as factory_done
from events.factories import vacuum as factory_vacuum

from acidclean.consumers.audit import fold, overdue_after
from acidclean.consumers.loop import CleanerLoop, LoopConfig
from acidclean.consumers.metrics import CleanerMetrics
from acidclean.consumers.rules.paths import storage_path
from acidclean.consumers.rules.readiness import Readiness
from acidclean.consumers.scheduling import clamp_due_ms, delay_envelope
from acidclean.consumers.work import Outcome, Work
from acidclean.schemas.common import EventBase
from acidclean.schemas.events import CleanupDone, CleanupRejected, DelayEnvelope, VacuumCommitted
from acidclean.shared.acid.names import delta_name
from acidclean.shared.bus.codec import fit
from acidclean.shared.errors import BusError, UnsafePathError

from .fakes import (
    LOCATION,
    T0,
    TOPICS,
    FakeClock,
    FakeConsumer,
    InlineExecutor,
    Rig,
    lock,
    refuse_batch_lookups,
    vacuum,
)

pytestmark = [pytest.mark.rule5]

V, D = TOPICS.vacuum_committed, TOPICS.cleanup_delay
D1, D2, D3 = (delta_name(i, i, 0) for i in (1, 2, 3))
NEW = delta_name(1, 3)
OTHER_LOCATION = "/warehouse/sales.db/returns"


# -- the truncation helper ------------------------------------------------------------------------------


def test_fit_leaves_short_text_alone_and_cuts_long_text_saying_how_much() -> None:
    assert fit("short", 4096) == "short"
    assert fit("x" * 4096, 4096) == "x" * 4096
    text = "".join(f"{i:05d}" for i in range(2000))  # 10,000 characters
    cut = fit(text, 4096)
    assert len(cut) <= 4096
    kept = len(cut) - len(cut.lstrip("0123456789"))
    assert cut[:kept] == text[:kept]
    assert f"{len(text) - kept} characters cut" in cut


def test_fit_never_exceeds_a_tiny_limit() -> None:
    assert len(fit("y" * 100, 10)) <= 10


# -- storage_path: anything urlparse refuses is an unsafe location ----------------------------------------


@pytest.mark.parametrize("location", ["hdfs://[nn/x", "hdfs://nn]/x", "s3://[::1/w"])
def test_storage_path_refuses_what_urlparse_cannot_parse(location: str) -> None:
    with pytest.raises(UnsafePathError):
        storage_path(location)


@pytest.fixture
def rig() -> Rig:
    rig = Rig()
    rig.metastore.add_table("sales.orders", "file:" + LOCATION, "ds=2025-03-14")
    rig.fs.add_acid_dirs(LOCATION, [D1, D2, D3, NEW])
    return rig


def test_an_unparseable_location_is_a_rule_4_refusal_at_once(rig: Rig) -> None:
    outcome = rig.handle(vacuum(location="hdfs://[nn/x"))
    assert outcome.kind == "dead_lettered" and rig.fs.deleted == []
    [rejected] = rig.published(TOPICS.dead_letter)
    assert isinstance(rejected, CleanupRejected) and rejected.reason_code == "unsafe_path"
    assert "hdfs://[nn/x" in rejected.reason


def test_forty_failed_deletes_give_a_delay_envelope_whose_error_fits() -> None:
    rig = Rig()
    rig.metastore.add_table("sales.orders", "file:" + LOCATION, "ds=2025-03-14")
    singles = [delta_name(i, i, 0) for i in range(1, 41)]
    rig.fs.add_acid_dirs(LOCATION, [*singles, delta_name(1, 40)])
    for name in singles:
        rig.fs.fail_delete.add(f"{LOCATION}/{name}")
    event = vacuum(new_directories=[delta_name(1, 40)], highest_write_id=40, obsolete_directories=singles)
    outcome = rig.handle(event)
    assert outcome.kind == "delayed" and rig.fs.deleted == []
    [envelope] = rig.published(TOPICS.cleanup_delay)
    assert isinstance(envelope, DelayEnvelope) and envelope.check_error is not None
    assert len(envelope.check_error) <= 4096
    assert envelope.check_error.startswith("delete failed: ") and "characters cut" in envelope.check_error


# -- the loop over the real handler -------------------------------------------------------------------


def loop_over(rig: Rig, consumer: FakeConsumer, **config: Any) -> CleanerLoop:
    loop = CleanerLoop(
        consumer,
        rig.handler,
        LoopConfig(vacuum_topic=V, delay_topic=D, tenant="acme", cleaner_id="c1", interval_ms=2000, **config),
        executor=InlineExecutor(),
        metrics=rig.metrics,
        clock=rig.clock,
    )
    loop.subscribe()
    consumer.rebalance_assign([(V, 0), (D, 0)])
    return loop


def run_for(loop: CleanerLoop, clock: FakeClock, seconds: float) -> None:
    end = clock.now_ms() + seconds * 1000
    while clock.now_ms() < end:
        loop.step()


def second_table(rig: Rig) -> VacuumCommitted:
    """A valid vacuum of another table, ready to clean (nobody holds a lock on it)."""
    rig.metastore.add_table("sales.returns", "file:" + OTHER_LOCATION)
    rig.fs.add_acid_dirs(OTHER_LOCATION, [D1, D2, D3, NEW])
    event = vacuum(table="sales.returns", partition=None, location=OTHER_LOCATION, lock_snapshot=[lock(8)])
    rig.fs.mark_vacuum_output(event)
    return event


def dones_of(rig: Rig, event: VacuumCommitted) -> list[CleanupDone]:
    return [done for done in rig.dones() if done.correlation_id == event.event_id]


def test_a_poison_location_is_dead_lettered_once_and_the_event_behind_it_is_cleaned_once(rig: Rig) -> None:
    consumer = FakeConsumer(rig.clock)
    loop = loop_over(rig, consumer)
    poison = vacuum(location="hdfs://[nn/x")
    valid = second_table(rig)
    consumer.append(V, 0, poison)
    consumer.append(V, 0, valid)
    run_for(loop, rig.clock, 120)  # the bug: 67 rewinds in 2 minutes
    assert consumer.committed[(V, 0)] == 2
    [rejected] = rig.published(TOPICS.dead_letter)
    assert isinstance(rejected, CleanupRejected) and rejected.reason_code == "unsafe_path"
    assert rejected.causation_id == poison.event_id
    assert len(dones_of(rig, valid)) == 1
    assert consumer.seeks == []  # never rewound


def test_any_handler_error_is_tried_a_bounded_number_of_times_then_dead_lettered(rig: Rig) -> None:
    consumer = FakeConsumer(rig.clock)
    loop = loop_over(rig, consumer, error_tries=3)
    calls: list[str] = []
    get_table = rig.metastore.get_table

    def exploding(db: str, table: str, partition: str | None = None) -> Any:
        if table == "orders":
            calls.append(table)
            raise RuntimeError("boom: the metastore answered something nobody expected")
        return get_table(db, table, partition)

    rig.metastore.get_table = exploding  # type: ignore[method-assign]
    rig.metastore.get_tables = refuse_batch_lookups  # type: ignore[method-assign]  # each table asks on its own
    poison = vacuum()
    rig.fs.mark_vacuum_output(poison)
    valid = second_table(rig)
    consumer.append(V, 0, poison)
    consumer.append(V, 0, valid)
    run_for(loop, rig.clock, 60)
    assert len(calls) == 3
    assert consumer.committed[(V, 0)] == 2
    [rejected] = rig.published(TOPICS.dead_letter)
    assert isinstance(rejected, CleanupRejected) and rejected.reason_code == "other"
    assert "RuntimeError" in rejected.reason and "boom: the metastore answered" in rejected.reason
    assert str(poison.event_id) in rejected.reason and "3" in rejected.reason
    assert (rejected.causation_id, rejected.correlation_id) == (poison.event_id, poison.event_id)
    assert (rejected.source.topic, rejected.source.offset) == (V, 0)
    assert len(dones_of(rig, valid)) == 1 and rig.deleted_names() == [D1, D2, D3]
    assert rig.metrics.dead_letters.labels("other")._value.get() == 1


def test_a_bus_error_still_rewinds_and_commits_nothing(rig: Rig) -> None:
    consumer = FakeConsumer(rig.clock)
    loop = loop_over(rig, consumer)
    rig.metastore.take_lock(7, "sales.orders", "ds=2025-03-14")
    consumer.append(V, 0, vacuum())
    rig.bus.fail_next(5)
    run_for(loop, rig.clock, 3)
    assert consumer.committed.get((V, 0), 0) == 0 and rig.published(TOPICS.dead_letter) == []
    run_for(loop, rig.clock, 30)
    assert consumer.committed[(V, 0)] == 1
    assert rig.published(TOPICS.dead_letter) == [] and len(rig.published(TOPICS.cleanup_delay)) >= 1


def test_a_delay_batch_failing_with_an_error_other_than_a_bus_error_is_dead_lettered(rig: Rig) -> None:
    consumer = FakeConsumer(rig.clock)
    loop = loop_over(rig, consumer)
    rig.metastore.take_lock(7, "sales.orders", "ds=2025-03-14")
    publish_many = rig.bus.publish_many

    def refusing(items: Any) -> Any:
        if any(isinstance(event, DelayEnvelope) for _, event in items):
            raise TypeError("cannot encode this envelope")
        return publish_many(items)

    rig.bus.publish_many = refusing  # type: ignore[method-assign]
    poison = vacuum()
    consumer.append(V, 0, poison)
    run_for(loop, rig.clock, 30)
    assert consumer.committed[(V, 0)] == 1
    [rejected] = rig.published(TOPICS.dead_letter)
    assert isinstance(rejected, CleanupRejected) and "TypeError: cannot encode this envelope" in rejected.reason
    assert rejected.causation_id == poison.event_id


# -- due times far in the future ----------------------------------------------------------------------


def test_a_due_time_a_few_intervals_ahead_is_kept_and_a_farther_one_is_clamped() -> None:
    now = 1_000_000
    assert clamp_due_ms(now + 2000, now, 2000) is None
    assert clamp_due_ms(now + 3 * 2000, now, 2000) is None
    assert clamp_due_ms(now + 24 * 3600 * 1000, now, 2000) == now + 2000
    assert clamp_due_ms(now + 30 * 24 * 3600 * 1000, now, 2000) == now + 2000


def far_future_envelope(rig: Rig, ahead: timedelta) -> DelayEnvelope:
    v = vacuum()
    rig.fs.mark_vacuum_output(v)
    now = rig.clock.now()
    return delay_envelope(v, Readiness(False, (lock(),)), now=now, interval_ms=2000, max_wait_s=3600, due=now + ahead)


def test_an_envelope_due_a_day_ahead_no_longer_holds_its_partition(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    consumer = FakeConsumer(rig.clock)
    loop = loop_over(rig, consumer)
    rig.metastore.take_lock(7, "sales.orders", "ds=2025-03-14")  # the far one's table still has its reader
    skewed = far_future_envelope(rig, timedelta(hours=24))
    valid = second_table(rig)
    now = rig.clock.now()
    behind = delay_envelope(
        valid,
        Readiness(False, (lock(8),)),
        now=now,
        interval_ms=2000,
        max_wait_s=3600,
        due=now + timedelta(seconds=2),
    )
    consumer.append(D, 0, skewed)
    consumer.append(D, 0, behind)
    start = rig.clock.now_ms()
    with caplog.at_level(logging.WARNING, logger="acidclean.cleaner"):
        run_for(loop, rig.clock, 10)
    [done] = dones_of(rig, valid)
    assert done.occurred_at.timestamp() * 1000 - start <= 3 * 2000  # within a few intervals, not a day
    # The skewed one was re-checked early (its reader still holds the lock: it waits again, normally due).
    again = [e for e in rig.published(TOPICS.cleanup_delay) if isinstance(e, DelayEnvelope)]
    assert [e.causation_id for e in again] == [skewed.event_id]
    assert again[0].due_at - again[0].occurred_at == timedelta(milliseconds=2000)
    assert consumer.committed[(D, 0)] == 2
    [warning] = [r for r in caplog.records if "clamped" in r.getMessage()]
    fields = warning.acidclean_fields  # type: ignore[attr-defined]
    assert fields["event_id"] == skewed.event_id
    assert fields["due_at"] == skewed.due_at.isoformat()
    assert fields["clamped_to"] == (skewed.occurred_at + timedelta(seconds=2)).isoformat()


# -- a stalled partition shows in the metrics --------------------------------------------------------


class EmptyBatch:
    """A batch that holds nothing (the loop closes every batch it ran)."""

    def close(self) -> None:
        return None


class AlwaysUnacknowledged:
    """A handler whose outcome for (V, 0, 0) is never acknowledged: its partition is stalled."""

    def __init__(self) -> None:
        self.calls = 0

    def lock_check(self, work: Work, batch: object = None) -> object:
        return object()

    def batch(self, tables: int, read_by_ms: int = 0) -> EmptyBatch:
        return EmptyBatch()

    def prefetch(self, batch: object, firsts: object) -> None:
        return None

    def run_prepared(self, batch: object) -> dict[int, object]:
        return {}

    def flush_batch(self, batch: object) -> None:
        return None

    def handle(self, work: Work, locks: object) -> Outcome:
        self.calls += 1
        if work.offset == 0:
            raise BusError("simulated: Kafka never acknowledges")
        assert isinstance(work.event, EventBase)
        return Outcome("cleaned", work.event)

    def stuck_count(self, within_s: float) -> int:
        return 0

    def flush_delays(self, locks: object) -> None:
        return None


def test_the_metrics_show_a_partition_stalled_behind_an_unacknowledged_head() -> None:
    clock = FakeClock()
    consumer = FakeConsumer(clock)
    metrics = CleanerMetrics()
    handler = AlwaysUnacknowledged()
    loop = CleanerLoop(
        consumer,
        handler,  # type: ignore[arg-type]
        LoopConfig(vacuum_topic=V, delay_topic=D, tenant="acme", cleaner_id="c1", interval_ms=2000),
        executor=InlineExecutor(),
        metrics=metrics,
        clock=clock,
    )
    loop.subscribe()
    consumer.rebalance_assign([(V, 0)])
    consumer.append(V, 0, vacuum())  # committed at T0, the clock's start
    consumer.append(V, 0, vacuum(partition="ds=2"))
    run_for(loop, clock, 1)
    assert loop.overdue_s() < 2
    run_for(loop, clock, 180)
    assert handler.calls > 10 and consumer.committed.get((V, 0), 0) == 0
    assert 170 <= loop.overdue_s() <= 190
    assert 170 <= loop.oldest_pending_s() <= 190  # the loop's clock, not the wall clock
    assert 170 <= (metrics.registry.get_sample_value("acidclean_cleaner_overdue_seconds") or 0) <= 190


# -- ... and in the audit ------------------------------------------------------------------------------


def test_the_audit_shows_a_vacuum_overdue_well_past_its_due_time() -> None:
    waiting = factory_vacuum(occurred_at=T0)
    envelope = factory_delay(waiting, 1)  # checked at T0+2s, due at T0+4s
    late = T0 + timedelta(minutes=10)
    [row] = fold([waiting, envelope], now=late, overdue_after=timedelta(minutes=1))
    assert row.state == "overdue"
    assert row.reason is not None and row.reason.startswith("overdue: due at 2025-03-14T09:00:04Z, not checked since")
    assert "held by lock 7" in row.reason
    assert row.next_check_at == envelope.due_at
    [row] = fold([waiting, envelope], now=T0 + timedelta(seconds=30), overdue_after=timedelta(minutes=1))
    assert row.state == "waiting"
    [row] = fold([waiting, envelope])  # without a clock the fold is as before
    assert row.state == "waiting"


def test_the_audit_shows_a_vacuum_never_checked_as_overdue_and_a_cleaned_one_never() -> None:
    lonely = factory_vacuum(occurred_at=T0, table="hr.people", partition=None)
    cleaned = factory_vacuum(occurred_at=T0)
    events = [lonely, cleaned, factory_delay(cleaned, 1), factory_done(cleaned)]
    rows = {row.table: row for row in fold(events, now=T0 + timedelta(hours=1), overdue_after=timedelta(minutes=1))}
    assert rows["hr.people"].state == "overdue"
    assert rows["hr.people"].reason == "overdue: due at 2025-03-14T09:00:00Z, never checked"
    assert rows["sales.orders"].state == "cleaned"


def test_read_audit_flags_overdue_after_a_few_intervals_with_a_floor() -> None:
    assert overdue_after(2000) == timedelta(seconds=60)
    assert overdue_after(30_000) == timedelta(seconds=300)


# -- the setting ---------------------------------------------------------------------------------------


def test_the_number_of_tries_is_a_setting_the_cleaner_passes_to_its_loop() -> None:
    from acidclean.consumers.cleaner_process import CleanerOptions, CleanerProcess
    from acidclean.shared.settings import load_settings

    assert load_settings(environ={}).cleanup_error_tries == 3
    settings = load_settings(
        environ={"ACIDCLEAN_CLEANUP_ERROR_TRIES": "5"}, overrides={"tenant": "acme", "allowed_roots": {"acme": ["/w"]}}
    )
    rig = Rig()
    cleaner = CleanerProcess(
        settings,
        CleanerOptions(create_topics=False, cleaner_id="c1"),
        metastore_factory=lambda: rig.metastore,
        bus_factory=lambda: rig.bus,
        consumer=FakeConsumer(rig.clock),
        metrics=rig.metrics,
    )
    try:
        assert cleaner.loop.config.error_tries == 5
    finally:
        cleaner.close()
