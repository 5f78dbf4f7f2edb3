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

A compressed bundle (``schema_version`` 2, what the cleaner writes unless
``cleanup_bundle_compression`` is ``none``) has the same fields, and ``"records_encoding":
"zlib+base64"`` before ``records``, which is then one JSON string: the members' array above,
compressed by zlib and written as base64. A waiting vacuum's JSON repeats its table's names and
paths, so this is about a twelfth of the bytes to produce, store, fetch and hold while it waits. A
reader older than it refuses such a bundle (its schema version), so a group upgraded one process at a
time writes ``none`` until every process reads both.

A bundle whose every member is a ``DelayedVacuums`` waiting on snapshot locks alone (each with its
``unchanged`` summary) also carries a summary of its own, in the ``x-bundle-unchanged`` header (a
reader that does not know it unpacks the bundle as any other)::

    {"lock_ids": [...], "carries_left": n, "carried": k, "oldest_commit": "...", "records_crc": c}

the union of its members' summary locks, how many more checks may carry it on whole (the fewest any
member has left before its entries must be read in full), how many checks carried it on whole since
its members were written (each member's ``checks`` is that many behind) and its oldest vacuum's
commit; ``records_crc`` is the CRC-32 of the members' JSON array as written (of the base64 text, in
a compressed bundle: it is checked without decompressing; a bundle whose members
were changed since is checked member by member, where the models refuse what does not read). A check
that finds every one of those locks listed carries the bundle on whole
(:func:`carried_on`): the same member bytes, unread, in a bundle with a new id and due time caused by
this one (``causation_id``), ``carries_left`` one lower and ``carried`` one higher.

A bundle with a summary also lists its members' keys, in order, in the ``x-bundle-keys`` header::

    {"records_crc": c, "keys": ["<tenant>/<db>.<table>", ...]}

