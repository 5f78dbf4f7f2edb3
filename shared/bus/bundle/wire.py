"""A bundle on the wire: its headers, its layouts (plain and compressed members), the msgspec shapes
and decoders that read them, and the compression of its members."""

from __future__ import annotations

import base64
import binascii
import zlib
from collections.abc import Sequence
from datetime import datetime, timezone

import msgspec

from acidclean.shared.bus.codec import DUE_AT

BUNDLE_TYPE = "acidclean.bus.bundle"
BUNDLE_KEY_SUFFIX = "~bundle"
COUNT_HEADER = "x-bundle"
SUMMARY_HEADER = "x-bundle-unchanged"
KEYS_HEADER = "x-bundle-keys"
CAUSATION_HEADER = "causation_id"
# A bundle must fit in one Kafka message (message.max.bytes is 1 MB by default).
MAX_BUNDLE_BYTES = 512 * 1024
MAX_BUNDLE_RECORDS = 1000
COMPRESSED_ENCODING = "zlib+base64"
# A compressed members' array that inflates past this is refused (a bundle is at most MAX_BUNDLE_BYTES
# of members, give or take their headers: anything far larger is not one this product wrote).
MAX_INFLATED_BYTES = 16 * MAX_BUNDLE_BYTES


class WireMember(msgspec.Struct, forbid_unknown_fields=True):
    key: str
    headers: list[tuple[str, str]]
    value: msgspec.Raw


class WireMemberKey(msgspec.Struct):
    """A member's key alone (the rest of it skipped unread)."""

    key: str


class WireBundleHead(msgspec.Struct, forbid_unknown_fields=True):
    """A bundle's fields before its members (its value cut before ``"records"``)."""

    schema_version: int
    event_id: str
    tenant: str
    occurred_at: str
    oldest_commit: str | None
    records_encoding: str | None = None


class WireBundleEitherWay(msgspec.Struct, forbid_unknown_fields=True):
    """A bundle read in full, compressed or not: its members' array (or their base64 text, as a JSON
    string) kept as bytes until its encoding is known."""

    schema_version: int
    event_id: str
    tenant: str
    occurred_at: str
    oldest_commit: str | None
    records: msgspec.Raw
    records_encoding: str | None = None


class WireBundleUnread(msgspec.Struct):
    """A bundle on the wire with its members kept as bytes, unread (what a whole carry writes on)."""

    schema_version: int
    event_id: str
    tenant: str
    occurred_at: str
    oldest_commit: str | None
    records: msgspec.Raw


class WireCompressedBundleUnread(msgspec.Struct):
    """A compressed bundle on the wire, its members' base64 text (with its quotes) kept unread."""

    schema_version: int
    event_id: str
    tenant: str
    occurred_at: str
    oldest_commit: str | None
    records_encoding: str
    records: msgspec.Raw


class BundleSummary(msgspec.Struct, forbid_unknown_fields=True):
    """The ``x-bundle-unchanged`` header: see the module's doc."""

    lock_ids: list[int]
    carries_left: int
    carried: int
    oldest_commit: str
    records_crc: int = 0


class BundleKeys(msgspec.Struct, forbid_unknown_fields=True):
    """The ``x-bundle-keys`` header: see the module's doc."""

    records_crc: int
    keys: list[str]


EITHER_WAY_DECODER = msgspec.json.Decoder(WireBundleEitherWay)
TEXT_DECODER = msgspec.json.Decoder(str)
MEMBERS_DECODER = msgspec.json.Decoder(list[WireMember])
KEYS_DECODER = msgspec.json.Decoder(list[WireMemberKey])

HEAD_DECODER = msgspec.json.Decoder(WireBundleHead)
SUMMARY_DECODER = msgspec.json.Decoder(BundleSummary)
LISTED_KEYS_DECODER = msgspec.json.Decoder(BundleKeys)
ENCODER = msgspec.json.Encoder()
# More checks in a row than any member may be carried unread (MAX_UNCHANGED_CHECKS) is a bad summary.
MAX_WHOLE_CARRIES = 64


def bundle_key(tenant: str) -> bytes:
    """The key of a tenant's bundles (never a table's: ``~`` is not allowed in a table name)."""
    return f"{tenant}/{BUNDLE_KEY_SUFFIX}".encode()


def compress_members(members: bytes) -> bytes:
    """A members' JSON array as a compressed bundle carries it: zlib (its fastest level: a bundle is
    written again each time its members change), then base64."""
    return base64.b64encode(zlib.compress(members, 1))


def inflate_members(text: bytes | memoryview) -> bytes:
    """The members' JSON array of a compressed bundle's base64 text. Raises ``ValueError`` when it is
    not base64 of one whole zlib stream, or inflates past ``MAX_INFLATED_BYTES``."""
    try:
        packed = base64.b64decode(text, validate=True)
    except binascii.Error as error:
        raise ValueError(f"its members are not base64 text: {error}") from error
    inflater = zlib.decompressobj()
    try:
        members = inflater.decompress(packed, MAX_INFLATED_BYTES)
    except zlib.error as error:
        raise ValueError(f"its members do not inflate: {error}") from error
    if inflater.unconsumed_tail:
        raise ValueError(f"its members inflate past {MAX_INFLATED_BYTES:,} bytes: not a bundle this product wrote")
    if not inflater.eof or inflater.unused_data:
        raise ValueError("its members are not one whole zlib stream")
    return members


def due_ms_of(headers: Sequence[tuple[str, bytes]]) -> int | None:
    for name, value in headers:
        if name == DUE_AT and len(value) == 8:
            return int.from_bytes(value, "big", signed=True)
    return None


def iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def moment_of(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone")
    return moment.astimezone(timezone.utc)
