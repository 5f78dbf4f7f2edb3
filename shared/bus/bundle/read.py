"""A bundle record read back (lazily when it has a summary), and refused when it is not one this
product wrote."""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

import msgspec

from acidclean.shared.bus.bundle.wire import (
    BUNDLE_TYPE,
    COMPRESSED_ENCODING,
    EITHER_WAY_DECODER,
    HEAD_DECODER,
    KEYS_DECODER,
    KEYS_HEADER,
    LISTED_KEYS_DECODER,
    MAX_BUNDLE_RECORDS,
    MAX_WHOLE_CARRIES,
    MEMBERS_DECODER,
    SUMMARY_DECODER,
    SUMMARY_HEADER,
    TEXT_DECODER,
    BundleSummary,
    WireBundleEitherWay,
    WireBundleHead,
    WireMember,
    WireMemberKey,
    bundle_key,
    inflate_members,
    moment_of,
)
from acidclean.shared.bus.records import RawRecord

_Member = TypeVar("_Member", WireMember, WireMemberKey)


@dataclass(frozen=True)
class ReadBundle:
    """A bundle record read back: its id, times and members (each a :class:`RawRecord` at the bundle's
    topic, partition and offset).

    A bundle with a summary is read lazily: its members' array is cut out of the value unparsed, its
    CRC is taken when its summary is first asked for, its members' keys are read (alone) when first
    asked for, and its members are built only when a check needs them (a bundle carried on whole never
    does). A bundle without a summary is read in full by :func:`unpack`, which refuses a bad one."""

    event_id: uuid.UUID
    tenant: str
    occurred_at: datetime
    oldest_commit: datetime | None
    source: RawRecord  # the bundle record itself
    # Its members' JSON array, as read (unparsed until asked for): a view into the record's value, not
    # a copy (a paused delay partition holds up to 16 MB of bundles; a copy doubled that).
    member_bytes: bytes | memoryview
    # Its x-bundle-unchanged header as read, before its CRC is checked (see summary).
    claimed_summary: BundleSummary | None = None
    # Its members' array compressed (schema_version 2): member_bytes is then their base64 text,
    # inflated each time they are read (never kept: a held bundle keeps the compressed bytes alone).
    compressed: bool = False
    # Its x-bundle-keys header as read (decoded when first asked for: see listed_keys).
    claimed_keys: bytes | None = None

    @property
    def summary(self) -> BundleSummary | None:
        """Its x-bundle-unchanged header, or None when it has none or its CRC is not that of the
        members' bytes (a bundle changed after it was written is checked member by member)."""
        if self.claimed_summary is None:
            return None
        matches: bool | None = self.__dict__.get("_crc_matches")
        if matches is None:
            matches = zlib.crc32(self.member_bytes) == self.claimed_summary.records_crc
            self.__dict__["_crc_matches"] = matches
        return self.claimed_summary if matches else None

    @property
    def records(self) -> bytes | memoryview | None:
        """Its members' JSON array (their base64 text, when compressed), when it has a summary (what a
        whole carry writes on)."""
        return self.member_bytes if self.summary is not None else None

    @property
    def wire_members(self) -> list[WireMember]:
        """Its members as on the wire. Raises ``ValueError`` when they do not read. A bundle read lazily
        reads them again at each ask (see :attr:`members`)."""
        wire: list[WireMember] | None = self.__dict__.get("_wire")
        return wire if wire is not None else self._decode_members(MEMBERS_DECODER)

    def _decode_members(self, decoder: msgspec.json.Decoder[list[_Member]]) -> list[_Member]:
        """Its members' JSON array, decoded by ``decoder``. Raises ``ValueError`` when it does not read."""
        try:
            return decoder.decode(inflate_members(self.member_bytes) if self.compressed else self.member_bytes)
        except (msgspec.ValidationError, msgspec.DecodeError, ValueError) as error:
            raise ValueError(f"the members of bundle {self.event_id} do not read: {error}") from error

    @property
    def members(self) -> tuple[RawRecord, ...]:
        """Every member, as if it had been published alone. Raises ``ValueError`` when they do not
        read, or a member's headers are not Latin-1 text (only possible in a bundle with a summary:
        one without is read in full by :func:`unpack`, which refuses it).

        A bundle read lazily builds them at each ask and keeps none of them: its check holds them while
        it runs, and its work item, which lives until the batch's records are acknowledged, then holds
        the compressed bytes alone. (Kept, the inflated array and these copies of its values were the
        largest part of the cleaner's memory peaks with 300,000 vacuums parked.) One read in full keeps
        them: :func:`unpack` stores them."""
        members: tuple[RawRecord, ...] | None = self.__dict__.get("_members")
        if members is None:
            record = self.source
            try:
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
                    for member in self.wire_members
                )
            except UnicodeEncodeError as error:
                raise ValueError(f"a member of bundle {self.event_id} has a header that is not Latin-1 text") from error
        return members

    @property
    def keys(self) -> tuple[str, ...]:
        """Its members' keys, in order (read alone, without the rest of the members). Raises
        ``ValueError`` when they do not read."""
        keys: tuple[str, ...] | None = self.__dict__.get("_keys")
        if keys is None:
            wire: list[WireMember] | None = self.__dict__.get("_wire")
            if wire is not None:
                keys = tuple(member.key for member in wire)
            else:
                keys = tuple(member.key for member in self._decode_members(KEYS_DECODER))
            self.__dict__["_keys"] = keys
        return keys

    @property
    def listed_keys(self) -> tuple[str, ...]:
        """Its members' keys as its x-bundle-keys header lists them when that header goes with its
        summary (the same CRC, which is that of its members' bytes), else :attr:`keys`: what a whole
        carry needs, without inflating or reading the members. Raises ``ValueError`` when they are
        read and do not read."""
        listed: tuple[str, ...] | None = self.__dict__.get("_listed")
        if listed is None:
            listed = _listed_keys(self.claimed_keys, self.summary) or self.keys
            self.__dict__["_listed"] = listed
        return listed

    @property
    def count(self) -> int:
        """How many members it has. Raises ``ValueError`` when they do not read."""
        return len(self.listed_keys)

    def member_keys(self) -> set[bytes]:
        """Its members' keys (none when they do not read: its check then refuses it)."""
        try:
            return {key.encode("utf-8") for key in self.keys}
        except ValueError:
            return set()

    def listed_member_keys(self) -> set[bytes]:
        """:attr:`listed_keys` as bytes (none when they are read and do not read)."""
        try:
            return {key.encode("utf-8") for key in self.listed_keys}
        except ValueError:
            return set()


