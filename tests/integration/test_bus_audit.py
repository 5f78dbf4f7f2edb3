"""``acidclean audit`` reproduces a scripted history read from the real broker, in both formats."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

import pytest
from click.testing import CliRunner
from confluent_kafka import Producer

from acidclean.cli import main
from acidclean.consumers.audit import read_audit
from acidclean.schemas.common import LockSnapshotEntry
from acidclean.schemas.events import (
    TOPIC_FIELD,
    CleanupDone,
    DelayedVacuums,
    DelayEnvelope,
    RemovedDirectory,
    RequestedBy,
    VacuumCommitted,
    VacuumFailed,
    VacuumFigures,
    VacuumRequested,
    VacuumStarted,
    VacuumThresholds,
    WaitingVacuum,
)
from acidclean.shared.bus.codec import encode, reject
from acidclean.shared.bus.producer import KafkaEventBus
from acidclean.shared.bus.records import RawRecord
from acidclean.shared.bus.topics import ensure_topics
from acidclean.shared.settings import Settings, load_settings

pytestmark = pytest.mark.integration
T0 = datetime(2025, 3, 14, 9, 0, tzinfo=timezone.utc)


def _id(n: int) -> uuid.UUID:
    return uuid.UUID(f"00000000-0000-4000-8000-{n:012d}")


def _lock(lock_id: int, user: str, host: str) -> LockSnapshotEntry:
    return LockSnapshotEntry(
        lock_id=lock_id,
        txn_id=lock_id + 100,
        lock_type="SHARED_READ",
        state="ACQUIRED",
        user=user,
        host=host,
        acquired_at=T0 - timedelta(minutes=1),
    )


def _vacuum(
    n: int,
    table: str,
    partition: str | None,
    minutes: int,
    kind: Literal["MINOR", "MAJOR"],
    new: str,
    locks: list[Any],
    **extra: Any,
) -> Any:
    return VacuumCommitted(
        event_id=_id(n),
        tenant="acme",
        table=table,
        partition=partition,
        occurred_at=T0 + timedelta(minutes=minutes),
        location=f"/warehouse/{table}/{partition or ''}",
        compaction_type=kind,
        new_directories=[new],
        highest_write_id=3,
        lock_snapshot=locks,
        vacuum_job_id=f"job-{n}",
        **extra,
    )


def _delay(n: int, vacuum: Any, attempt: int, after: timedelta, locks: list[Any], **extra: Any) -> DelayEnvelope:
    checked = vacuum.occurred_at + after
    return DelayEnvelope(
        event_id=_id(n),
        tenant="acme",
        table=vacuum.table,
        partition=vacuum.partition,
        occurred_at=checked,
        causation_id=vacuum.event_id,
        correlation_id=vacuum.event_id,
        vacuum=vacuum,
        attempt=attempt,
        due_at=checked + timedelta(seconds=2),
        locks_held=locks,
        **extra,
    )


def _request(n: int, table: str, partition: str | None, minutes: int) -> VacuumRequested:
    return VacuumRequested(
        event_id=_id(n),
        tenant="acme",
        table=table,
        partition=partition,
        occurred_at=T0 + timedelta(minutes=minutes),
        location=f"/warehouse/{table}/{partition or ''}",
        compaction_type="MINOR",
        reason="12 deltas >= hive.compactor.delta.num.threshold 10",
        figures=VacuumFigures(delta_count=12, delete_delta_count=0, delta_bytes=6000, base_bytes=0, aborted_txns=0),
        thresholds=VacuumThresholds(delta_num=10, delta_pct=0.1, aborted_txns=1000),
        requested_by=RequestedBy(initiator_id="initiator-1", trigger="event"),
        requested_at=T0 + timedelta(minutes=minutes),
    )


def _running(n: int, request: VacuumRequested) -> VacuumStarted:
    moment = request.occurred_at + timedelta(seconds=10)
    return VacuumStarted(
        event_id=_id(n),
        tenant="acme",
        table=request.table,
        partition=request.partition,
        occurred_at=moment,
        causation_id=request.event_id,
        correlation_id=request.event_id,
        vacuum_service_id="vacuum-service-1",
        started_at=moment,
    )


def requests_history() -> list[Any]:
    """Issue 13: a request that committed its vacuum, one that failed, one still running, one waiting."""
    answered, failed, running, waiting = (
        _request(50, "sales.orders", "ds=3", 5),
        _request(60, "hr.people", None, 6),
        _request(70, "sales.orders", "ds=4", 7),
        _request(80, "sales.orders", "ds=5", 8),
    )
    return [
        answered,
        _running(51, answered),
        _vacuum(52, "sales.orders", "ds=3", 5, "MINOR", "delta_0000001_0000012", [], request_id=answered.event_id),
        failed,
        _running(61, failed),
        VacuumFailed(
            event_id=_id(62),
            tenant="acme",
            table="hr.people",
            occurred_at=T0 + timedelta(minutes=6, seconds=30),
            causation_id=_id(61),
            correlation_id=failed.event_id,
            reason_code="error",
            message="Spark job failed: OutOfMemoryError",
            failed_at=T0 + timedelta(minutes=6, seconds=30),
        ),
        running,
        _running(71, running),
        waiting,
    ]


def scripted_history() -> list[Any]:
    """A cleanup after two waits, a wait, a stuck wait and a rejection of an unsafe event."""
    alice, bob, eve = _lock(41, "alice", "reader-1"), _lock(5, "bob", "etl-1"), _lock(9, "eve", "bi-3")
    cleaned = _vacuum(1, "sales.orders", "ds=1", 0, "MINOR", "delta_0000001_0000003", [alice])
    waiting = _vacuum(2, "sales.orders", "ds=2", 1, "MAJOR", "base_0000009", [bob])
    stuck = _vacuum(3, "hr.people", None, 2, "MINOR", "delta_0000001_0000004", [eve])
    unsafe = _vacuum(4, "hr.people", None, 3, "MINOR", "delta_0000005_0000006", [])
    out = encode(unsafe)
    rejection = reject(
        RawRecord("acme.acid.vacuum.committed", 0, 0, out.key, out.value, out.headers),
        "unsafe_path",
        "'delta_1_1/../../etc' is not a child of the table location",
        rejected_by="cleaner-b",
        tenant="acme",
        event=unsafe,
        now=lambda: T0 + timedelta(minutes=3, seconds=1),
    )
    return [
        cleaned,
        waiting,
        stuck,
        unsafe,
        _delay(11, cleaned, 1, timedelta(seconds=2), [alice]),
        _delay(12, cleaned, 2, timedelta(seconds=4), [alice]),
        CleanupDone(
            event_id=_id(13),
            tenant="acme",
            table="sales.orders",
            partition="ds=1",
            occurred_at=T0 + timedelta(seconds=6),
            causation_id=_id(12),
            correlation_id=cleaned.event_id,
            directories_removed=[
                RemovedDirectory(name="delta_0000001_0000001_0000", file_count=1, bytes=1024),
                RemovedDirectory(name="delta_0000002_0000002_0000", file_count=2, bytes=2048),
            ],
            time_waited_ms=6000,
            attempts=3,
            cleaner_id="cleaner-a",
        ),
        _delay(21, waiting, 1, timedelta(seconds=2), [bob]),
        _delay(31, stuck, 1, timedelta(seconds=2), [eve]),
        _delay(
            32, stuck, 43200, timedelta(days=1), [eve], stuck=True, stuck_since=stuck.occurred_at + timedelta(days=1)
        ),
        rejection,
    ]


def publish_history(kafka_bootstrap: str, prefix: str) -> Settings:
    settings = load_settings(environ={}, overrides={"kafka.bootstrap.servers": kafka_bootstrap, "topic_prefix": prefix})
    ensure_topics(settings)
    with KafkaEventBus(settings.kafka) as bus:
        history = scripted_history() + requests_history()
        bus.publish_many([(settings.topic(TOPIC_FIELD[type(e)]), e) for e in history])
    # A record no decoder can read, as a broken producer would leave it: the audit shows it as rejected.
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(
        settings.topic("vacuum_committed"),
        key=b"acme/sales.orders/ds=9",
        value=b"{broken",
        headers=[("ce_specversion", b"1.0"), ("ce_type", b"acidclean.vacuum.committed")],
        timestamp=int((T0 + timedelta(minutes=4)).timestamp() * 1000),
    )
    assert producer.flush(10) == 0
    return settings


EXPECTED_TABLE = """\
TABLE         PARTITION  TYPE   REQUESTED             VACUUM TIME           NEW DIRECTORIES        STATE      ATTEMPTS  WAITED  REMOVED                                                BYTES FREED  CLEANER    DETAIL
sales.orders  ds=1       MINOR  -                     2025-03-14T09:00:00Z  delta_0000001_0000003  cleaned    3         6.0s    delta_0000001_0000001_0000,delta_0000002_0000002_0000  3.0 KiB      cleaner-a
sales.orders  ds=2       MAJOR  -                     2025-03-14T09:01:00Z  base_0000009           waiting    1         2.0s    -                                                      -            -          held by lock 5 (SHARED_READ, txn 105) by bob@etl-1
hr.people     -          MINOR  -                     2025-03-14T09:02:00Z  delta_0000001_0000004  stuck      43200     1d00h   -                                                      -            -          held by lock 9 (SHARED_READ, txn 109) by eve@bi-3
hr.people     -          MINOR  -                     2025-03-14T09:03:00Z  delta_0000005_0000006  rejected   0         -       -                                                      -            -          unsafe_path: 'delta_1_1/../../etc' is not a child of the table location
?             -          ?      -                     -                     -                      rejected   0         -       -                                                      -            -          not_json: the value is not valid JSON (key must be a string at line 1 column 2)
sales.orders  ds=3       MINOR  2025-03-14T09:05:00Z  2025-03-14T09:05:00Z  delta_0000001_0000012  committed  0         -       -                                                      -            -
hr.people     -          MINOR  2025-03-14T09:06:00Z  -                     -                      failed     0         -       -                                                      -            -          error: Spark job failed: OutOfMemoryError
sales.orders  ds=4       MINOR  2025-03-14T09:07:00Z  -                     -                      running    0         -       -                                                      -            -          running on vacuum-service-1 since 2025-03-14T09:07:10Z
sales.orders  ds=5       MINOR  2025-03-14T09:08:00Z  -                     -                      requested  0         -       -                                                      -            -          12 deltas >= hive.compactor.delta.num.threshold 10
"""  # noqa: E501


def _row(vacuum_id: int | None, table: str | None, partition: str | None, **fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "vacuum_id": None if vacuum_id is None else str(_id(vacuum_id)),
        "tenant": "acme",
        "table": table,
        "partition": partition,
        "compaction_type": "MINOR",
        "vacuum_time": None,
        "new_directories": [],
        "state": "waiting",
        "attempts": 0,
        "time_waited_ms": None,
        "directories_removed": [],
        "bytes_freed": 0,
        "cleaner_id": None,
        "reason": None,
        "locks_held": [],
        "stuck_since": None,
        "next_check_at": None,
        "request_id": None,
        "requested_at": None,
        "vacuum_service_id": None,
        "hive_compaction_id": None,
    }
    row.update(fields)
    return row


def _lock_json(lock_id: int, user: str, host: str) -> dict[str, Any]:
    return {
        "lock_id": lock_id,
        "txn_id": lock_id + 100,
        "lock_type": "SHARED_READ",
        "state": "ACQUIRED",
        "user": user,
        "host": host,
        "acquired_at": "2025-03-14T08:59:00Z",
    }


EXPECTED_JSON = [
    _row(
        1,
        "sales.orders",
        "ds=1",
        vacuum_time="2025-03-14T09:00:00Z",
        new_directories=["delta_0000001_0000003"],
        state="cleaned",
        attempts=3,
        time_waited_ms=6000,
        bytes_freed=3072,
        cleaner_id="cleaner-a",
        directories_removed=["delta_0000001_0000001_0000", "delta_0000002_0000002_0000"],
        last_event_at="2025-03-14T09:00:06Z",
    ),
    _row(
        2,
        "sales.orders",
        "ds=2",
        compaction_type="MAJOR",
        vacuum_time="2025-03-14T09:01:00Z",
        new_directories=["base_0000009"],
        attempts=1,
        time_waited_ms=2000,
        reason="held by lock 5 (SHARED_READ, txn 105) by bob@etl-1",
        locks_held=[_lock_json(5, "bob", "etl-1")],
        next_check_at="2025-03-14T09:01:04Z",
        last_event_at="2025-03-14T09:01:02Z",
    ),
    _row(
        3,
        "hr.people",
        None,
        vacuum_time="2025-03-14T09:02:00Z",
        new_directories=["delta_0000001_0000004"],
        state="stuck",
        attempts=43200,
        time_waited_ms=86_400_000,
        reason="held by lock 9 (SHARED_READ, txn 109) by eve@bi-3",
        locks_held=[_lock_json(9, "eve", "bi-3")],
        stuck_since="2025-03-15T09:02:00Z",
        next_check_at="2025-03-15T09:02:02Z",
        last_event_at="2025-03-15T09:02:00Z",
    ),
    _row(
        4,
        "hr.people",
        None,
        vacuum_time="2025-03-14T09:03:00Z",
        new_directories=["delta_0000005_0000006"],
        state="rejected",
        reason="unsafe_path: 'delta_1_1/../../etc' is not a child of the table location",
        last_event_at="2025-03-14T09:03:01Z",
    ),
    _row(
        None,
        None,
        None,
        tenant="default",
        compaction_type=None,
        state="rejected",
        reason="not_json: the value is not valid JSON (key must be a string at line 1 column 2)",
        last_event_at="2025-03-14T09:04:00Z",
    ),
    _row(
        52,
        "sales.orders",
        "ds=3",
        vacuum_time="2025-03-14T09:05:00Z",
        new_directories=["delta_0000001_0000012"],
        state="committed",
        last_event_at="2025-03-14T09:05:10Z",
        request_id=str(_id(50)),
        requested_at="2025-03-14T09:05:00Z",
        vacuum_service_id="vacuum-service-1",
    ),
    _row(
        None,
        "hr.people",
        None,
        state="failed",
        reason="error: Spark job failed: OutOfMemoryError",
        last_event_at="2025-03-14T09:06:30Z",
        request_id=str(_id(60)),
        requested_at="2025-03-14T09:06:00Z",
        vacuum_service_id="vacuum-service-1",
    ),
    _row(
        None,
        "sales.orders",
        "ds=4",
        state="running",
        reason="running on vacuum-service-1 since 2025-03-14T09:07:10Z",
        last_event_at="2025-03-14T09:07:10Z",
        request_id=str(_id(70)),
        requested_at="2025-03-14T09:07:00Z",
        vacuum_service_id="vacuum-service-1",
    ),
    _row(
        None,
        "sales.orders",
        "ds=5",
        state="requested",
        reason="12 deltas >= hive.compactor.delta.num.threshold 10",
        last_event_at="2025-03-14T09:08:00Z",
        request_id=str(_id(80)),
        requested_at="2025-03-14T09:08:00Z",
    ),
]


def _audit(settings: Settings, *args: str) -> str:
    env = {"ACIDCLEAN_KAFKA_BOOTSTRAP": settings.bootstrap_servers, "ACIDCLEAN_TOPIC_PREFIX": settings.topic_prefix}
    result = CliRunner().invoke(main, ["audit", *args], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture(autouse=True)
def audit_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the audit as if read 90 s after T0: the waiting vacuum (due at T0+64 s) is not yet overdue."""
    monkeypatch.setattr("acidclean.consumers.audit.utc_now", lambda: T0 + timedelta(seconds=90))


