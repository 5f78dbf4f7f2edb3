"""Several records of one partition carried in one Kafka record (a bundle), and read back (pure, no I/O).

A cleaner with thousands of tables waiting re-checks each table's ``DelayedVacuums`` every cleanup
interval. One Kafka record per table costs a produce, its acknowledgement, a fetch and the loop's
bookkeeping whatever it carries, and on a small machine that, not the check itself, bounds how many
tables one process keeps up with. A bundle carries many such records of one delay partition in one:
each member keeps its own key, headers (``ce_id``, ``causation_id``, ``x-due-at`` ...) and value,
byte for byte, so a reader that unpacks a bundle sees exactly the records that were packed.

On the wire a bundle is a record keyed ``<tenant>/~bundle``, produced to an explicit partition (the
one its members' keys belong to), with the usual CloudEvents headers (``ce_type``
``acidclean.bus.bundle``), ``x-due-at`` the latest due time of its members (so a consumer that honours
it is never early for any of them) and ``x-bundle`` the member count. Its value is JSON::

    {"schema_version": 1, "event_id": "...", "tenant": "...", "occurred_at": "...",
     "oldest_commit": "..." | null,
     "records": [{"key": "...", "headers": [["ce_id", "..."], ...], "value": {...}}, ...]}

Header values are written as Latin-1 text (one character per byte, so any bytes survive JSON).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

import msgspec

from acidclean.schemas.common import EventBase
from acidclean.shared.bus.codec import DUE_AT, encode
from acidclean.shared.bus.records import OutgoingRecord, RawRecord

BUNDLE_TYPE = "acidclean.bus.bundle"
BUNDLE_KEY_SUFFIX = "~bundle"
COUNT_HEADER = "x-bundle"
# A bundle must fit in one Kafka message (message.max.bytes is 1 MB by default).
MAX_BUNDLE_BYTES = 512 * 1024
MAX_BUNDLE_RECORDS = 1000


class WireMember(msgspec.Struct, forbid_unknown_fields=True):
    key: str
    headers: list[tuple[str, str]]
    value: msgspec.Raw


class WireBundle(msgspec.Struct, forbid_unknown_fields=True):
    schema_version: int
    event_id: str
    tenant: str
    occurred_at: str
    oldest_commit: str | None
    records: list[WireMember]


_DECODER = msgspec.json.Decoder(WireBundle)
_ENCODER = msgspec.json.Encoder()


class PrebuiltRecord:
    """A record published as it was built (not encoded from an event model): what a bus needs of it."""

    event_id: uuid.UUID
    event_type: str

    def outgoing(self, source: str) -> OutgoingRecord:
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class Bundle(PrebuiltRecord):
    """Events of one partition, to be published as one bundle record (each encoded as it would be
    published alone, with the publisher's source)."""

    event_id: uuid.UUID
    tenant: str
    partition: int
    members: tuple[EventBase, ...]
    occurred_at: datetime
    oldest_commit: datetime | None = None
    event_type: str = BUNDLE_TYPE

    def outgoing(self, source: str) -> OutgoingRecord:
        key = bundle_key(self.tenant)
        records = [encode(member, source=source) for member in self.members]
        dues = [due for due in (_due_ms(record.headers) for record in records) if due is not None]
        wire = WireBundle(
            schema_version=1,
            event_id=str(self.event_id),
            tenant=self.tenant,
            occurred_at=_iso(self.occurred_at),
            oldest_commit=None if self.oldest_commit is None else _iso(self.oldest_commit),
            records=[
                WireMember(
                    key=member.key.decode("utf-8"),
                    headers=[(name, value.decode("latin-1")) for name, value in member.headers],
                    value=msgspec.Raw(member.value),
                )
                for member in records
            ],
        )
        headers: list[tuple[str, bytes]] = [
            ("ce_specversion", b"1.0"),
            ("ce_id", str(self.event_id).encode()),
            ("ce_source", source.encode("utf-8")),
            ("ce_type", BUNDLE_TYPE.encode()),
            ("ce_time", _iso(self.occurred_at).encode()),
            ("ce_subject", key),
            ("content-type", b"application/json"),
            (COUNT_HEADER, str(len(self.members)).encode()),
        ]
        if dues:
            headers.append((DUE_AT, max(dues).to_bytes(8, "big", signed=True)))
        return OutgoingRecord(key=key, value=_ENCODER.encode(wire), headers=tuple(headers), partition=self.partition)


@dataclass(frozen=True, eq=False)
class Republished(PrebuiltRecord):
    """A member of a bundle published again on its own, exactly as it was packed."""

    record: OutgoingRecord
    event_id: uuid.UUID
    event_type: str

    def outgoing(self, source: str) -> OutgoingRecord:
        return self.record


def republished(member: RawRecord) -> Republished:
    """``member`` (read out of a bundle) as a record to publish again by its own key."""
    headers = tuple((name, value) for name, value in member.headers if value is not None)
    fields = dict(headers)
    try:
        event_id = uuid.UUID(fields.get("ce_id", b"").decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        event_id = uuid.uuid5(uuid.NAMESPACE_URL, f"acidclean-bundle-member:{member.offset}:{member.value!r}")
    event_type = fields.get("ce_type", b"").decode("latin-1")
    record = OutgoingRecord(key=member.key or b"", value=member.value or b"", headers=headers)
    return Republished(record, event_id, event_type)


def bundle_key(tenant: str) -> bytes:
    """The key of a tenant's bundles (never a table's: ``~`` is not allowed in a table name)."""
    return f"{tenant}/{BUNDLE_KEY_SUFFIX}".encode()


def bundles_of(
    members: Sequence[EventBase],
    *,
    tenant: str,
    partition: int,
    source_id: uuid.UUID,
    occurred_at: datetime,
    oldest_commit: datetime | None = None,
    max_records: int = MAX_BUNDLE_RECORDS,
    max_bytes: int = MAX_BUNDLE_BYTES,
) -> list[Bundle]:
    """``members`` in as few bundles as fit ``max_records`` and ``max_bytes`` each (a member larger than
    ``max_bytes`` gets a bundle of its own). Ids are derived from ``source_id`` and each bundle's
    members' ids, so a replay of the same check publishes the same ids."""
    chunks: list[list[EventBase]] = [[]]
    size = 0
    for member in members:
        cost = _size(member)
        if chunks[-1] and (len(chunks[-1]) >= max_records or size + cost > max_bytes):
            chunks.append([])
            size = 0
        chunks[-1].append(member)
        size += cost
    return [
        Bundle(
            event_id=uuid.uuid5(source_id, "bundle:" + ",".join(str(member.event_id) for member in chunk)),
            tenant=tenant,
            partition=partition,
            members=tuple(chunk),
            occurred_at=occurred_at,
            oldest_commit=oldest_commit,
        )
        for chunk in chunks
        if chunk
    ]


@dataclass(frozen=True)
class ReadBundle:
    """A bundle record read back: its id, times and members (each a :class:`RawRecord` at the bundle's
    topic, partition and offset)."""

    event_id: uuid.UUID
    tenant: str
    occurred_at: datetime
    oldest_commit: datetime | None
    members: tuple[RawRecord, ...]


def is_bundle(headers: Sequence[tuple[str, bytes | None]] | None) -> bool:
    """Whether a record with these headers is a bundle (by its ``ce_type``)."""
    for name, value in headers or ():
        if name == "ce_type":
            return value == _BUNDLE_TYPE_BYTES
    return False


def unpack(record: RawRecord) -> ReadBundle | None:
    """The bundle in ``record``, or None when it is not a well-formed bundle (the caller then treats it
    as any record it cannot read: a dead letter with the raw bytes)."""
    if not record.value:
        return None
    try:
        wire = _DECODER.decode(record.value)
        event_id = uuid.UUID(wire.event_id)
        occurred_at = _moment(wire.occurred_at)
        oldest = None if wire.oldest_commit is None else _moment(wire.oldest_commit)
        members = tuple(
            RawRecord(
                topic=record.topic,
                partition=record.partition,
                offset=record.offset,
                key=member.key.encode("utf-8"),
                value=bytes(member.value),
                headers=tuple((name, value.encode("latin-1")) for name, value in member.headers),
                timestamp_ms=record.timestamp_ms,
            )
            for member in wire.records
        )
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError, UnicodeEncodeError):
        return None
    if wire.schema_version != 1 or not members or record.key != bundle_key(wire.tenant):
        return None
    if dict(record.headers).get("ce_id") != wire.event_id.encode():
        return None
    return ReadBundle(event_id, wire.tenant, occurred_at, oldest, members)


_BUNDLE_TYPE_BYTES = BUNDLE_TYPE.encode()


def _size(member: EventBase) -> int:
    """About the bytes ``member`` takes in a bundle: its value, key and headers."""
    value = getattr(member, "wire_value", None)
    if value is None:
        value = encode(member).value
    return len(value) + 2 * len(member.key) + HEADERS_ALLOWANCE


HEADERS_ALLOWANCE = 400  # the CloudEvents headers of a member, as JSON text


def _due_ms(headers: Sequence[tuple[str, bytes]]) -> int | None:
    for name, value in headers:
        if name == DUE_AT and len(value) == 8:
            return int.from_bytes(value, "big", signed=True)
    return None


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def _moment(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone")
    return moment.astimezone(timezone.utc)
