"""The event models refuse what the contract (docs/design.md section 5) does not allow."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from acidclean.schemas.common import derived_event_id, event_key
from acidclean.schemas.events import (
    EVENT_CLASSES,
    TOPIC_FIELD,
    CleanupDone,
    CleanupStarted,
    DelayEnvelope,
    RemovedDirectory,
    VacuumCommitted,
    VacuumFailed,
    VacuumRequested,
    VacuumStarted,
)

from .factories import (
    T0,
    delay,
    done,
    lock,
    one_of_each,
    rejected,
    requested,
    started,
    vacuum,
    vacuum_failed,
    vacuum_started,
)


@pytest.mark.parametrize("event", one_of_each(), ids=lambda e: type(e).__name__)
def test_every_event_survives_a_json_round_trip_unchanged(event: object) -> None:
    cls = type(event)
    assert cls.model_validate_json(event.model_dump_json()) == event  # type: ignore[attr-defined]


def test_unknown_field_is_refused() -> None:
    body = json.loads(vacuum().model_dump_json())
    body["retention"] = "forever"
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        VacuumCommitted.model_validate_json(json.dumps(body))


@pytest.mark.parametrize(
    ("field", "value"),
    [("highest_write_id", "3"), ("highest_write_id", 3.0), ("highest_write_id", True), ("new_directories", "x")],
)
def test_json_types_are_not_coerced(field: str, value: object) -> None:
    body = json.loads(vacuum().model_dump_json())
    body[field] = value
    with pytest.raises(ValidationError):
        VacuumCommitted.model_validate_json(json.dumps(body))


def test_naive_timestamp_is_refused() -> None:
    with pytest.raises(ValidationError, match="timezone"):
        vacuum(occurred_at=datetime(2025, 1, 1, 12, 0))


def test_timestamps_with_an_offset_are_normalised_to_utc() -> None:
    event = vacuum(occurred_at=datetime(2025, 1, 1, 14, 0, tzinfo=timezone(timedelta(hours=2))))
    assert event.occurred_at == datetime(2025, 1, 1, 12, 0, tzinfo=timezone.utc)
    assert event.occurred_at.utcoffset() == timedelta(0)
    assert '"occurred_at":"2025-01-01T12:00:00Z"' in event.model_dump_json()


@pytest.mark.parametrize("table", ["orders", "a.b.c", "db/t", "db.t ", ""])
def test_table_must_be_db_dot_table(table: str) -> None:
    with pytest.raises(ValidationError):
        vacuum(table=table)


@pytest.mark.parametrize("partition", ["ds", "ds=", "=x", "/ds=1", "ds=1/", "ds=1//r=2", "ds=a\nb"])
def test_partition_must_be_key_value_pairs(partition: str) -> None:
    with pytest.raises(ValidationError):
        vacuum(partition=partition)


@pytest.mark.parametrize("tenant", ["", "a/b", "-x", "a b"])
def test_tenant_cannot_break_the_kafka_key(tenant: str) -> None:
    with pytest.raises(ValidationError):
        vacuum(tenant=tenant)


def test_python_construction_fills_version_and_id_but_the_wire_must_state_them() -> None:
    event = vacuum()
    assert event.schema_version == 1
    assert event.correlation_id == event.event_id
    assert event.missing_on_wire() == ["schema_version", "event_id", "correlation_id"]
    read_back = VacuumCommitted.model_validate_json(event.model_dump_json())
    assert read_back.missing_on_wire() == []
    body = json.loads(event.model_dump_json())
    del body["schema_version"]
    assert VacuumCommitted.model_validate_json(json.dumps(body)).missing_on_wire() == ["schema_version"]


def test_schema_version_other_than_1_is_refused() -> None:
    body = json.loads(vacuum().model_dump_json())
    body["schema_version"] = 2
    with pytest.raises(ValidationError):
        VacuumCommitted.model_validate_json(json.dumps(body))


def test_vacuum_correlation_id_is_its_own_event_id() -> None:
    other = vacuum()
    with pytest.raises(ValidationError, match="correlation_id must equal its event_id"):
        vacuum(correlation_id=other.event_id)


def test_vacuum_needs_a_new_directory() -> None:
    with pytest.raises(ValidationError):
        vacuum(new_directories=[])


def test_delay_envelope_must_match_its_vacuum() -> None:
    v = vacuum()
    with pytest.raises(ValidationError, match="must be its vacuum's"):
        delay(v, table="sales.other")
    with pytest.raises(ValidationError, match="correlation_id must be its vacuum's event_id"):
        delay(v, correlation_id=vacuum().event_id)


def test_stuck_envelope_records_since_when_and_who_holds_the_locks() -> None:
    v = vacuum()
    with pytest.raises(ValidationError, match="stuck and stuck_since"):
        delay(v, stuck=True)
    with pytest.raises(ValidationError, match="stuck and stuck_since"):
        delay(v, stuck_since=T0)
    envelope = delay(
        v, attempt=9, stuck=True, stuck_since=T0 + timedelta(days=1), locks_held=[lock(41, "bob", "etl-7")]
    )
    assert [entry.describe() for entry in envelope.locks_held] == ["lock 41 (SHARED_READ, txn 3) by bob@etl-7"]


def test_delay_attempt_counts_from_one() -> None:
    with pytest.raises(ValidationError):
        delay(vacuum(), attempt=0)


def test_cleanup_done_sums_the_bytes_it_freed() -> None:
    event = done(vacuum())
    assert event.bytes_freed == 300
    with pytest.raises(ValidationError):
        done(vacuum(), time_waited_ms=-1)


def test_cleanup_started_announces_at_least_one_distinct_directory_and_sums_its_bytes() -> None:
    v = vacuum()
    two = [RemovedDirectory(name=f"delta_000000{i}_000000{i}_0000", file_count=1, bytes=100 * i) for i in (1, 2)]
    assert started(v, directories_to_remove=two).bytes_to_free == 300
    with pytest.raises(ValidationError):
        started(v, directories_to_remove=[])  # nothing to delete: nothing is announced
    with pytest.raises(ValidationError, match="each directory once"):
        started(v, directories_to_remove=[two[0], two[0]])
    with pytest.raises(ValidationError):
        started(v, attempt=0)
    with pytest.raises(ValidationError):
        started(v, cleaner_id="")


@pytest.mark.parametrize("missing", ["table", "causation_id", "correlation_id", "cleaner_id", "attempt"])
def test_cleanup_started_requires_what_an_audit_needs(missing: str) -> None:
    body = json.loads(started(vacuum()).model_dump_json())
    del body[missing]
    with pytest.raises(ValidationError):
        CleanupStarted.model_validate_json(json.dumps(body))


def test_cleanup_started_goes_on_the_done_topic() -> None:
    assert TOPIC_FIELD[CleanupStarted] == TOPIC_FIELD[CleanupDone] == "cleanup_done"


def test_rejection_without_a_readable_table_is_keyed_by_tenant_alone() -> None:
    assert rejected(None).key == "acme"
    with pytest.raises(ValidationError):
        rejected(None, reason_code="because")


def test_event_key_is_tenant_table_and_partition() -> None:
    assert vacuum().key == "acme/sales.orders/ds=2025-03-14"
    assert vacuum(partition=None).key == "acme/sales.orders"
    assert event_key("t", "db.x", "a=1/b=2") == "t/db.x/a=1/b=2"


def test_derived_event_ids_are_deterministic_per_cause_and_action() -> None:
    v = vacuum()
    assert derived_event_id(v.event_id, "done") == derived_event_id(v.event_id, "done")
    assert derived_event_id(v.event_id, "done") != derived_event_id(v.event_id, "delay:1")


def test_models_are_immutable() -> None:
    event = vacuum()
    with pytest.raises(ValidationError):
        event.highest_write_id = 9  # type: ignore[misc]


def test_every_event_class_has_a_distinct_cloudevents_type() -> None:
    types = [cls.event_type for cls in EVENT_CLASSES]
    assert all(types) and len(set(types)) == len(types)
    assert {DelayEnvelope.event_type, CleanupStarted.event_type, CleanupDone.event_type} <= set(types)


def test_one_of_each_covers_every_event_class() -> None:
    assert {type(event) for event in one_of_each()} == set(EVENT_CLASSES)


def test_a_request_is_its_own_correlation_and_must_say_so_on_the_wire() -> None:
    request = requested()
    assert request.correlation_id == request.event_id
    assert request.missing_on_wire() == ["schema_version", "event_id", "correlation_id"]
    with pytest.raises(ValidationError, match="correlation_id must equal its event_id"):
        requested(correlation_id=requested().event_id)


@pytest.mark.parametrize("missing", ["reason", "figures", "thresholds", "requested_by", "requested_at", "location"])
def test_a_request_states_why_and_with_which_figures(missing: str) -> None:
    body = json.loads(requested().model_dump_json())
    del body[missing]
    with pytest.raises(ValidationError):
        VacuumRequested.model_validate_json(json.dumps(body))


def test_a_request_refuses_negative_figures_and_unknown_triggers() -> None:
    body = json.loads(requested().model_dump_json())
    body["figures"]["delta_count"] = -1
    with pytest.raises(ValidationError):
        VacuumRequested.model_validate_json(json.dumps(body))
    body = json.loads(requested().model_dump_json())
    body["requested_by"]["trigger"] = "cron"
    with pytest.raises(ValidationError):
        VacuumRequested.model_validate_json(json.dumps(body))


def test_a_failure_message_is_one_line_and_its_code_is_known() -> None:
    request = requested()
    assert vacuum_failed(request, reason_code="nothing_to_vacuum").reason_code == "nothing_to_vacuum"
    with pytest.raises(ValidationError):
        vacuum_failed(request, message="first\nsecond")
    with pytest.raises(ValidationError):
        vacuum_failed(request, message="")
    with pytest.raises(ValidationError):
        vacuum_failed(request, reason_code="because")


@pytest.mark.parametrize("cls", [VacuumStarted, VacuumFailed])
def test_started_and_failed_point_to_their_request(cls: type[VacuumStarted | VacuumFailed]) -> None:
    request = requested()
    event = vacuum_started(request) if cls is VacuumStarted else vacuum_failed(request)
    body = json.loads(event.model_dump_json())
    del body["correlation_id"]
    with pytest.raises(ValidationError):
        cls.model_validate_json(json.dumps(body))


def test_a_request_and_its_answers_share_one_topic_and_key() -> None:
    request = requested()
    events = [request, vacuum_started(request), vacuum_failed(request)]
    assert {TOPIC_FIELD[type(event)] for event in events} == {"vacuum_requests"}
    assert {event.key for event in events} == {"acme/sales.orders/ds=2025-03-14"}


def test_a_vacuum_names_its_request_or_none() -> None:
    assert vacuum().request_id is None
    request = requested()
    linked = vacuum(request_id=request.event_id)
    assert VacuumCommitted.model_validate_json(linked.model_dump_json()).request_id == request.event_id
