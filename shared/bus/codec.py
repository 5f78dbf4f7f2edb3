"""The CloudEvents Kafka protocol binding in binary mode, for acidclean's events (pure, no I/O).

On the wire an event is: key ``tenant/db.table[/partition]``; value the model's JSON; headers
``ce_specversion``, ``ce_id`` (event id), ``ce_source``, ``ce_type``, ``ce_time`` (occurred_at),
``ce_subject`` (the key), ``content-type``, plus ``correlation_id`` and ``causation_id`` when set. A
delay envelope also carries ``x-due-at`` (epoch milliseconds, 8 bytes big-endian, rounded up so it
is never early) and ``x-attempt``, so a delay consumer can schedule without parsing the value.

:func:`decode` never raises: whatever the bytes, it returns the event or a ``CleanupRejected``
naming the reason and carrying the raw record, ready for the dead-letter topic.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import re
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, cast

from pydantic import ValidationError

from acidclean.schemas.common import (
    ACIDCLEAN_NAMESPACE,
    PARTITION_PATTERN,
    SUPPORTED_SCHEMA_VERSIONS,
    TABLE_PATTERN,
    TENANT_PATTERN,
    EventBase,
    utc_now,
)
from acidclean.schemas.events import (
    EVENT_CLASS_BY_TYPE,
    CleanupRejected,
    DelayedVacuums,
    DelayEnvelope,
    Event,
    RawHeader,
    RejectionCode,
    SourceRecord,
)
from acidclean.shared.bus.records import OutgoingRecord, RawRecord
from acidclean.shared.errors import ConfigurationError

SPECVERSION = "1.0"
CONTENT_TYPE = "application/json"
CE_SPECVERSION = "ce_specversion"
CE_ID = "ce_id"
CE_SOURCE = "ce_source"
CE_TYPE = "ce_type"
CE_TIME = "ce_time"
CE_SUBJECT = "ce_subject"
CONTENT_TYPE_HEADER = "content-type"
CORRELATION_ID = "correlation_id"
CAUSATION_ID = "causation_id"
DUE_AT = "x-due-at"
ATTEMPT = "x-attempt"
DEFAULT_SOURCE = "/acidclean"
MAX_REASON = 2000
# A dead letter must fit in one Kafka message (message.max.bytes is 1 MB by default) after base64.
MAX_RAW_VALUE = 256 * 1024
MAX_RAW_KEY = 16 * 1024
MAX_RAW_HEADER = 4 * 1024
MAX_RAW_HEADERS = 32

_TENANT = re.compile(TENANT_PATTERN)
_TABLE = re.compile(TABLE_PATTERN)
_PARTITION = re.compile(PARTITION_PATTERN)


def due_at_ms(due_at: datetime) -> int:
    """Epoch milliseconds of a due time, rounded up: a consumer that honours it is never early."""
    return math.ceil(round(due_at.timestamp() * 1_000_000) / 1000)


def fit(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, ending with how many were cut.

    Every error text that goes into an event field with a length limit passes through here: a text
    one character too long would make the event invalid, and an outcome that cannot be built is
    an event the cleaner can never finish (it would be read again and again).
    """
    if len(text) <= limit:
        return text
    kept = limit
    while True:  # the note's length depends on the number it states: settle on the longest prefix that fits
        note = f" [... {len(text) - kept} characters cut]"
        fitting = limit - len(note)
        if fitting < 0:
            return text[:limit]  # no room even for the note
        if fitting == kept:
            return text[:kept] + note
        kept = fitting


def fit_field(model: type[EventBase], name: str, text: str) -> str:
    """``text`` cut (by :func:`fit`) to the ``max_length`` of ``model``'s field ``name``."""
    limits = [getattr(item, "max_length", None) for item in model.model_fields[name].metadata]
    limit = next((limit for limit in limits if limit is not None), None)
    if limit is None:
        raise ValueError(f"{model.__name__}.{name} has no length limit")
    return fit(text, limit)


