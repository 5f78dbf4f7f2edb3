"""Compressed bundles (schema_version 2, issue 14): written by default, read back byte for byte, carried
on whole without inflating, and refused whole, with a clear reason, when their members do not inflate
to what a bundle carries. Pure: no loop, no bus."""

from __future__ import annotations

import base64
import gc
import json
import tracemalloc
import uuid
import zlib
from datetime import timedelta

import msgspec
import pytest
from pydantic import ValidationError

from acidclean.schemas.events import DelayEnvelope
from acidclean.shared.bus.bundle import (
    COMPRESSED_ENCODING,
    MAX_INFLATED_BYTES,
    SUMMARY_HEADER,
    Bundle,
    BundleSummary,
    ReadBundle,
    carried_on,
    compress_members,
    inflate_members,
    summary_of_members,
    unpack,
)
from acidclean.shared.bus.records import OutgoingRecord, RawRecord
from acidclean.shared.settings import Settings

from .factories import delay, vacuum
from .test_bundle_carried_whole import NOW, as_read

pytestmark = [pytest.mark.rule1]

RECORDS_FIELD = b',"records":'


def members(count: int) -> tuple[DelayEnvelope, ...]:
    return tuple(
        delay(vacuum(table=f"sales.t{index}", partition=None), occurred_at=NOW, due_at=NOW + timedelta(seconds=2))
        for index in range(count)
    )


def bundle(count: int, *, compressed: bool, summarised: bool = True) -> Bundle:
    summary = summary_of_members([[1, 2]] * count, [5] * count, [NOW - timedelta(minutes=5)] * count)
    return Bundle(
        uuid.uuid4(),
        "acme",
        3,
        members(count),
        NOW,
        NOW - timedelta(minutes=5),
        summary if summarised else None,
        compressed=compressed,
    )


def read(record: OutgoingRecord) -> ReadBundle:
    found = unpack(as_read(record))
    assert found is not None
    return found


def relaid(record: OutgoingRecord, text: bytes, *, crc_of: bytes | None = None) -> RawRecord:
    """``record`` (a compressed bundle) with ``text`` in place of its members' base64 text, and its
    summary's CRC taken over ``crc_of`` (``text`` when not given), as a forger would write it."""
    value = record.value
    cut = value.index(RECORDS_FIELD) + len(RECORDS_FIELD)
    headers = []
    for name, data in record.headers:
        if name == SUMMARY_HEADER:
            claimed = msgspec.json.decode(data, type=BundleSummary)
            data = msgspec.json.encode(msgspec.structs.replace(claimed, records_crc=zlib.crc32(crc_of or text)))
        headers.append((name, data))
    return RawRecord("acme.delay", 3, 7, record.key, value[:cut] + b'"' + text + b'"}', tuple(headers))


@pytest.mark.parametrize("summarised", [True, False], ids=["summarised", "read-in-full"])
def test_a_compressed_bundle_reads_back_the_same_members_byte_for_byte_in_a_fraction_of_the_bytes(
    summarised: bool,
) -> None:
    plain = bundle(40, compressed=False, summarised=summarised)
    packed = Bundle(**{**plain.__dict__, "compressed": True})
    plain_record, packed_record = plain.outgoing("test"), packed.outgoing("test")
    body = json.loads(packed_record.value)
    assert (body["schema_version"], body["records_encoding"]) == (2, COMPRESSED_ENCODING)
    assert json.loads(plain_record.value)["schema_version"] == 1
    # A waiting vacuum's JSON repeats its table's names and paths: it compresses well.
    assert len(packed_record.value) * 4 < len(plain_record.value)
    plain_read, packed_read = read(plain_record), read(packed_record)
    assert packed_read.compressed and not plain_read.compressed
    assert [(m.key, m.value, m.headers) for m in packed_read.members] == [
        (m.key, m.value, m.headers) for m in plain_read.members
    ]
    assert packed_read.keys == plain_read.keys and packed_read.count == 40
    assert (packed_read.summary is None) == (not summarised)


def test_a_compressed_bundle_keeps_a_view_of_its_compressed_text_and_its_crc_is_taken_over_that_text() -> None:
    record = bundle(5, compressed=True).outgoing("test")
    found = read(record)
    assert isinstance(found.member_bytes, memoryview) and found.member_bytes.obj is record.value
    text = bytes(found.member_bytes)
    assert json.loads(inflate_members(text))[0]["key"] == "acme/sales.t0"
    assert found.summary is not None and found.summary.records_crc == zlib.crc32(text)