def test_audit_shows_a_vacuum_not_checked_well_past_its_due_time_as_overdue(
    kafka_bootstrap: str, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = publish_history(kafka_bootstrap, f"{unique_name}.")
    monkeypatch.setattr("acidclean.consumers.audit.utc_now", lambda: T0 + timedelta(minutes=10))
    rows = json.loads(_audit(settings, "sales.orders", "--partition", "ds=2", "--format", "json"))
    expected = {
        **EXPECTED_JSON[1],
        "state": "overdue",
        "reason": "overdue: due at 2025-03-14T09:01:04Z, not checked since; last check at 2025-03-14T09:01:02Z: "
        + str(EXPECTED_JSON[1]["reason"]),
    }
    assert rows == [expected]


def test_audit_reproduces_the_scripted_history_in_both_formats(kafka_bootstrap: str, unique_name: str) -> None:
    settings = publish_history(kafka_bootstrap, f"{unique_name}.")
    assert _audit(settings) == EXPECTED_TABLE
    assert json.loads(_audit(settings, "--format", "json")) == EXPECTED_JSON
    # Every record through the event models: the same rows.
    assert _audit(settings, "--validate") == EXPECTED_TABLE
    assert json.loads(_audit(settings, "--format", "json", "--validate")) == EXPECTED_JSON


def test_audit_filters_by_table_partition_and_time(kafka_bootstrap: str, unique_name: str) -> None:
    settings = publish_history(kafka_bootstrap, f"{unique_name}.")
    rows = json.loads(_audit(settings, "sales.orders", "--partition", "ds=2", "--format", "json"))
    assert rows == [EXPECTED_JSON[1]]
    rows = json.loads(_audit(settings, "hr.people", "--since", "2025-03-14T09:02:30Z", "--format", "json"))
    assert rows == [EXPECTED_JSON[3], EXPECTED_JSON[6]]
    rows = json.loads(_audit(settings, "sales.orders", "--partition", "ds=4", "--format", "json"))
    assert rows == [EXPECTED_JSON[7]]
    lines = _audit(settings, "no.such_table").splitlines()
    assert len(lines) == 1 and lines[0].split()[:3] == ["TABLE", "PARTITION", "TYPE"]


def test_an_audit_that_finds_nothing_says_so_beside_the_header(kafka_bootstrap: str, unique_name: str) -> None:
    settings = publish_history(kafka_bootstrap, f"{unique_name}.")
    env = {"ACIDCLEAN_KAFKA_BOOTSTRAP": settings.bootstrap_servers, "ACIDCLEAN_TOPIC_PREFIX": settings.topic_prefix}
    args = ["audit", "sales.orders", "--partition", "ds=9", "--since", "2025-03-14T09:00:00Z"]
    result = CliRunner().invoke(main, args, env=env, catch_exceptions=False)
    assert result.exit_code == 0 and result.stdout.splitlines()[0].split()[:2] == ["TABLE", "PARTITION"]
    assert len(result.stdout.splitlines()) == 1
    assert (
        "note: no vacuum or request of sales.orders partition ds=9 since 2025-03-14T09:00:00Z in the event topics"
        in result.stderr
    )
    found = CliRunner().invoke(main, ["audit", "sales.orders"], env=env, catch_exceptions=False)
    assert "note: no vacuum" not in found.stderr


def test_audit_of_topics_that_do_not_exist_yet_is_empty(kafka_bootstrap: str, unique_name: str) -> None:
    env = {"ACIDCLEAN_KAFKA_BOOTSTRAP": kafka_bootstrap, "ACIDCLEAN_TOPIC_PREFIX": f"{unique_name}."}
    result = CliRunner().invoke(main, ["audit", "--format", "json"], env=env, catch_exceptions=False)
    assert result.exit_code == 0 and json.loads(result.stdout) == []
    assert "does not exist (yet)" in result.stderr


def test_audit_reads_a_delayed_vacuums_as_one_delay_per_waiting_vacuum(kafka_bootstrap: str, unique_name: str) -> None:
    """Two vacuums of one key: the first waits alone, then both wait in one DelayedVacuums (the second
    is known from it only), then the first is cleaned. Both decoders give the same rows."""
    settings = load_settings(
        environ={}, overrides={"kafka.bootstrap.servers": kafka_bootstrap, "topic_prefix": f"{unique_name}."}
    )
    ensure_topics(settings)
    bob = _lock(5, "bob", "etl-1")
    first = _vacuum(90, "sales.orders", "ds=7", 0, "MINOR", "delta_0000001_0000003", [bob])
    second = _vacuum(91, "sales.orders", "ds=7", 1, "MINOR", "delta_0000004_0000005", [])
    alone = _delay(92, first, 1, timedelta(seconds=2), [bob])
    checked = second.occurred_at + timedelta(seconds=4)
    merged = DelayedVacuums(
        event_id=_id(93),
        tenant="acme",
        table="sales.orders",
        partition="ds=7",
        occurred_at=checked,
        causation_id=alone.event_id,
        due_at=checked + timedelta(seconds=2),
        waiting=[
            WaitingVacuum(vacuum=first, attempt=2, locks_held=[bob]),
            WaitingVacuum(vacuum=second, attempt=1, locks_held=[], check_error="metastore timed out"),
        ],
        merged_from=[alone.event_id, second.event_id],
    )
    cleaned = CleanupDone(
        event_id=_id(94),
        tenant="acme",
        table="sales.orders",
        partition="ds=7",
        occurred_at=checked + timedelta(seconds=3),
        causation_id=merged.event_id,
        correlation_id=first.event_id,
        directories_removed=[RemovedDirectory(name="delta_0000001_0000001_0000", file_count=1, bytes=512)],
        time_waited_ms=64_000,
        attempts=3,
        cleaner_id="cleaner-a",
    )
    with KafkaEventBus(settings.kafka) as bus:
        bus.publish_many([(settings.topic(TOPIC_FIELD[type(e)]), e) for e in (first, alone, merged, cleaned)])

    rows, reader = read_audit(settings)
    assert reader.records_read == 4
    assert [(row.vacuum_id, row.state, row.attempts, row.reason) for row in rows] == [
        (str(first.event_id), "cleaned", 3, None),
        (str(second.event_id), "waiting", 1, "metastore did not answer: metastore timed out"),
    ]
    assert rows[1].vacuum_time == second.occurred_at and rows[1].new_directories == ("delta_0000004_0000005",)
    assert rows[1].next_check_at == merged.due_at and rows[1].time_waited_ms == 4000
    assert rows[0].bytes_freed == 512 and rows[0].next_check_at is None
    assert read_audit(settings, validate=True)[0] == rows
    assert read_audit(settings, table="sales.orders", partition="ds=7")[0] == rows
    assert read_audit(settings, table="hr.people")[0] == []