def encode(event: EventBase, *, source: str = DEFAULT_SOURCE) -> OutgoingRecord:
    """The Kafka record of ``event`` (binary-mode CloudEvent)."""
    key = event.key.encode("utf-8")
    headers: list[tuple[str, bytes]] = [
        (CE_SPECVERSION, SPECVERSION.encode()),
        (CE_ID, str(event.event_id).encode()),
        (CE_SOURCE, source.encode("utf-8")),
        (CE_TYPE, event.event_type.encode()),
        (CE_TIME, event.occurred_at.isoformat().replace("+00:00", "Z").encode()),
        (CE_SUBJECT, key),
        (CONTENT_TYPE_HEADER, CONTENT_TYPE.encode()),
    ]
    if event.correlation_id is not None:
        headers.append((CORRELATION_ID, str(event.correlation_id).encode()))
    if event.causation_id is not None:
        headers.append((CAUSATION_ID, str(event.causation_id).encode()))
    if isinstance(event, DelayEnvelope | DelayedVacuums):
        headers.append((DUE_AT, due_at_ms(event.due_at).to_bytes(8, "big", signed=True)))
        if isinstance(event, DelayEnvelope):
            headers.append((ATTEMPT, str(event.attempt).encode()))
        value = event.wire_value  # written without the models (acidclean.consumers.waiting)
        if value is not None:
            return OutgoingRecord(key=key, value=value, headers=tuple(headers))
    return OutgoingRecord(key=key, value=event.model_dump_json().encode("utf-8"), headers=tuple(headers))


def header_due_at_ms(record: RawRecord | OutgoingRecord) -> int | None:
    """The ``x-due-at`` header of a record, or None when it is absent or malformed."""
    for name, value in record.headers:
        if name == DUE_AT:
            return int.from_bytes(value, "big", signed=True) if value is not None and len(value) == 8 else None
    return None


class _Refused(Exception):
    def __init__(self, code: RejectionCode, reason: str) -> None:
        super().__init__(reason)
        self.code: RejectionCode = code
        self.reason = reason


def decode(
    record: RawRecord,
    *,
    rejected_by: str,
    tenant: str,
    expected: tuple[type[EventBase], ...] | None = None,
    now: Callable[[], datetime] = utc_now,
) -> Event:
    """The event in ``record``, or a ``CleanupRejected`` saying why there is none. Never raises.

    ``expected`` lists the event classes that belong on the record's topic; anything else is
    refused. When it does not include ``CleanupRejected``, a ``CleanupRejected`` result is always a
    fresh rejection to publish on the dead-letter topic. ``tenant`` is used for a rejection when the
    message itself names no valid tenant. Only a bad ``tenant`` or ``rejected_by`` (configuration,
    not data) raises: ``ConfigurationError``.
    """
    if not _TENANT.fullmatch(tenant) or not rejected_by:
        raise ConfigurationError(
            f"decode needs a valid fallback tenant (got {tenant!r}) and a non-empty rejected_by "
            f"(got {rejected_by!r}) to build dead letters"
        )
    ce_type: str | None = None
    try:
        headers = _headers(record)
        ce_type = headers.get(CE_TYPE)
        event = _decode(record, headers, expected)
    except _Refused as refusal:
        return reject(
            record,
            refusal.code,
            refusal.reason,
            rejected_by=rejected_by,
            tenant=tenant,
            rejected_event_type=ce_type,
            now=now,
        )
    except Exception as error:  # the promise is "never raises": anything unforeseen is a dead letter too
        return reject(
            record,
            "other",
            f"could not decode: {type(error).__name__}: {error}",
            rejected_by=rejected_by,
            tenant=tenant,
            rejected_event_type=ce_type,
            now=now,
        )
    return cast(Event, event)


def _headers(record: RawRecord) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in record.headers:
        if not name.startswith("ce_") and name not in (CORRELATION_ID, CAUSATION_ID, CONTENT_TYPE_HEADER):
            continue
        if name in headers:
            raise _Refused("header_mismatch", f"header {name!r} appears more than once")
        try:
            headers[name] = (value or b"").decode("utf-8")
        except UnicodeDecodeError:
            raise _Refused("header_mismatch", f"header {name!r} is not UTF-8") from None
    return headers