with the same ``records_crc`` as its summary. A whole carry needs the keys alone (the next record of
each of those tables is in the bundle it writes), so with them a check carries a compressed bundle on
without inflating it. Keys whose CRC is not the summary's are not used (the members are read for
them). The list is only ever used to carry a bundle on unread or to tell which tables a batch sees
twice: a wrong one can make a table's vacuums wait longer, never clean anything (what is cleaned is
read from the members and checked in full). A reader older than it ignores the header.
"""

from __future__ import annotations

import base64
import binascii
import uuid
import zlib
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Protocol, TypeVar

import msgspec

from acidclean.schemas.common import EventBase
from acidclean.shared.bus.codec import DUE_AT, encode
from acidclean.shared.bus.records import OutgoingRecord, RawRecord

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


_DECODER = msgspec.json.Decoder(WireBundleEitherWay)
_TEXT = msgspec.json.Decoder(str)
_MEMBERS = msgspec.json.Decoder(list[WireMember])
_KEYS = msgspec.json.Decoder(list[WireMemberKey])
_Member = TypeVar("_Member", WireMember, WireMemberKey)
_HEAD_DECODER = msgspec.json.Decoder(WireBundleHead)
_SUMMARY = msgspec.json.Decoder(BundleSummary)
_LISTED_KEYS = msgspec.json.Decoder(BundleKeys)
_ENCODER = msgspec.json.Encoder()
# More checks in a row than any member may be carried unread (MAX_UNCHANGED_CHECKS) is a bad summary.
MAX_WHOLE_CARRIES = 64


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
        dues = [due for due in (_due_ms(record.headers) for record in records) if due is not None]
        members = _ENCODER.encode(
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
            extra.append((SUMMARY_HEADER, _ENCODER.encode(summary)))
            keys = [member.key.decode("utf-8") for member in records]
            extra.append((KEYS_HEADER, _ENCODER.encode(BundleKeys(summary.records_crc, keys))))
        return _bundle_record(self, members, len(self.members), source, extra, compressed=self.compressed)


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
            (SUMMARY_HEADER, _ENCODER.encode(self.summary)),
        ]
        if self.keys:
            extra.append((KEYS_HEADER, _ENCODER.encode(BundleKeys(self.summary.records_crc, list(self.keys)))))
        return _bundle_record(self, self.records, self.count, source, extra, compressed=self.compressed)


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


def _bundle_record(
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
    event_id, occurred_at = str(bundle.event_id), _iso(bundle.occurred_at)
    oldest_commit = None if bundle.oldest_commit is None else _iso(bundle.oldest_commit)
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
    return OutgoingRecord(key=key, value=_ENCODER.encode(wire), headers=headers, partition=bundle.partition)


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
        oldest_commit=_iso(min(oldest_commits)),
    )


class CarriableBundle(Protocol):
    """What :func:`carried_on` reads of a bundle (a :class:`ReadBundle`, or the loop's view of one)."""

    @property
    def event_id(self) -> uuid.UUID: ...
    @property
    def tenant(self) -> str: ...
    @property
    def oldest_commit(self) -> datetime | None: ...
    @property
    def listed_keys(self) -> tuple[str, ...]: ...
    @property
    def summary(self) -> BundleSummary | None: ...
    @property
    def records(self) -> bytes | memoryview | None: ...
    @property
    def compressed(self) -> bool: ...


def whole_carry_refused(
    bundle: CarriableBundle, *, held_ids: AbstractSet[int], checked_at: datetime, max_wait_s: float
) -> str | None:
    """Why a check that found ``held_ids`` listed may not carry ``bundle`` on whole (its members must
    then be checked one by one), or None when it may: ``no_summary`` (a member does not wait on
    snapshot locks alone), ``no_carries_left`` (a member's entries are due to be read in full),
    ``no_keys`` (its key list is missing, or does not match its members), ``max_wait`` (its oldest
    vacuum is at the max wait) or ``lock_gone`` (a lock of its summary is no longer listed)."""
    summary, records = bundle.summary, bundle.records
    if summary is None or records is None:
        return "no_summary"
    if summary.carries_left <= 0:
        return "no_carries_left"
    try:
        keys = bundle.listed_keys
    except ValueError:
        return "no_keys"  # its members do not read: its check refuses it
    if not keys:
        return "no_keys"
    if (checked_at - _moment(summary.oldest_commit)).total_seconds() >= max_wait_s:
        return "max_wait"
    if not all(lock_id in held_ids for lock_id in summary.lock_ids):
        return "lock_gone"
    return None


def carried_on(
    bundle: CarriableBundle,
    *,
    partition: int,
    held_ids: AbstractSet[int],
    checked_at: datetime,
    due_at_ms: int,
    max_wait_s: float,
) -> CarriedBundle | None:
    """The bundle that carries ``bundle`` on whole after a check that found every lock of its summary
    in ``held_ids`` (so no member can be ready), or None when its members must be checked one by one:
    no summary, no carries left, a lock gone, or a vacuum near the max wait (a stuck vacuum is counted
    by a full check). Its id is derived from the bundle's, so a replay of the same check publishes the
    same id. Only ever "still waiting": whatever its members are, they are read in full by the checks
    that may clean them."""
    if whole_carry_refused(bundle, held_ids=held_ids, checked_at=checked_at, max_wait_s=max_wait_s) is not None:
        return None
    summary, records, keys = bundle.summary, bundle.records, bundle.listed_keys
    assert summary is not None and records is not None
    return CarriedBundle(
        event_id=uuid.uuid5(bundle.event_id, "carried-whole"),
        tenant=bundle.tenant,
        partition=partition,
        previous=bundle.event_id,
        records=records,
        count=len(keys),
        occurred_at=checked_at,
        due_at_ms=due_at_ms,
        oldest_commit=bundle.oldest_commit,
        summary=BundleSummary(
            lock_ids=summary.lock_ids,
            carries_left=summary.carries_left - 1,
            carried=summary.carried + 1,
            oldest_commit=summary.oldest_commit,
            records_crc=summary.records_crc,
        ),
        compressed=bundle.compressed,
        keys=keys,
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
    compressed: bool = False,
) -> list[Bundle]:
    """``members`` in as few bundles as fit ``max_records`` and ``max_bytes`` each (a member larger than
    ``max_bytes`` gets a bundle of its own; the bytes are counted before any compression, so a bundle
    fits a Kafka message however little its members compress). Ids are derived from ``source_id`` and
    each bundle's members' ids, so a replay of the same check publishes the same ids."""
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
            compressed=compressed,
        )
        for chunk in chunks
        if chunk
    ]


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
        return wire if wire is not None else self._decode_members(_MEMBERS)

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
                keys = tuple(member.key for member in self._decode_members(_KEYS))
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
            head = _HEAD_DECODER.decode(record.value[:cut] + b"}")
            member_bytes: bytes | memoryview = memoryview(record.value)[cut + len(_RECORDS_FIELD) : -1]
            if head.records_encoding is not None:
                member_bytes = _unquoted(member_bytes)
        else:
            claimed = None
            wire = _DECODER.decode(record.value)
            head, member_bytes = wire, b""
            if wire.records_encoding is None:
                wire_members = _MEMBERS.decode(wire.records)
            else:
                member_bytes = _TEXT.decode(wire.records).encode("ascii")
                wire_members = _MEMBERS.decode(inflate_members(member_bytes))
        event_id = uuid.UUID(head.event_id)
        occurred_at = _moment(head.occurred_at)
        oldest = None if head.oldest_commit is None else _moment(head.oldest_commit)
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
        summary = _SUMMARY.decode(header)
        _moment(summary.oldest_commit)
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
        listed = _LISTED_KEYS.decode(header)
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


def _size(member: EventBase) -> int:
    """About the bytes ``member`` takes in a bundle: its value, key and headers."""
    value = getattr(member, "wire_value", None)
    if value is None:
        value = encode(member).value
    return len(value) + 3 * len(member.key) + HEADERS_ALLOWANCE  # its key: in the member, escaped, and listed


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