def is_bundle(headers: Sequence[tuple[str, bytes | None]] | None) -> bool:
    """Whether a record with these headers is a bundle (by its ``ce_type``)."""
    for name, value in headers or ():
        if name == "ce_type":
            return value == _BUNDLE_TYPE_BYTES
    return False


def unpack(record: RawRecord) -> ReadBundle | None:
    """The bundle in ``record``, or None when it is not a well-formed bundle (the caller then treats it
    as any record it cannot read: a dead letter with the raw bytes). A bundle with a summary is read
    lazily (see :class:`ReadBundle`): only its head here."""
    if not record.value:
        return None
    headers = dict(record.headers)
    claimed = _claimed_summary(headers.get(SUMMARY_HEADER))
    cut = _members_cut(record.value) if claimed is not None else None
    wire_members: list[WireMember] | None = None
    head: WireBundleHead | WireBundleEitherWay
    try:
        if cut is not None:
            head = HEAD_DECODER.decode(record.value[:cut] + b"}")
            member_bytes: bytes | memoryview = memoryview(record.value)[cut + len(_RECORDS_FIELD) : -1]
            if head.records_encoding is not None:
                member_bytes = _unquoted(member_bytes)
        else:
            claimed = None
            wire = EITHER_WAY_DECODER.decode(record.value)
            head, member_bytes = wire, b""
            if wire.records_encoding is None:
                wire_members = MEMBERS_DECODER.decode(wire.records)
            else:
                member_bytes = TEXT_DECODER.decode(wire.records).encode("ascii")
                wire_members = MEMBERS_DECODER.decode(inflate_members(member_bytes))
        event_id = uuid.UUID(head.event_id)
        occurred_at = moment_of(head.occurred_at)
        oldest = None if head.oldest_commit is None else moment_of(head.oldest_commit)
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError):
        return None
    compressed = head.records_encoding is not None
    if (head.schema_version, head.records_encoding) not in _KNOWN_LAYOUTS or record.key != bundle_key(head.tenant):
        return None
    if headers.get("ce_id") != head.event_id.encode() or _no_members(member_bytes, compressed):
        return None
    listed = headers.get(KEYS_HEADER) if claimed is not None else None
    bundle = ReadBundle(event_id, head.tenant, occurred_at, oldest, record, member_bytes, claimed, compressed, listed)
    if wire_members is not None:
        if not wire_members:
            return None
        # Read in full now: a member that does not read refuses the bundle here.
        bundle.__dict__["_wire"] = wire_members
        try:
            bundle.__dict__["_members"] = bundle.members  # kept: nothing else holds its members' bytes
        except ValueError:
            return None
    return bundle