def _decode(record: RawRecord, headers: dict[str, str], expected: tuple[type[EventBase], ...] | None) -> EventBase:
    if headers.get(CE_SPECVERSION) != SPECVERSION:
        raise _Refused("unknown_event_type", f"ce_specversion is {headers.get(CE_SPECVERSION)!r}, expected '1.0'")
    content_type = headers.get(CONTENT_TYPE_HEADER, CONTENT_TYPE)
    if not content_type.startswith(CONTENT_TYPE):
        raise _Refused("unknown_event_type", f"content-type {content_type!r}: only binary-mode application/json")
    ce_type = headers.get(CE_TYPE)
    event_class = EVENT_CLASS_BY_TYPE.get(ce_type or "")
    if event_class is None:
        raise _Refused("unknown_event_type", f"ce_type {ce_type!r} is not an acidclean event")
    if expected is not None and event_class not in expected:
        names = ", ".join(cls.__name__ for cls in expected)
        raise _Refused("unknown_event_type", f"a {event_class.__name__} does not belong on {record.topic!r} ({names})")
    if not record.value:
        raise _Refused("not_json", "the value is empty (a tombstone), not an event")
    event = _validate(event_class, record.value)
    _check_envelope(record, headers, event)
    return event


def _validate(event_class: type[EventBase], value: bytes) -> EventBase:
    try:
        event = event_class.model_validate_json(value)
    except ValidationError as error:
        raise _classify(error, value) from None
    missing = event.missing_on_wire()
    if "schema_version" in missing:
        raise _Refused("unknown_schema_version", "the event states no schema_version")
    if missing:
        raise _Refused("invalid_event", f"required on the wire but missing: {', '.join(missing)}")
    return event


def _classify(error: ValidationError, value: bytes) -> _Refused:
    details = error.errors(include_url=False, include_input=False)
    if any(item["type"] in ("json_invalid", "json_type") for item in details):
        detail = str(details[0]["msg"]).removeprefix("Invalid JSON: ")
        return _Refused("not_json", f"the value is not valid JSON ({detail})")
    body = json.loads(value)
    version = body.get("schema_version") if isinstance(body, dict) else None
    if isinstance(body, dict) and (type(version) is not int or version not in SUPPORTED_SCHEMA_VERSIONS):
        supported = sorted(SUPPORTED_SCHEMA_VERSIONS)
        return _Refused("unknown_schema_version", f"schema_version {version!r} is not one of {supported}")
    problems = "; ".join(
        f"{'.'.join(str(part) for part in item['loc']) or '(value)'}: {item['msg']}" for item in details[:5]
    )
    more = f" (and {len(details) - 5} more)" if len(details) > 5 else ""
    return _Refused("invalid_event", f"not a valid event: {problems}{more}")


def _check_envelope(record: RawRecord, headers: dict[str, str], event: EventBase) -> None:
    key = event.key
    try:
        record_key = None if record.key is None else record.key.decode("utf-8")
    except UnicodeDecodeError:
        record_key = None
    if record_key != key:
        raise _Refused("key_mismatch", f"record key {record_key!r} disagrees with the body's {key!r}")
    if headers.get(CE_SUBJECT) != key:
        raise _Refused("header_mismatch", f"ce_subject {headers.get(CE_SUBJECT)!r} is not the key {key!r}")
    _same_id(headers, CE_ID, event.event_id)
    _same_id(headers, CORRELATION_ID, event.correlation_id)
    _same_id(headers, CAUSATION_ID, event.causation_id)
    if not headers.get(CE_SOURCE):
        raise _Refused("header_mismatch", "ce_source is missing")
    try:
        ce_time = datetime.fromisoformat(headers.get(CE_TIME, "").replace("Z", "+00:00"))
    except ValueError:
        raise _Refused("header_mismatch", f"ce_time {headers.get(CE_TIME)!r} is not an RFC 3339 time") from None
    if ce_time.tzinfo is None or ce_time != event.occurred_at:
        raise _Refused("header_mismatch", f"ce_time {headers.get(CE_TIME)!r} is not occurred_at")
    if isinstance(event, DelayEnvelope | DelayedVacuums) and header_due_at_ms(record) != due_at_ms(event.due_at):
        raise _Refused("invalid_due_time", "x-due-at is missing or disagrees with due_at")