@pytest.mark.parametrize("compressed", [True, False], ids=["compressed", "plain"])
def test_a_bundle_read_lazily_keeps_none_of_its_members_once_they_are_let_go(compressed: bool) -> None:
    """A work item holds its bundle until the batch's records are acknowledged: reading the members
    for a check must not leave their inflated array, or copies of their values, alive with it."""
    record = bundle(300, compressed=compressed).outgoing("test")
    found = read(record)
    assert found.summary is not None  # read lazily
    inflated = len(inflate_members(found.member_bytes)) if compressed else len(found.member_bytes)
    assert inflated > 200_000
    first = [(m.key, m.value, m.headers) for m in found.members]
    tracemalloc.start()
    try:
        again = found.members
        assert [(m.key, m.value, m.headers) for m in again] == first  # read again, the same
        while_held = tracemalloc.get_traced_memory()[0]
        del again
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert while_held > inflated // 2  # the premise: holding them costs about their size
    assert kept < inflated // 20, f"{kept:,} bytes kept of {inflated:,} inflated"


def test_a_compressed_bundle_carried_on_whole_writes_the_same_compressed_text_unread() -> None:
    first = read(bundle(5, compressed=True).outgoing("test"))
    carried = carried_on(first, partition=3, held_ids={1, 2}, checked_at=NOW, due_at_ms=1_000, max_wait_s=3600.0)
    assert carried is not None and carried.compressed
    second = read(carried.outgoing("test"))
    assert second.compressed and bytes(second.member_bytes) == bytes(first.member_bytes)
    assert second.summary is not None and second.summary.carried == 1
    assert [m.value for m in second.members] == [m.value for m in first.members]
    assert json.loads(carried.outgoing("test").value)["schema_version"] == 2


def zlib_bomb() -> bytes:
    return base64.b64encode(zlib.compress(b"[" + b" " * (MAX_INFLATED_BYTES + 10) + b"]", 9))


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (b"not base64!", "not base64"),
        (base64.b64encode(b"plain bytes, not zlib"), "do not inflate"),
        (base64.b64encode(zlib.compress(b'[{"key": "acme/sales.t0"}]')[:-6]), "not one whole zlib stream"),
        (base64.b64encode(zlib.compress(b"[]") + b"more"), "not one whole zlib stream"),
        (zlib_bomb(), "inflate past"),
        (compress_members(b"[{not json"), "do not read"),
    ],
    ids=["not-base64", "not-zlib", "truncated", "trailing-bytes", "zlib-bomb", "not-json"],
)
def test_compressed_members_that_do_not_inflate_to_a_members_array_are_refused_with_the_reason(
    text: bytes, reason: str
) -> None:
    """Under a summary whose CRC matches (a forger's), the bundle is read lazily and its members
    refuse it when asked for (its check then dead-letters it whole); without one it is refused at once."""
    record = bundle(3, compressed=True).outgoing("test")
    lazily = unpack(relaid(record, text))
    assert lazily is not None and lazily.summary is not None
    with pytest.raises(ValueError, match=reason):
        lazily.members  # noqa: B018
    with pytest.raises(ValueError, match=reason):
        lazily.keys  # noqa: B018
    assert lazily.member_keys() == set()
    without_summary = relaid(record, text)
    headers = tuple((name, data) for name, data in without_summary.headers if name != SUMMARY_HEADER)
    assert unpack(RawRecord("acme.delay", 3, 7, record.key, without_summary.value, headers)) is None


@pytest.mark.parametrize("empty", [b"[]", b" []\n"])
def test_a_compressed_bundle_with_no_members_does_not_read(empty: bytes) -> None:
    record = bundle(2, compressed=True).outgoing("test")
    assert unpack(relaid(record, compress_members(empty))) is None


@pytest.mark.parametrize(
    ("compressed", "version", "encoding"),
    [
        (True, 2, None),
        (False, 2, None),
        (False, 1, COMPRESSED_ENCODING),
        (True, 1, COMPRESSED_ENCODING),
        (True, 2, "gzip+base64"),
        (True, 3, COMPRESSED_ENCODING),
    ],
    ids=["v2-unsaid", "plain-as-v2", "plain-said-compressed", "compressed-as-v1", "unknown-encoding", "v3"],
)
def test_a_bundle_of_a_layout_this_reader_does_not_know_is_not_read(
    compressed: bool, version: int, encoding: str | None
) -> None:
    """A later or mislabelled layout is refused whole (dead-lettered with its bytes), never read as another."""
    record = bundle(2, compressed=compressed).outgoing("test")
    written = json.loads(record.value)
    records = written.pop("records")
    written.pop("records_encoding", None)
    body = {**written, "schema_version": version}
    if encoding is not None:
        body["records_encoding"] = encoding
    body["records"] = records
    value = json.dumps(body, separators=(",", ":")).encode()
    for headers in (record.headers, tuple(h for h in record.headers if h[0] != SUMMARY_HEADER)):
        assert unpack(RawRecord("acme.delay", 3, 7, record.key, value, headers)) is None


def test_bundle_compression_is_zlib_unless_the_settings_say_none_and_nothing_else_is_accepted() -> None:
    assert Settings().cleanup_bundle_compression == "zlib"
    assert Settings(cleanup_bundle_compression="none").cleanup_bundle_compression == "none"
    with pytest.raises(ValidationError, match="cleanup_bundle_compression"):
        Settings(cleanup_bundle_compression="gzip")