# (schema_version, records_encoding) of the bundles this reader reads.
_KNOWN_LAYOUTS = {(1, None), (2, COMPRESSED_ENCODING)}


def _unquoted(text: bytes | memoryview) -> bytes | memoryview:
    """The base64 text of a compressed bundle's members, as cut out of its value with its quotes."""
    if len(text) < 2 or text[0] != _QUOTE or text[-1] != _QUOTE:
        raise ValueError("the members of a compressed bundle are not one JSON string")
    return text[1:-1]


_QUOTE = ord('"')


def _no_members(member_bytes: bytes | memoryview, compressed: bool) -> bool:
    """Whether a members' array as read is empty (``[]``, maybe with white space)."""
    if len(member_bytes) >= 64:
        return False
    text = bytes(member_bytes)
    if compressed:
        try:
            text = inflate_members(text)
        except ValueError:
            return False  # refused whole when its members are read
    return text.strip() == b"[]"


def _claimed_summary(header: bytes | None) -> BundleSummary | None:
    """A bundle's summary as its header gives it (its CRC not yet checked); None when it has none or
    it does not read as one must (the bundle is then read in full and checked member by member)."""
    if not header:
        return None
    try:
        summary = SUMMARY_DECODER.decode(header)
        moment_of(summary.oldest_commit)
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError):
        return None
    if not summary.lock_ids or not 0 <= summary.carries_left <= MAX_WHOLE_CARRIES or summary.carried < 0:
        return None
    return summary


def _listed_keys(header: bytes | None, summary: BundleSummary | None) -> tuple[str, ...]:
    """The keys an x-bundle-keys header lists, when it reads, has the CRC of ``summary`` (one whose own
    CRC matched the members' bytes) and no more keys than a bundle has members; else none (the members
    are read for them)."""
    if not header or summary is None:
        return ()
    try:
        listed = LISTED_KEYS_DECODER.decode(header)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return ()
    if listed.records_crc != summary.records_crc or len(listed.keys) > MAX_BUNDLE_RECORDS:
        return ()
    return tuple(listed.keys)


def _members_cut(value: bytes) -> int | None:
    """Where the members' array starts in a bundle's value: it is the value's last field, as written
    (every field before it a plain value, so the first ``,"records":`` is its; inside a JSON string
    a quote is always escaped). None when the value is not laid out so."""
    start = value.find(_RECORDS_FIELD)
    if start < 0 or not value.endswith(b"}"):
        return None
    return start


_RECORDS_FIELD = b',"records":'


_BUNDLE_TYPE_BYTES = BUNDLE_TYPE.encode()
