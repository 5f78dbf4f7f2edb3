"""The bundle records a cleaner writes: many records of one delay partition packed in one, a bundle
carried on whole, and a member published again on its own."""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import msgspec

from acidclean.schemas.common import EventBase
from acidclean.shared.bus.bundle.wire import (
    BUNDLE_TYPE,
    CAUSATION_HEADER,
    COMPRESSED_ENCODING,
    COUNT_HEADER,
    ENCODER,
    KEYS_HEADER,
    MAX_BUNDLE_BYTES,
    MAX_BUNDLE_RECORDS,
    SUMMARY_HEADER,
    BundleKeys,
    BundleSummary,
    WireBundleUnread,
    WireCompressedBundleUnread,
    WireMember,
    bundle_key,
    compress_members,
    due_ms_of,
    iso,
)
from acidclean.shared.bus.codec import DUE_AT, encode
from acidclean.shared.bus.records import OutgoingRecord, RawRecord


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
    summary: BundleSummary | None = None  # when every member waits on snapshot locks alone
    compressed: bool = False  # its members' array compressed (schema_version 2): see the module's doc
    event_type: str = BUNDLE_TYPE

    def outgoing(self, source: str) -> OutgoingRecord:
        records = [encode(member, source=source) for member in self.members]
        dues = [due for due in (due_ms_of(record.headers) for record in records) if due is not None]
        members = ENCODER.encode(
            [
                WireMember(
                    key=member.key.decode("utf-8"),
                    headers=[(name, value.decode("latin-1")) for name, value in member.headers],
                    value=msgspec.Raw(member.value),
                )
                for member in records
            ]
        )
        if self.compressed:
            members = compress_members(members)
        extra: list[tuple[str, bytes]] = []
        if dues:
            extra.append((DUE_AT, max(dues).to_bytes(8, "big", signed=True)))
        if self.summary is not None:
            summary = msgspec.structs.replace(self.summary, records_crc=zlib.crc32(members))
            extra.append((SUMMARY_HEADER, ENCODER.encode(summary)))
            keys = [member.key.decode("utf-8") for member in records]
            extra.append((KEYS_HEADER, ENCODER.encode(BundleKeys(summary.records_crc, keys))))
        return bundle_record(self, members, len(self.members), source, extra, compressed=self.compressed)


@dataclass(frozen=True, eq=False)
class CarriedBundle(PrebuiltRecord):
    """A bundle carried on whole by a check that left every member as it was: the same member bytes in
    a bundle with a new id, time and due time, caused by the one read (see :func:`carried_on`)."""

    event_id: uuid.UUID
    tenant: str
    partition: int
    previous: uuid.UUID
    records: bytes | memoryview  # the members' JSON array as read (its base64 text, when compressed)
    count: int
    occurred_at: datetime
    due_at_ms: int
    oldest_commit: datetime | None
    summary: BundleSummary
    compressed: bool = False
    keys: tuple[str, ...] = ()  # its members' keys, in order (written in its x-bundle-keys header)
    event_type: str = BUNDLE_TYPE

    def outgoing(self, source: str) -> OutgoingRecord:
        extra = [
            (CAUSATION_HEADER, str(self.previous).encode()),
            (DUE_AT, self.due_at_ms.to_bytes(8, "big", signed=True)),
            (SUMMARY_HEADER, ENCODER.encode(self.summary)),
        ]
        if self.keys:
            extra.append((KEYS_HEADER, ENCODER.encode(BundleKeys(self.summary.records_crc, list(self.keys)))))
        return bundle_record(self, self.records, self.count, source, extra, compressed=self.compressed)


class _BundleFields(Protocol):
    @property
    def event_id(self) -> uuid.UUID: ...
    @property
    def tenant(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def occurred_at(self) -> datetime: ...
    @property
    def oldest_commit(self) -> datetime | None: ...


def bundle_record(
    bundle: _BundleFields,
    records: bytes | memoryview,
    count: int,
    source: str,
    extra: Sequence[tuple[str, bytes]],
    *,
    compressed: bool,
) -> OutgoingRecord:
    """The record of a bundle whose members' JSON array is ``records`` (its base64 text when
    ``compressed``): its CloudEvents headers, then ``extra`` (due time, summary, causation)."""
    key = bundle_key(bundle.tenant)
    event_id, occurred_at = str(bundle.event_id), iso(bundle.occurred_at)
    oldest_commit = None if bundle.oldest_commit is None else iso(bundle.oldest_commit)
    wire: WireBundleUnread | WireCompressedBundleUnread
    if compressed:
        wire = WireCompressedBundleUnread(
            2, event_id, bundle.tenant, occurred_at, oldest_commit, COMPRESSED_ENCODING, msgspec.Raw(b'"%s"' % records)
        )
    else:
        wire = WireBundleUnread(1, event_id, bundle.tenant, occurred_at, oldest_commit, msgspec.Raw(records))
    headers = (
        ("ce_specversion", b"1.0"),
        ("ce_id", event_id.encode()),
        ("ce_source", source.encode("utf-8")),
        ("ce_type", BUNDLE_TYPE.encode()),
        ("ce_time", occurred_at.encode()),
        ("ce_subject", key),
        ("content-type", b"application/json"),
        (COUNT_HEADER, str(count).encode()),
        *extra,
    )
    return OutgoingRecord(key=key, value=ENCODER.encode(wire), headers=headers, partition=bundle.partition)


def summary_of_members(
    lock_ids: Sequence[Sequence[int]], carries_left: Sequence[int], oldest_commits: Sequence[datetime]
) -> BundleSummary | None:
    """The summary of a bundle whose members wait on these summaries' locks (one sequence per member),
    may each be carried unread ``carries_left`` more times and have these oldest commits; None when
    one of them must be read in full at its next check (nothing left to carry), or there are none."""
    if not carries_left or min(carries_left) <= 0:
        return None
    return BundleSummary(
        lock_ids=sorted({lock_id for ids in lock_ids for lock_id in ids}),
        carries_left=min(carries_left),
        carried=0,
        oldest_commit=iso(min(oldest_commits)),
    )


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
    compressed: bool = False,
) -> list[Bundle]:
    """``members`` in as few bundles as fit ``max_records`` and ``max_bytes`` each (a member larger than
    ``max_bytes`` gets a bundle of its own; the bytes are counted before any compression, so a bundle
    fits a Kafka message however little its members compress). Ids are derived from ``source_id`` and
    each bundle's members' ids, so a replay of the same check publishes the same ids."""
    chunks: list[list[EventBase]] = [[]]
    size = 0
    for member in members:
        cost = size_of(member)
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
            compressed=compressed,
        )
        for chunk in chunks
        if chunk
    ]


def size_of(member: EventBase) -> int:
    """About the bytes ``member`` takes in a bundle: its value, key and headers."""
    value = getattr(member, "wire_value", None)
    if value is None:
        value = encode(member).value
    return len(value) + 3 * len(member.key) + HEADERS_ALLOWANCE  # its key: in the member, escaped, and listed


HEADERS_ALLOWANCE = 400  # the CloudEvents headers of a member, as JSON text
