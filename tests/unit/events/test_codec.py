"""Events cross Kafka as binary-mode CloudEvents, and anything wrong on the wire becomes a dead letter."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from acidclean.consumers.audit import AUDIT_TOPICS
from acidclean.schemas.events import CleanupDone, CleanupRejected, CleanupStarted, DelayEnvelope, VacuumCommitted
from acidclean.shared.bus.codec import (
    DUE_AT,
    decode,
    due_at_ms,
    encode,
    header_due_at_ms,
    reject,
)
from acidclean.shared.bus.records import OutgoingRecord, RawRecord, raw_record
from acidclean.shared.errors import ConfigurationError

from .factories import T0, delay, done, one_of_each, started, vacuum

NOW = datetime(2025, 6, 1, tzinfo=timezone.utc)


def as_consumed(out: OutgoingRecord, topic: str = "acid.vacuum.committed", offset: int = 5) -> RawRecord:
    return RawRecord(
        topic=topic,
        partition=2,
        offset=offset,
        key=out.key,
        value=out.value,
        headers=tuple(out.headers),
        timestamp_ms=1,
    )


def decoded(record: RawRecord, **kwargs: Any) -> Any:
    return decode(record, rejected_by="cleaner-test", tenant="fallback", now=lambda: NOW, **kwargs)


def with_header(record: RawRecord, name: str, value: bytes | None) -> RawRecord:
    headers = tuple((n, v) for n, v in record.headers if n != name)
    return replace(record, headers=headers if value is None else (*headers, (name, value)))


def with_body(record: RawRecord, change: Any) -> RawRecord:
    body = json.loads(record.value or b"")
    change(body)
    return replace(record, value=json.dumps(body).encode())


@pytest.mark.parametrize("event", one_of_each(), ids=lambda e: type(e).__name__)
def test_every_event_type_decodes_to_an_equal_model(event: Any) -> None:
    assert decoded(as_consumed(encode(event))) == event


def test_record_carries_key_and_cloudevents_headers() -> None:
    event = delay(vacuum())
    out = encode(event, source="/acidclean/cleaner")
    headers = dict(out.headers)
    assert out.key == b"acme/sales.orders/ds=2025-03-14"
    assert headers["ce_specversion"] == b"1.0"
    assert headers["ce_id"] == str(event.event_id).encode()
    assert headers["ce_source"] == b"/acidclean/cleaner"
    assert headers["ce_type"] == b"acidclean.cleanup.delayed"
    assert headers["ce_subject"] == out.key
    assert datetime.fromisoformat(headers["ce_time"].decode().replace("Z", "+00:00")) == event.occurred_at
    assert headers["correlation_id"] == str(event.vacuum.event_id).encode()
    assert headers["causation_id"] == str(event.vacuum.event_id).encode()
    assert headers["content-type"] == b"application/json"
    assert headers["x-attempt"] == b"1"
    assert json.loads(out.value)["attempt"] == 1


def test_absent_causation_means_no_causation_header() -> None:
    assert "causation_id" not in dict(encode(vacuum()).headers)


def test_due_at_header_is_integer_milliseconds_never_early() -> None:
    due = T0 + timedelta(microseconds=1500)
    record = as_consumed(encode(delay(vacuum(), due_at=due)))
    header = header_due_at_ms(record)
    assert header == due_at_ms(due) == int(T0.timestamp() * 1000) + 2
    assert header is not None and header / 1000 >= due.timestamp()
    assert due_at_ms(T0) == int(T0.timestamp() * 1000)


def _code(result: Any) -> str:
    assert isinstance(result, CleanupRejected), f"expected a rejection, got {result!r}"
    return result.reason_code


def test_non_json_value_is_rejected_with_the_raw_bytes() -> None:
    record = replace(as_consumed(encode(vacuum())), value=b"\xff{not json")
    result = decoded(record)
    assert _code(result) == "not_json"
    assert base64.b64decode(result.source.value_b64 or "") == b"\xff{not json"
    assert base64.b64decode(result.source.key_b64 or "") == record.key
    assert (result.source.topic, result.source.partition, result.source.offset) == ("acid.vacuum.committed", 2, 5)
    assert {h.name for h in result.source.headers} >= {"ce_id", "ce_type"}
    assert result.rejected_by == "cleaner-test" and result.occurred_at == NOW


def test_tombstone_is_rejected() -> None:
    assert _code(decoded(replace(as_consumed(encode(vacuum())), value=None))) == "not_json"


def test_json_that_is_not_an_object_is_rejected() -> None:
    assert _code(decoded(replace(as_consumed(encode(vacuum())), value=b"[1, 2]"))) in ("not_json", "invalid_event")


def test_invalid_event_is_rejected_with_the_field_named() -> None:
    record = with_body(as_consumed(encode(vacuum())), lambda b: b.update(highest_write_id="3"))
    result = decoded(record)
    assert _code(result) == "invalid_event"
    assert "highest_write_id" in result.reason


@pytest.mark.parametrize("version", [2, 0, "1", None])
def test_unknown_schema_version_is_rejected(version: Any) -> None:
    record = with_body(as_consumed(encode(vacuum())), lambda b: b.update(schema_version=version))
    assert _code(decoded(record)) == "unknown_schema_version"


def test_missing_schema_version_is_rejected() -> None:
    record = with_body(as_consumed(encode(vacuum())), lambda b: b.pop("schema_version"))
    assert _code(decoded(record)) == "unknown_schema_version"


def test_missing_correlation_id_on_a_vacuum_is_rejected() -> None:
    record = with_body(as_consumed(encode(vacuum())), lambda b: b.pop("correlation_id"))
    result = decoded(with_header(record, "correlation_id", None))
    assert _code(result) == "invalid_event"
    assert "correlation_id" in result.reason


def test_key_that_disagrees_with_the_body_is_rejected() -> None:
    record = replace(as_consumed(encode(vacuum())), key=b"acme/sales.other/ds=2025-03-14")
    assert _code(decoded(record)) == "key_mismatch"
    assert _code(decoded(replace(record, key=None))) == "key_mismatch"
    assert _code(decoded(replace(record, key=b"\xff"))) == "key_mismatch"


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("ce_id", b"not-a-uuid"),
        ("ce_id", None),
        ("ce_subject", b"acme/x.y"),
        ("ce_time", b"yesterday"),
        ("ce_time", b"2020-01-01T00:00:00Z"),
        ("correlation_id", b"6f0c9f4e-1d0a-5b1e-9c55-0ac1dc1e0001"),
        ("correlation_id", None),
        ("causation_id", b"6f0c9f4e-1d0a-5b1e-9c55-0ac1dc1e0001"),
        ("ce_source", None),
        ("ce_id", b"\xff"),
    ],
)
def test_headers_that_disagree_with_the_body_are_rejected(header: str, value: bytes | None) -> None:
    record = with_header(as_consumed(encode(vacuum())), header, value)
    assert _code(decoded(record)) == "header_mismatch"


def test_duplicate_cloudevents_header_is_rejected() -> None:
    record = as_consumed(encode(vacuum()))
    record = replace(record, headers=(*record.headers, ("ce_id", dict(record.headers)["ce_id"])))
    assert _code(decoded(record)) == "header_mismatch"


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("ce_type", b"com.example.other"),
        ("ce_type", None),
        ("ce_specversion", b"0.3"),
        ("content-type", b"application/cloudevents+json"),
    ],
)
def test_unknown_event_type_or_encoding_is_rejected(header: str, value: bytes | None) -> None:
    assert _code(decoded(with_header(as_consumed(encode(vacuum())), header, value))) == "unknown_event_type"


def test_event_that_does_not_belong_on_the_topic_is_rejected() -> None:
    record = as_consumed(encode(done(vacuum())))
    assert _code(decoded(record, expected=(VacuumCommitted, DelayEnvelope))) == "unknown_event_type"
    assert isinstance(decoded(record, expected=(CleanupDone,)), CleanupDone)


def test_cleanup_started_round_trips_on_the_done_topic_with_its_ids_in_headers() -> None:
    event = started(vacuum())
    out = encode(event)
    headers = dict(out.headers)
    assert headers["ce_type"] == b"acidclean.cleanup.started"
    assert headers["correlation_id"] == str(event.correlation_id).encode()
    assert headers["causation_id"] == str(event.causation_id).encode()
    record = as_consumed(out, topic="acid.cleanup.done")
    assert decoded(record, expected=AUDIT_TOPICS["cleanup_done"]) == event
    assert _code(decoded(record, expected=(CleanupDone,))) == "unknown_event_type"  # a reader that predates it
    assert isinstance(decoded(as_consumed(encode(done(vacuum()))), expected=AUDIT_TOPICS["cleanup_done"]), CleanupDone)
    assert CleanupStarted in AUDIT_TOPICS["cleanup_done"]


def test_delay_envelope_whose_due_header_disagrees_is_rejected() -> None:
    record = as_consumed(encode(delay(vacuum())))
    assert _code(decoded(with_header(record, DUE_AT, (1).to_bytes(8, "big")))) == "invalid_due_time"
    assert _code(decoded(with_header(record, DUE_AT, None))) == "invalid_due_time"


def test_unrelated_headers_are_ignored() -> None:
    event = vacuum()
    record = as_consumed(encode(event))
    record = replace(record, headers=(*record.headers, ("traceparent", b"00-abc"), ("x", None), ("x", b"\xff")))
    assert decoded(record) == event


def test_rejection_keeps_what_could_be_read_so_the_audit_finds_the_vacuum() -> None:
    event = vacuum()
    record = with_body(as_consumed(encode(event)), lambda b: b.update(compaction_type="MEDIUM"))
    result = decoded(record)
    assert _code(result) == "invalid_event"
    assert (result.tenant, result.table, result.partition) == (event.tenant, event.table, event.partition)
    assert result.correlation_id == event.event_id and result.causation_id == event.event_id
    assert result.rejected_event_type == VacuumCommitted.event_type
    assert result.key == event.key


def test_rejection_of_unreadable_bytes_falls_back_to_the_consumer_tenant() -> None:
    result = decoded(replace(as_consumed(encode(vacuum())), value=b"\x00\x01"))
    assert (result.tenant, result.table, result.correlation_id) == ("fallback", None, None)


def test_rejecting_the_same_record_twice_gives_the_same_event_id() -> None:
    record = replace(as_consumed(encode(vacuum())), value=b"nope")
    first, second = decoded(record), decode(record, rejected_by="other", tenant="fallback")
    assert first.event_id == second.event_id
    assert decoded(replace(record, offset=6)).event_id != first.event_id


def test_cleaner_can_dead_letter_a_valid_but_unsafe_event() -> None:
    event = vacuum()
    record = as_consumed(encode(event))
    result = reject(record, "unsafe_path", "'../x' escapes the location", rejected_by="c1", tenant="acme", event=event)
    assert (result.correlation_id, result.causation_id, result.key) == (event.event_id, event.event_id, event.key)
    assert decoded(as_consumed(encode(result), topic="acid.cleanup.dead-letter")) == result


def test_dead_letter_decodes_back_from_the_dead_letter_topic() -> None:
    rejection = decoded(replace(as_consumed(encode(vacuum())), value=b"garbage"))
    again = decoded(as_consumed(encode(rejection), topic="acid.cleanup.dead-letter"), expected=(CleanupRejected,))
    assert again == rejection


def test_a_bad_fallback_tenant_is_a_configuration_error_not_a_dead_letter() -> None:
    with pytest.raises(ConfigurationError, match="fallback tenant"):
        decode(as_consumed(encode(vacuum())), rejected_by="c", tenant="a/b")


class FakeMessage:
    def __init__(self, key: Any, value: Any, headers: Any, timestamp: tuple[int, int]) -> None:
        self._key, self._value, self._headers, self._timestamp = key, value, headers, timestamp

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return 1

    def offset(self) -> int:
        return 9

    def key(self) -> Any:
        return self._key

    def value(self) -> Any:
        return self._value

    def headers(self) -> Any:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return self._timestamp


def test_raw_record_copies_a_consumed_message() -> None:
    record = raw_record(FakeMessage(b"k", "v", [("h", b"1"), ("n", None)], (1, 1234)))
    assert record == RawRecord("t", 1, 9, b"k", b"v", (("h", b"1"), ("n", None)), 1234)
    assert raw_record(FakeMessage(None, None, None, (0, 0))).timestamp_ms is None


def test_a_huge_record_is_cut_so_its_dead_letter_still_fits_in_a_kafka_message() -> None:
    record = replace(
        as_consumed(encode(vacuum())),
        key=b"k" * 100_000,
        value=b"x" * 2_000_000,
        headers=tuple((f"h{i}", b"v" * 50_000) for i in range(100)),
    )
    result = decoded(record)
    assert _code(result) == "unknown_event_type"  # the 100 headers replaced the CloudEvents ones
    assert result.source.truncated and result.source.value_size == 2_000_000
    assert len(encode(result).value) < 900_000
    assert base64.b64decode(result.source.value_b64 or "") == b"x" * 256 * 1024


def test_a_normal_record_is_kept_whole() -> None:
    result = decoded(replace(as_consumed(encode(vacuum())), value=b"nope"))
    assert not result.source.truncated and result.source.value_size == 4