def _same_id(headers: dict[str, str], name: str, expected: uuid.UUID | None) -> None:
    text = headers.get(name)
    if text is None and expected is None:
        return
    if text is not None and expected is not None and text == str(expected):
        return  # the canonical form this codec writes; anything else is parsed below
    try:
        matches = text is not None and uuid.UUID(text) == expected
    except ValueError:
        matches = False
    if not matches:
        raise _Refused("header_mismatch", f"header {name} {text!r} disagrees with the body's {expected}")


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def source_record(record: RawRecord) -> SourceRecord:
    """The raw record as carried by a ``CleanupRejected``, cut to fit in one Kafka message."""
    key, value = record.key, record.value
    headers = list(record.headers[:MAX_RAW_HEADERS])
    truncated = len(record.headers) > MAX_RAW_HEADERS
    if key is not None and len(key) > MAX_RAW_KEY:
        key, truncated = key[:MAX_RAW_KEY], True
    if value is not None and len(value) > MAX_RAW_VALUE:
        value, truncated = value[:MAX_RAW_VALUE], True
    for index, (name, header) in enumerate(headers):
        if header is not None and len(header) > MAX_RAW_HEADER:
            headers[index], truncated = (name, header[:MAX_RAW_HEADER]), True
    return SourceRecord(
        topic=record.topic[:1024],
        partition=max(record.partition, 0),
        offset=max(record.offset, 0),
        timestamp_ms=record.timestamp_ms,
        key_b64=_b64(key),
        value_b64=_b64(value),
        headers=[RawHeader(name=name[:1024], value_b64=_b64(header)) for name, header in headers],
        value_size=None if record.value is None else len(record.value),
        truncated=truncated,
    )


def _salvage(record: RawRecord) -> dict[str, Any]:
    """What can still be read from a refused value: tenant, table, ids. Anything doubtful is dropped."""
    try:
        body = json.loads(record.value or b"")
    except (ValueError, RecursionError):
        return {}
    if not isinstance(body, dict):
        return {}
    found: dict[str, Any] = {}
    for name, pattern in (("tenant", _TENANT), ("table", _TABLE), ("partition", _PARTITION)):
        value = body.get(name)
        if isinstance(value, str) and pattern.fullmatch(value):
            found[name] = value
    for name, target in (("event_id", "causation_id"), ("correlation_id", "correlation_id")):
        with contextlib.suppress(KeyError, TypeError, ValueError, AttributeError):
            found[target] = uuid.UUID(body[name])
    if "table" not in found:
        found.pop("partition", None)
    return found


def reject(
    record: RawRecord,
    code: RejectionCode,
    reason: str,
    *,
    rejected_by: str,
    tenant: str,
    event: EventBase | None = None,
    rejected_event_type: str | None = None,
    now: Callable[[], datetime] = utc_now,
) -> CleanupRejected:
    """A ``CleanupRejected`` for ``record``.

    The cleaner calls this too, with the decoded ``event``, to dead-letter a valid but unsafe event.
    Its id is derived from the record's position and the reason code, so rejecting the same record
    again (after a crash) publishes the same event id.
    """
    if event is not None:
        found: dict[str, Any] = {
            "tenant": event.tenant,
            "table": event.table,
            "partition": event.partition,
            "causation_id": event.event_id,
            "correlation_id": event.correlation_id,
        }
        rejected_event_type = rejected_event_type or event.event_type
    else:
        found = _salvage(record)
    found.setdefault("tenant", tenant)
    if found.get("correlation_id") is None and rejected_event_type == "acidclean.vacuum.committed":
        found["correlation_id"] = found.get("causation_id")  # a vacuum event is its own correlation
    identity = f"rejected:{record.topic}:{record.partition}:{record.offset}:{code}"
    return CleanupRejected(
        event_id=uuid.uuid5(ACIDCLEAN_NAMESPACE, identity),
        occurred_at=now(),
        reason_code=code,
        reason=fit(reason or code, MAX_REASON),
        rejected_by=rejected_by[:4096] or "unknown",
        rejected_event_type=(rejected_event_type or None) and rejected_event_type[:256],
        source=source_record(record),
        **found,
    )
