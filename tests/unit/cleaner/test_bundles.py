"""Waiting tables' DelayedVacuums carried on in bundles (issue 14): many tables of one delay partition in
one Kafka record, re-checked together. What must hold: a bundle only ever keeps vacuums waiting (rule
1: nothing is cleaned from a bundle; a member whose lock is gone goes back on its own and is checked in
full by its table's lane), never early, fail closed when the metastore does not answer, a member that
does not read is refused by the models with its bytes, and offsets move only past acknowledged
outcomes (rule 5)."""

from __future__ import annotations

import base64
import dataclasses
import json
import uuid
import zlib
from collections.abc import Callable
from concurrent.futures import Executor, Future
from datetime import datetime, timedelta, timezone
from itertools import pairwise

import msgspec
import pytest

from acidclean.consumers.audit import FastDecoder, bundle_members, decode_records, fold
from acidclean.consumers.loop import CleanerLoop
from acidclean.consumers.outcome_batch import READ_IN_FULL_WITHIN
from acidclean.consumers.rules.readiness import Readiness
from acidclean.consumers.scheduling import delay_envelope
from acidclean.consumers.waiting import build_groups, entry_of_envelope
from acidclean.schemas.events import CleanupRejected, DelayedVacuums, DelayEnvelope, VacuumCommitted
from acidclean.shared.acid.names import delta_name
from acidclean.shared.bus import bundle as bundle_module
from acidclean.shared.bus.bundle import (
    BUNDLE_TYPE,
    KEYS_HEADER,
    SUMMARY_HEADER,
    Bundle,
    BundleKeys,
    BundleSummary,
    bundle_key,
    bundles_of,
    compress_members,
    inflate_members,
    is_bundle,
    unpack,
)
from acidclean.shared.bus.codec import decode, encode, header_due_at_ms
from acidclean.shared.bus.records import RawRecord
from acidclean.shared.metastore import MetastoreKind
from acidclean.shared.settings import Settings

from .fakes import TOPICS, FakeConsumer, Rig, lock, loop_over, run_for, serve_list_asked_now, vacuum, waiting_vacuum_ids
from .test_batches_adversarial import unanswered_below_commit
from .test_delayed_vacuums import checks_so_far, dones, forward_delays

pytestmark = [pytest.mark.rule1, pytest.mark.rule5]

V, D = TOPICS.vacuum_committed, TOPICS.cleanup_delay
TABLES = 6
PER_TABLE = 2


def location(index: int) -> str:
    return f"/warehouse/sales.db/t{index}"


def lock_id(index: int) -> int:
    return 100 + index


def waiting_tables(rig: Rig, per_table: int = PER_TABLE, tables: int = TABLES) -> list[list[str]]:
    """TABLES unpartitioned tables sales.t0.., each read under its own lock, each with PER_TABLE minor
    vacuums (deltas 1-3, 4-6, ...); returns each table's vacuum ids (the vacuums are on partition 0 of
    the vacuum topic of the consumer made next)."""
    ids = []
    for index in range(tables):
        table = f"sales.t{index}"
        rig.metastore.add_table(table, "file:" + location(index))
        rig.metastore.take_lock(lock_id(index), table)
        ids.append([])
        for number in range(per_table):
            singles = [delta_name(w, w, 0) for w in range(3 * number + 1, 3 * number + 4)]
            compacted = delta_name(3 * number + 1, 3 * number + 3)
            rig.fs.add_acid_dirs(location(index), [*singles, compacted])
            event = vacuum(
                event_id=uuid.uuid4(),
                table=table,
                partition=None,
                location=location(index),
                vacuum_job_id=f"job-{index}-{number}",
                new_directories=[compacted],
                obsolete_directories=singles,
                highest_write_id=3 * number + 3,
                lock_snapshot=[lock(lock_id(index))],
            )
            rig.fs.mark_vacuum_output(event)
            ids[-1].append(str(event.event_id))
            rig.pending.append(event)  # type: ignore[attr-defined]
    return ids


def started(
    rig: Rig, per_table: int = PER_TABLE, executor: Executor | None = None, tables: int = TABLES
) -> tuple[FakeConsumer, CleanerLoop, list[int], list[list[str]]]:
    consumer = FakeConsumer(rig.clock)
    rig.pending = []  # type: ignore[attr-defined]
    ids = waiting_tables(rig, per_table, tables)
    for event in rig.pending:  # type: ignore[attr-defined]
        consumer.append(V, 0, event)
    loop = loop_over(rig, consumer, executor)
    return consumer, loop, [0], ids


def cycle(
    loop: CleanerLoop, rig: Rig, consumer: FakeConsumer, seen: list[int], times: int = 1, *, slices: int = 1
) -> None:
    """``times`` intervals: the loop runs, and what it published to the delay topic is read back
    (``slices`` times an interval: a broker that delivers within 2.1 s / slices)."""
    for _ in range(times * slices):
        run_for(loop, rig, 2.1 / slices)
        forward_delays(rig, consumer, seen)


def bundles(rig: Rig) -> list[RawRecord]:
    return [record for record in rig.bus.records.get(D, []) if is_bundle(record.headers)]


def members_of(record: RawRecord) -> list[DelayedVacuums]:
    bundle = unpack(record)
    assert bundle is not None
    events = [encode_back(member) for member in bundle.members]
    assert all(isinstance(event, DelayedVacuums) for event in events)
    return events  # type: ignore[return-value]


def encode_back(record: RawRecord) -> object:
    return decode(record, rejected_by="test", tenant="acme")


def bundled_rig(compressed: bool = True) -> Rig:
    return Rig(bundle_min=2, bundle_compressed=compressed)


RECORDS_FIELD = b',"records":'


def members_text(record: RawRecord) -> bytes:
    """A bundle's members' JSON array, inflated when the bundle is compressed."""
    value = record.value or b""
    cut = value.index(RECORDS_FIELD)
    written = value[cut + len(RECORDS_FIELD) : -1]
    return inflate_members(written[1:-1]) if b'"records_encoding"' in value[:cut] else written


def with_members(record: RawRecord, members: bytes) -> tuple[bytes, bytes]:
    """``record``'s value with ``members`` as its members' JSON array, laid out as ``record`` lays out
    its own (compressed or not), and the members' bytes as written (what its CRC is taken over)."""
    value = record.value or b""
    cut = value.index(RECORDS_FIELD) + len(RECORDS_FIELD)
    if b'"records_encoding"' in value[:cut]:
        text = compress_members(members)
        return value[:cut] + b'"' + text + b'"}', text
    return value[:cut] + members + b"}", members


def test_waiting_tables_of_one_partition_go_on_in_one_bundle_and_are_carried_on_unread() -> None:
    rig = bundled_rig()
    consumer, loop, seen, ids = started(rig)
    cycle(loop, rig, consumer, seen, 1)  # the first check: one DelayedVacuums per table, read in full
    assert bundles(rig) == []
    cycle(loop, rig, consumer, seen, 1)  # carried on unread: six tables of partition 0, one bundle
    [first] = bundles(rig)
    assert {tuple(sorted(str(w.vacuum.event_id) for w in g.waiting)) for g in members_of(first)} == {
        tuple(sorted(table)) for table in ids
    }
    summary = summary_of(first)
    assert summary.lock_ids == sorted(lock_id(index) for index in range(TABLES))
    assert summary.carried == 0 and summary.carries_left > 3
    cycle(loop, rig, consumer, seen, 3)  # the bundle is checked as one record, and carried on whole
    later = bundles(rig)
    assert len(later) == 4
    for earlier, next_one in pairwise(later):
        headers = dict(next_one.headers)
        assert headers["causation_id"] == dict(earlier.headers)["ce_id"] != headers["ce_id"]
        # Never early: checked no sooner than the bundle it carries on was due, and due an interval later.
        checked_at = datetime.fromisoformat(headers["ce_time"].decode()).timestamp() * 1000
        assert checked_at >= header_due_at_ms(earlier)
        assert header_due_at_ms(next_one) >= checked_at + 2000
        before, after = unpack(earlier), unpack(next_one)
        assert before is not None and after is not None
        assert after.members == tuple(dataclasses.replace(m, offset=after.members[0].offset) for m in before.members)
        assert summary_of(next_one).carries_left == summary_of(earlier).carries_left - 1
        assert summary_of(next_one).carried == summary_of(earlier).carried + 1
    assert rig.metrics.events.labels("bundle_carried_whole")._value.get() == 3
    assert rig.fs.deleted == [] and dones(rig) == []
    assert consumer.committed[(D, 0)] == len(consumer.logs[(D, 0)]) - 1  # all but the newest bundle done


def slow_down(rig: Rig) -> None:
    """4 ms of ``rig``'s clock go by at each look at it (checks that take time)."""
    clock = rig.clock
    plain_now = clock.now

    def slow_now() -> datetime:
        clock.advance(0.004)
        return plain_now()

    clock.now = slow_now  # type: ignore[method-assign]


def bundles_of_slow_checks() -> list[RawRecord]:
    """The bundles packed by checks over three intervals, with 4 ms of the clock for each look at it,
    at most two members a bundle (so a batch writes several; a bundle carried on whole keeps its
    members' headers as first written, so only packed ones)."""
    rig = Rig(bundle_min=2, bundle_max=2)
    slow_down(rig)
    consumer, loop, seen, _ = started(rig)
    cycle(loop, rig, consumer, seen, 3)
    assert rig.fs.deleted == [] and dones(rig) == []
    return [record for record in bundles(rig) if not dict(record.headers).get("causation_id")]


def test_a_bundle_is_due_when_its_last_member_is_never_before_any_of_them() -> None:
    """The tables of one batch are checked one after another, each due one interval after its own
    check: a bundle of them is due when its last member is, so no member is checked before its own
    due time, in each of the several bundles a batch writes. (It may wait up to the batch's checks
    past it: spread windows, which cut a batch's records into bundles due within 10 ms, were removed
    in issue 50.)"""
    written = bundles_of_slow_checks()
    assert len(written) > 1
    for record in written:
        bundle = unpack(record)
        assert bundle is not None
        own_dues = [due_of(member) for member in bundle.members]
        assert max(own_dues) == due_of(record)


def unpack_members(record: RawRecord) -> list[RawRecord]:
    bundle = unpack(record)
    assert bundle is not None
    return list(bundle.members)


def due_of(record: RawRecord) -> int:
    due = header_due_at_ms(record)
    assert due is not None
    return due


def checked_at(record: RawRecord) -> float:
    """When the check that wrote bundle ``record`` ran (its ``ce_time``), epoch seconds."""
    return datetime.fromisoformat(dict(record.headers)["ce_time"].decode()).timestamp()


def carried(record: RawRecord) -> int:
    """Checks that carried bundle ``record`` on whole since its members were written."""
    bundle = unpack(record)
    assert bundle is not None
    return 0 if bundle.summary is None else bundle.summary.carried


def summary_of(record: RawRecord) -> BundleSummary:
    bundle = unpack(record)
    assert bundle is not None and bundle.summary is not None
    return bundle.summary


def test_a_member_whose_lock_is_released_leaves_its_bundle_and_is_cleaned_by_its_lane_alone() -> None:
    rig = bundled_rig()
    consumer, loop, seen, ids = started(rig)
    cycle(loop, rig, consumer, seen, 3)
    assert len(bundles(rig)) == 2
    rig.metastore.release(lock_id(2))
    cycle(loop, rig, consumer, seen, 3)
    assert rig.metrics.events.labels("bundle_spilled")._value.get() == 1  # t2's record, once
    cleaned = {str(done.correlation_id) for done in dones(rig)}
    assert cleaned == set(ids[2])
    assert {path.rsplit("/", 2)[-2] for path in rig.fs.deleted} == {"t2"}
    last = members_of(bundles(rig)[-1])
    assert sorted(group.table for group in last) == [f"sales.t{i}" for i in range(TABLES) if i != 2]
    # Every other table still waits, and nothing of theirs was deleted while their readers hold locks.
    assert all(group.unchanged is not None for group in last)


def first_bundle() -> tuple[Rig, FakeConsumer, CleanerLoop, list[int], list[list[str]], RawRecord]:
    """Every table waiting, two intervals on: their records packed into one bundle, not yet read."""
    rig = bundled_rig()
    consumer, loop, seen, ids = started(rig)
    cycle(loop, rig, consumer, seen, 2)
    [bundle] = bundles(rig)
    return rig, consumer, loop, seen, ids, bundle


def listed_keys_of(record: RawRecord) -> BundleKeys:
    header = dict(record.headers).get(KEYS_HEADER)
    assert header is not None
    return msgspec.json.decode(header, type=BundleKeys)


def test_a_bundle_lists_its_members_keys_and_its_whole_carries_never_inflate_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A whole carry needs its members' keys alone: read from the x-bundle-keys header, the compressed
    members are never inflated, and every table's next record is still known to be in the new bundle."""
    rig, consumer, loop, seen, _, packed = first_bundle()
    member_keys = [member.key.decode() for member in unpack_members(packed)]
    assert listed_keys_of(packed) == BundleKeys(summary_of(packed).records_crc, member_keys)
    inflated: list[int] = []
    real_inflate = bundle_module.inflate_members

    def counted(text: bytes | memoryview) -> bytes:
        inflated.append(len(text))
        return real_inflate(text)

    monkeypatch.setattr(bundle_module, "inflate_members", counted)
    cycle(loop, rig, consumer, seen, 3)
    assert rig.metrics.events.labels("bundle_carried_whole")._value.get() == 3
    assert inflated == []
    monkeypatch.undo()
    carried = bundles(rig)[1:]
    for record in carried:
        assert listed_keys_of(record) == listed_keys_of(packed)  # carried on with its members' bytes
        assert [member.key.decode() for member in unpack_members(record)] == member_keys
    assert {key: rig.handler.chain_due[key] for key in member_keys} == dict.fromkeys(member_keys, due_of(carried[-1]))
    assert rig.fs.deleted == [] and dones(rig) == []


def test_a_key_list_that_does_not_go_with_the_summary_is_not_used_the_members_keys_are() -> None:
    *_, packed = first_bundle()
    real = unpack(packed)
    assert real is not None
    for header in (
        msgspec.json.encode(BundleKeys(summary_of(packed).records_crc + 1, ["acme/sales.t0"])),  # another CRC
        b'{"records_crc": 1, "keys": "acme/sales.t0"}',  # does not read
        msgspec.json.encode(BundleKeys(summary_of(packed).records_crc, ["acme/sales.t0"] * 1001)),  # too many
        b"",
    ):
        headers = tuple((n, header if n == KEYS_HEADER else v) for n, v in packed.headers)
        read = unpack(dataclasses.replace(packed, headers=headers))
        assert read is not None
        assert read.listed_keys == real.keys and read.count == TABLES
    # A bundle of an older cleaner (no list) is carried on with the keys read from its members.
    headers = tuple((n, v) for n, v in packed.headers if n != KEYS_HEADER)
    read = unpack(dataclasses.replace(packed, headers=headers))
    assert read is not None and read.listed_keys == real.keys


@pytest.mark.parametrize("forged", ["omits", "adds"])
def test_a_bundle_whose_key_list_lies_only_delays_every_vacuum_is_still_checked_in_full_and_cleaned(
    forged: str,
) -> None:
    """The key list is only ever believed for a whole carry. One that omits a table or names one that
    is not in the bundle (its CRC forged to match) cleans nothing early and loses no vacuum: a fresh
    vacuum of a table it omits, and one of the table it names, are each cleaned once their readers
    leave, and so is every member."""
    rig, consumer, loop, seen, ids, good = first_bundle()
    keys = listed_keys_of(good).keys
    lie = keys[1:] if forged == "omits" else [*keys, "acme/sales.t9"]
    header = msgspec.json.encode(BundleKeys(summary_of(good).records_crc, lie))
    log = consumer.logs[(D, 0)]
    assert log[-1].value == good.value
    forged_headers = tuple((n, header if n == KEYS_HEADER else v) for n, v in log[-1].headers)
    log[-1] = dataclasses.replace(log[-1], headers=forged_headers)
    rig.metastore.add_table("sales.t9", "file:" + location(9))
    rig.metastore.take_lock(lock_id(9), "sales.t9")
    fresh = [fresh_vacuum(rig, 0), fresh_vacuum(rig, 9)]
    for event in fresh:
        consumer.append(V, 0, event)
    cycle(loop, rig, consumer, seen, 3, slices=10)
    assert rig.fs.deleted == [] and dones(rig) == []  # every reader still holds its lock
    for index in [*range(TABLES), 9]:
        rig.metastore.release(lock_id(index))
    cycle(loop, rig, consumer, seen, 6, slices=10)
    cleaned = [str(done.correlation_id) for done in dones(rig)]
    expected = [*(vacuum_id for table in ids for vacuum_id in table), *(str(event.event_id) for event in fresh)]
    assert sorted(set(cleaned)) == sorted(expected)


def test_a_bundle_checked_while_the_metastore_does_not_answer_sends_every_member_to_be_checked_in_full() -> None:
    rig = bundled_rig()
    consumer, loop, seen, ids = started(rig)
    cycle(loop, rig, consumer, seen, 3)
    before = len(bundles(rig))
    rig.metastore.down = True
    cycle(loop, rig, consumer, seen, 2)
    # None carried on unread: nobody could say the locks are still there. Each table was checked in
    # full (its record may wait in a bundle again, with the reason).
    for record in bundles(rig)[before:]:
        assert all(group.unchanged is None for group in members_of(record))
    assert rig.fs.deleted == [] and dones(rig) == []
    # Each table's vacuums were checked in full and wait on with the reason (fail closed).
    latest = {}
    for event in rig.published(D):
        if isinstance(event, DelayedVacuums):
            latest[event.table] = event
    assert len(latest) == TABLES
    assert all(
        item.check_error is not None and "metastore" in item.check_error
        for group in latest.values()
        for item in group.waiting
    )
    rig.metastore.down = False
    cycle(loop, rig, consumer, seen, 4)
    assert rig.fs.deleted == [] and dones(rig) == []
    rig.metastore.release(lock_id(4))
    cycle(loop, rig, consumer, seen, 4)
    assert {str(done.correlation_id) for done in dones(rig)} == set(ids[4])


def test_a_bundle_the_broker_does_not_take_is_checked_again_and_nothing_is_lost() -> None:
    rig, consumer, loop, seen, ids, first = first_bundle()
    log = consumer.logs[(D, 0)]
    assert log[-1].value == first.value
    committed = consumer.committed[(D, 0)]
    assert committed == len(log) - 1  # everything before the bundle is done
    rig.bus.fail_next(2)  # the batch, then the bundle alone
    cycle(loop, rig, consumer, seen, 1)
    assert len(bundles(rig)) == 1  # nothing of the failed check went out
    assert consumer.committed[(D, 0)] == committed  # the bundle's offset did not move past it
    cycle(loop, rig, consumer, seen, 3)
    later = bundles(rig)
    assert len(later) >= 3  # checked again after the rewind, then each interval
    assert consumer.committed[(D, 0)] == len(log) - 1
    last = members_of(later[-1])
    # Every vacuum is still carried, once (a duplicate would show here), and nothing was deleted.
    assert sorted(str(w.vacuum.event_id) for g in last for w in g.waiting) == sorted(i for t in ids for i in t)
    assert rig.fs.deleted == []


def forged_bundle(good: RawRecord, bad_value: bytes) -> RawRecord:
    """A bundle of the members of ``good`` plus one member whose value does not read."""
    bundle = unpack(good)
    assert bundle is not None
    events = [encode_back(member) for member in bundle.members]
    made = Bundle(
        event_id=uuid.uuid4(),
        tenant="acme",
        partition=0,
        members=tuple(events),  # type: ignore[arg-type]
        occurred_at=datetime.now(timezone.utc),
    ).outgoing("/test")
    body = json.loads(made.value)
    forged = dict(body["records"][0])
    forged["value"] = json.loads(bad_value)
    forged["headers"] = [[name, str(uuid.uuid4()) if name == "ce_id" else value] for name, value in forged["headers"]]
    body["records"].append(forged)
    value = json.dumps(body).encode()
    return RawRecord(D, 0, 0, made.key, value, made.headers)


def test_a_bundle_member_that_does_not_read_is_refused_alone_and_the_others_wait_on() -> None:
    rig = bundled_rig()
    consumer, loop, seen, _ids = started(rig)
    cycle(loop, rig, consumer, seen, 3)
    good = bundles(rig)[-1]
    forged = forged_bundle(good, b'{"schema_version": 1, "waiting": "not a list"}')
    log = consumer.logs[(D, 0)]
    assert log[-1].value == good.value  # not read yet: the forged bundle takes its place
    log[-1] = RawRecord(D, 0, len(log) - 1, forged.key, forged.value, forged.headers)
    cycle(loop, rig, consumer, seen, 2)
    rejected = [e for e in rig.published(TOPICS.dead_letter) if isinstance(e, CleanupRejected)]
    assert len(rejected) == 1
    source = rejected[0].source
    assert source.value_b64 is not None and b"not a list" in base64.b64decode(source.value_b64)
    assert rejected[0].rejected_event_type == DelayedVacuums.event_type  # the member, not its bundle
    # The other members went on in the next bundle, still waiting; nothing was deleted.
    assert sorted(g.table for g in members_of(bundles(rig)[-1])) == [f"sales.t{i}" for i in range(TABLES)]
    assert rig.fs.deleted == []


def test_a_record_that_says_it_is_a_bundle_but_does_not_read_as_one_is_dead_lettered_whole() -> None:
    rig = bundled_rig()
    consumer = FakeConsumer(rig.clock)
    loop = loop_over(rig, consumer)
    headers = (("ce_type", BUNDLE_TYPE.encode()), ("ce_id", str(uuid.uuid4()).encode()), ("x-due-at", bytes(8)))
    consumer.logs[(D, 0)] = [RawRecord(D, 0, 0, bundle_key("acme"), b"{not json", headers)]
    run_for(loop, rig, 0.5)
    [rejected] = [e for e in rig.published(TOPICS.dead_letter) if isinstance(e, CleanupRejected)]
    assert rejected.rejected_event_type == BUNDLE_TYPE
    assert consumer.committed[(D, 0)] == 1


@pytest.mark.parametrize(
    ("members", "carries"),
    [
        (b"[{not json", 0),
        (b'[{"key": 7, "headers": [], "value": {}}]', 0),
        (b'[{"key": "acme/sales.t0"}]', 2),  # its keys read: carried on as its summary allows, then refused
        (b'[{"key": "acme/sales.t0", "headers": [["ce_id", "\\u0100"]], "value": {}}]', 2),
    ],
    ids=["not-json", "key-not-text", "no-value", "header-not-latin-1"],
)
@pytest.mark.parametrize("compressed", [True, False], ids=["compressed", "plain"])
def test_a_summarised_bundle_whose_members_do_not_read_is_dead_lettered_whole_within_its_carries(
    members: bytes, carries: int, compressed: bool
) -> None:
    """A bundle with a summary is read lazily: its keys when it is checked, its members only when a
    check needs them. Members that do not read, even under a matching CRC, are refused with the raw
    bytes: at the first check when their keys do not read, else once its summary allows no more carries
    (a forged summary only ever delays; nothing is cleaned, and the loop goes on)."""
    rig = bundled_rig(compressed)
    consumer, loop, seen, _ids = started(rig)
    cycle(loop, rig, consumer, seen, 3)
    good = bundles(rig)[-1]
    summary = dict(good.headers).get(SUMMARY_HEADER)
    assert summary is not None  # the loop wrote a summary: the forged bundle keeps one that matches
    value, written = with_members(good, members)
    claimed = msgspec.json.decode(summary, type=BundleSummary)
    forged = msgspec.structs.replace(claimed, carries_left=carries, records_crc=zlib.crc32(written))
    headers = tuple(
        (name, msgspec.json.encode(forged) if name == SUMMARY_HEADER else data) for name, data in good.headers
    )
    log = consumer.logs[(D, 0)]
    assert log[-1].value == good.value  # not read yet: the forged bundle takes its place
    log[-1] = RawRecord(D, 0, len(log) - 1, good.key, value, headers)
    read = unpack(log[-1])
    assert read is not None and read.summary is not None  # read lazily: its CRC matches
    before = len(bundles(rig))
    cycle(loop, rig, consumer, seen, carries + 2)
    rejected = [e for e in rig.published(TOPICS.dead_letter) if isinstance(e, CleanupRejected)]
    assert [(r.rejected_event_type, r.reason_code) for r in rejected] == [(BUNDLE_TYPE, "invalid_event")]
    assert rejected[0].source.value_b64 is not None and written in base64.b64decode(rejected[0].source.value_b64)
    assert len([record for record in bundles(rig)[before:] if written in record.value]) == carries
    assert consumer.committed[(D, 0)] == len(consumer.logs[(D, 0)])
    assert rig.fs.deleted == []


def test_bundles_are_cut_to_their_record_and_byte_limits_and_read_back_byte_for_byte() -> None:
    rig = bundled_rig()
    consumer, loop, seen, _ids = started(rig)
    cycle(loop, rig, consumer, seen, 1)
    groups = [event for event in rig.published(D) if isinstance(event, DelayedVacuums)]
    assert len(groups) == TABLES
    source = uuid.uuid4()
    now = datetime.now(timezone.utc)
    by_count = bundles_of(groups, tenant="acme", partition=3, source_id=source, occurred_at=now, max_records=4)
    assert [len(b.members) for b in by_count] == [4, 2]
    by_bytes = bundles_of(groups, tenant="acme", partition=3, source_id=source, occurred_at=now, max_bytes=1)
    assert [len(b.members) for b in by_bytes] == [1] * TABLES  # one too large still gets a bundle
    assert bundles_of(groups, tenant="acme", partition=3, source_id=source, occurred_at=now)[0].event_id == (
        bundles_of(groups, tenant="acme", partition=3, source_id=source, occurred_at=now)[0].event_id
    )  # a replay publishes the same id
    out = by_count[0].outgoing("/acidclean/cleaner/c1")
    assert out.partition == 3 and out.key == b"acme/~bundle"
    read = unpack(RawRecord(D, 3, 17, out.key, out.value, out.headers))
    assert read is not None
    for event, member in zip(groups[:4], read.members, strict=True):
        alone = encode(event, source="/acidclean/cleaner/c1")
        assert (member.key, member.value, member.headers) == (alone.key, alone.value, alone.headers)
        assert (member.topic, member.partition, member.offset) == (D, 3, 17)
    assert header_due_at_ms(RawRecord(D, 3, 17, out.key, out.value, out.headers)) == max(
        header_due_at_ms(m) or 0 for m in read.members
    )


@pytest.mark.parametrize("compressed", [True, False], ids=["compressed", "plain"])
def test_the_audit_reads_a_bundles_members_as_if_each_had_been_published_alone(compressed: bool) -> None:
    rig = bundled_rig(compressed)
    consumer, loop, seen, ids = started(rig)
    cycle(loop, rig, consumer, seen, 4)
    assert len(bundles(rig)) >= 2
    assert all((b'"records_encoding"' in record.value) == compressed for record in bundles(rig))
    records = rig.bus.records[D]
    settings = Settings()
    read = list(FastDecoder(settings).records(records))
    expected = [encode_back(record) for record in rig.bus.unbundled(D)]
    assert [str(e.event_id) for e in read] == [str(e.event_id) for e in expected]  # type: ignore[attr-defined]
    one_table = list(FastDecoder(settings, table="sales.t3").records(records))
    assert one_table and all(event.table == "sales.t3" for event in one_table)  # type: ignore[attr-defined]
    assert {str(w.vacuum.event_id) for e in one_table for w in getattr(e, "waiting", [])} == set(ids[3])


@pytest.mark.parametrize("per_table", [1, PER_TABLE])
def test_the_audit_reads_a_bundle_carried_on_whole_as_a_check_of_each_member_not_an_overdue_vacuum(
    per_table: int,
) -> None:
    """Two vacuums a table wait in a DelayedVacuums (checks counted in its summary), one alone in a
    DelayEnvelope (counted in its attempt): either way every check is counted, each carried on whole
    included."""
    rig = bundled_rig()
    consumer, loop, seen, ids = started(rig, per_table)
    cycle(loop, rig, consumer, seen, 8)
    last = bundles(rig)[-1]
    assert carried(last) >= 5  # several checks carried the bundle on whole since its members were written
    records = rig.bus.records[D]
    now = rig.clock.now()
    due = datetime.fromtimestamp((header_due_at_ms(last) or 0) / 1000, timezone.utc)
    for validate in (False, True):
        events = (
            list(decode_records(records, Settings())) if validate else list(FastDecoder(Settings()).records(records))
        )
        rows = {row.vacuum_id: row for row in fold(events, now=now, overdue_after=timedelta(seconds=10))}
        for table in ids:
            for vacuum_id in table:
                row = rows[vacuum_id]
                # Waiting, next checked when the newest bundle is due, every check counted (one a cycle).
                assert row.state == "waiting", (validate, row)
                assert row.next_check_at == due
                assert row.attempts == 8


def test_a_group_lingering_past_its_due_time_in_a_bundle_is_never_checked_early() -> None:
    rig, consumer, loop, seen, _ids, bundle = first_bundle()
    due = header_due_at_ms(bundle)
    assert due is not None
    # Run until just before the bundle's due time: nothing new is published for it.
    run_for(loop, rig, max(0.0, (due - rig.clock.now_ms()) / 1000 - 0.05))
    assert len(bundles(rig)) == 1
    run_for(loop, rig, 0.2)
    forward_delays(rig, consumer, seen)
    assert len(bundles(rig)) == 2
    second = bundles(rig)[1]
    assert dict(second.headers)["causation_id"] == dict(bundle.headers)["ce_id"]  # this check carried it on
    assert checked_at(second) >= due / 1000 - 0.001


def test_a_bundle_read_again_after_its_check_was_acknowledged_is_not_carried_on_twice() -> None:
    rig = bundled_rig()
    consumer, loop, seen, _ids = started(rig)
    cycle(loop, rig, consumer, seen, 3)
    log = consumer.logs[(D, 0)]
    checked = [record for record in log[:-1] if is_bundle(record.headers)][-1]  # its successor is acknowledged
    log.append(RawRecord(D, 0, len(log), checked.key, checked.value, checked.headers))  # a replayed copy
    before = len(bundles(rig))
    cycle(loop, rig, consumer, seen, 3)
    assert len(bundles(rig)) == before + 3  # one bundle an interval, not two
    assert rig.metrics.events.labels("bundle_replayed")._value.get() == 1
    last = members_of(bundles(rig)[-1])
    assert sorted(g.table for g in last) == [f"sales.t{i}" for i in range(TABLES)]


@pytest.mark.parametrize("compressed", [True, False], ids=["compressed", "plain"])
def test_a_bundle_member_whose_key_is_another_tables_is_never_carried_on_but_checked_in_full(compressed: bool) -> None:
    rig = bundled_rig(compressed)
    consumer, loop, seen, _ids = started(rig)
    cycle(loop, rig, consumer, seen, 3)
    good = bundles(rig)[-1]
    records = json.loads(members_text(good))
    records[0]["key"] = "acme/sales.t5"  # a record of sales.t0 under sales.t5's key
    if records[0]["value"]["table"] == "sales.t5":
        records[0]["key"] = "acme/sales.t4"
    log = consumer.logs[(D, 0)]
    assert log[-1].value == good.value
    log[-1] = RawRecord(D, 0, len(log) - 1, good.key, with_members(good, json.dumps(records).encode())[0], good.headers)
    cycle(loop, rig, consumer, seen, 2)
    rejected = [e for e in rig.published(TOPICS.dead_letter) if isinstance(e, CleanupRejected)]
    assert len(rejected) == 1 and rejected[0].rejected_event_type == DelayedVacuums.event_type
    assert rig.fs.deleted == [] and dones(rig) == []
    # The others went on in the next bundle, each under its own key.
    last = members_of(bundles(rig)[-1])
    assert len(last) == TABLES - 1


def fresh_vacuum(rig: Rig, index: int, *, locked: bool = True, first_write_id: int = 7) -> VacuumCommitted:
    """A later minor vacuum of sales.t<index> (deltas first_write_id..+2), under the table's reader's
    lock when ``locked``, else under none."""
    singles = [delta_name(w, w, 0) for w in range(first_write_id, first_write_id + 3)]
    compacted = delta_name(first_write_id, first_write_id + 2)
    rig.fs.add_acid_dirs(location(index), [*singles, compacted])
    event = vacuum(
        event_id=uuid.uuid4(),
        table=f"sales.t{index}",
        partition=None,
        location=location(index),
        vacuum_job_id=f"job-{index}-fresh-{first_write_id}",
        new_directories=[compacted],
        obsolete_directories=singles,
        highest_write_id=first_write_id + 2,
        lock_snapshot=[lock(lock_id(index))] if locked else [],
    )
    rig.fs.mark_vacuum_output(event)
    return event


def joined(rig: Rig) -> float:
    return rig.metrics.events.labels("joined_in_bundle")._value.get()  # type: ignore[no-any-return]


def bundled_then_fresh(
    *, locked: bool = True
) -> tuple[Rig, FakeConsumer, CleanerLoop, list[int], list[list[str]], VacuumCommitted]:
    """Every table waiting in a bundle, then a fresh vacuum of sales.t1 on the vacuum topic."""
    rig = bundled_rig()
    consumer, loop, seen, ids = started(rig)
    cycle(loop, rig, consumer, seen, 3)
    fresh = fresh_vacuum(rig, 1, locked=locked)
    consumer.append(V, 0, fresh)
    return rig, consumer, loop, seen, ids, fresh


def test_a_fresh_vacuum_of_a_bundled_table_joins_that_tables_record_and_both_wait_on_in_one() -> None:
    rig, consumer, loop, seen, ids, fresh = bundled_then_fresh()
    cycle(loop, rig, consumer, seen, 4, slices=20)
    [table_one] = [group for group in members_of(bundles(rig)[-1]) if group.table == "sales.t1"]
    assert sorted(str(item.vacuum.event_id) for item in table_one.waiting) == sorted([*ids[1], str(fresh.event_id)])
    assert len(members_of(bundles(rig)[-1])) == TABLES  # still one record a table
    assert rig.fs.deleted == [] and dones(rig) == []
    # Taken in by the bundle's own check: t1's record was not sent out and read back for it.
    assert joined(rig) == 1
    assert consumer.committed[(V, 0)] == len(consumer.logs[(V, 0)])


def test_a_fresh_vacuum_whose_snapshot_misses_its_tables_reader_goes_back_to_its_lane_and_waits_for_it() -> None:
    rig, consumer, loop, seen, ids, fresh = bundled_then_fresh(locked=False)  # its snapshot lost the reader's lock
    cycle(loop, rig, consumer, seen, 4, slices=20)
    assert joined(rig) == 0  # it looked ready to the bundle's check: its lane checked it in full
    assert rig.fs.deleted == [] and dones(rig) == []
    last_interval = [event for event in rig.published(D)][-TABLES - 1 :]
    assert fresh.event_id in waiting_vacuum_ids(last_interval)
    rig.metastore.release(lock_id(1))
    cycle(loop, rig, consumer, seen, 3)
    assert sorted(str(done.correlation_id) for done in dones(rig)) == sorted([*ids[1], str(fresh.event_id)])


def rejoined(rig: Rig) -> float:
    return rig.metrics.events.labels("rejoined")._value.get()  # type: ignore[no-any-return]


def test_a_fresh_vacuum_riding_with_a_bundle_is_kept_waiting_by_an_older_lock_list_without_a_new_call() -> None:
    rig = bundled_rig()
    consumer, loop, seen, _ids = started(rig)
    cycle(loop, rig, consumer, seen, 3)
    serve_list_asked_now(rig)
    run_for(loop, rig, 0.01)
    fresh = fresh_vacuum(rig, 1)  # read after that list was asked, under t1's reader's lock, which it lists
    consumer.append(V, 0, fresh)
    asked = rig.metastore.calls["show_locks"]
    cycle(loop, rig, consumer, seen, 2, slices=20)
    assert joined(rig) == 1 and rejoined(rig) == 0
    # The bundle's check answered its rider with the list its batch shared: no call was made for it.
    assert rig.metastore.calls["show_locks"] == asked
    [table_one] = [group for group in members_of(bundles(rig)[-1]) if group.table == "sales.t1"]
    assert str(fresh.event_id) in {str(item.vacuum.event_id) for item in table_one.waiting}
    assert rig.fs.deleted == [] and dones(rig) == []


def test_a_fresh_vacuum_whose_reader_came_after_its_bundles_lock_list_goes_back_to_its_lane_and_waits_for_it() -> None:
    """The adversary: a reader takes a lock after the lock list a bundle's check shares was asked, a
    vacuum's snapshot holds only that lock, and the vacuum rides with the bundle. That list does not
    show the lock, so the vacuum looks ready to the bundle's check: it must not be cleaned on that
    list, only go back to its own lane, whose list (asked after it was read) shows the reader."""
    rig = bundled_rig()
    consumer, loop, seen, ids = started(rig)
    cycle(loop, rig, consumer, seen, 3)
    serve_list_asked_now(rig)
    run_for(loop, rig, 0.01)
    late_reader = 900
    rig.metastore.take_lock(late_reader, "sales.t1")
    fresh = fresh_vacuum(rig, 1).model_copy(update={"lock_snapshot": [lock(late_reader)]})
    consumer.append(V, 0, fresh)
    cycle(loop, rig, consumer, seen, 3, slices=20)
    assert joined(rig) == 0 and rejoined(rig) == 1
    assert rig.fs.deleted == [] and dones(rig) == []
    latest = {event.table: event for event in rig.published(D)}  # each table's newest delay record
    assert fresh.event_id in waiting_vacuum_ids(latest.values())
    rig.metastore.release(late_reader)
    rig.metastore.release(lock_id(1))
    cycle(loop, rig, consumer, seen, 3)
    assert sorted(str(done.correlation_id) for done in dones(rig)) == sorted([*ids[1], str(fresh.event_id)])


def test_a_rider_whose_lockless_reader_came_after_the_shared_lists_waits_for_it_in_its_lane() -> None:
    """The same adversary without a lock: a reader opens a transaction (no read lock) after the lists a
    bundle's check shares were asked, and a vacuum that renamed its output for it (``next_txn_id``
    above it, an empty lock snapshot) rides with the bundle. The older transaction list does not show
    the reader: the vacuum goes back to its lane, waits for the transaction, and is cleaned once it ends."""
    rig = bundled_rig()
    rig.metastore._kind = MetastoreKind.HIVE3
    rig.metastore.txn_high_watermark = 200
    consumer, loop, seen, ids = started(rig)
    cycle(loop, rig, consumer, seen, 3)
    serve_list_asked_now(rig)
    run_for(loop, rig, 0.01)
    rig.metastore.open_txns = [120]  # the lockless reader
    fresh = fresh_vacuum(rig, 1).model_copy(update={"lock_snapshot": [], "locks_observed": 0, "next_txn_id": 150})
    consumer.append(V, 0, fresh)
    cycle(loop, rig, consumer, seen, 3, slices=20)
    assert joined(rig) == 0 and rejoined(rig) == 1
    assert rig.fs.deleted == [] and dones(rig) == []
    latest = {event.table: event for event in rig.published(D)}
    assert fresh.event_id in waiting_vacuum_ids(latest.values())
    rig.metastore.open_txns = []
    rig.metastore.release(lock_id(1))
    cycle(loop, rig, consumer, seen, 3)
    assert sorted(str(done.correlation_id) for done in dones(rig)) == sorted([*ids[1], str(fresh.event_id)])


def test_fresh_vacuums_of_a_bundled_table_whose_reader_left_go_back_to_their_lane_and_are_cleaned_there() -> None:
    rig, consumer, loop, seen, ids, fresh = bundled_then_fresh()
    run_for(loop, rig, 0.1)  # read: it waits for its table's bundle
    rig.metastore.release(lock_id(1))
    cycle(loop, rig, consumer, seen, 3, slices=5)
    assert joined(rig) == 0
    assert sorted(str(done.correlation_id) for done in dones(rig)) == sorted([*ids[1], str(fresh.event_id)])
    assert {path.rsplit("/", 2)[-2] for path in rig.fs.deleted} == {"t1"}
    assert consumer.committed[(V, 0)] == len(consumer.logs[(V, 0)])


def test_a_fresh_vacuum_whose_claims_are_refused_is_not_taken_into_a_bundle_but_refused_by_its_lane() -> None:
    rig = bundled_rig()
    consumer, loop, seen, ids = started(rig)
    cycle(loop, rig, consumer, seen, 3)
    forged = fresh_vacuum(rig, 1).model_copy(update={"obsolete_directories": ["../../other.db/t9/base_1"]})
    consumer.append(V, 0, forged)
    cycle(loop, rig, consumer, seen, 4, slices=20)
    assert joined(rig) == 0
    [rejected] = [e for e in rig.published(TOPICS.dead_letter) if isinstance(e, CleanupRejected)]
    assert rejected.correlation_id == forged.event_id and (rejected.source.topic, rejected.source.partition) == (V, 0)
    assert rig.fs.deleted == [] and dones(rig) == []
    latest = {event.table: event for event in rig.published(D)}  # each table's newest delay record
    assert {str(i) for i in waiting_vacuum_ids(latest.values())} == {i for table in ids for i in table}


def test_fresh_vacuums_taken_into_a_bundled_tables_record_the_broker_refuses_are_not_lost() -> None:
    rig = bundled_rig()
    consumer, loop, seen, ids = started(rig)
    cycle(loop, rig, consumer, seen, 3)
    fresh = [fresh_vacuum(rig, index) for index in (1, 3)]
    for event in fresh:
        consumer.append(V, 0, event)
    run_for(loop, rig, 0.1)  # read: they wait for their tables' bundle
    rig.bus.fail_next(2)  # the bundle's batch, then its first record alone
    for _ in range(20):
        run_for(loop, rig, 2.1 / 5)
        forward_delays(rig, consumer, seen)
        # No offset (the bundle's, or a fresh vacuum's) ever passes a record whose outcome is not out.
        assert unanswered_below_commit(rig, consumer) == []
    assert joined(rig) >= 2 and not rig.bus._failures  # type: ignore[attr-defined]
    latest = {event.table: event for event in rig.published(D)}  # each table's newest delay record
    expected = {*(i for table in ids for i in table), *(str(event.event_id) for event in fresh)}
    assert sorted(str(i) for i in waiting_vacuum_ids(latest.values())) == sorted(expected)
    assert consumer.committed[(V, 0)] == len(consumer.logs[(V, 0)])
    assert rig.fs.deleted == [] and dones(rig) == []


def test_vacuums_waiting_alone_go_on_in_bundles_one_check_more_each_interval_until_their_reader_leaves() -> None:
    rig = bundled_rig()
    consumer, loop, seen, ids = started(rig, per_table=1)
    cycle(loop, rig, consumer, seen, 4)
    records = bundles(rig)
    assert len(records) >= 3
    assert carried(records[-1]) >= 1  # vacuums waiting alone make a bundle carried on whole as well
    # Each member as the check of its bundle left it (a bundle carried on whole: as the audit reads it).
    envelopes = []
    for record in records:
        members, carry = bundle_members(record)
        decoded = [decode(m, rejected_by="t", tenant="acme") for m in members]
        envelopes.append([event if carry is None else carry.applied(event) for event in decoded])
    assert all(isinstance(e, DelayEnvelope) for batch in envelopes for e in batch)
    assert sorted(str(e.correlation_id) for e in envelopes[-1]) == sorted(i for table in ids for i in table)
    for (earlier, later), (earlier_record, later_record) in zip(pairwise(envelopes), pairwise(records), strict=True):
        before = {e.correlation_id: e for e in earlier}
        whole = dict(later_record.headers).get("causation_id") == dict(earlier_record.headers)["ce_id"]
        for envelope in later:
            previous = before[envelope.correlation_id]
            assert envelope.attempt == previous.attempt + 1
            assert envelope.occurred_at >= previous.due_at  # never early
            # Written on by this check (caused by the one before), or carried on whole unread.
            assert (envelope.event_id == previous.event_id) if whole else (envelope.causation_id == previous.event_id)
            assert [lock.lock_id for lock in envelope.locks_held] == [lock.lock_id for lock in previous.locks_held]
    rig.metastore.release(lock_id(0))
    cycle(loop, rig, consumer, seen, 3)
    assert {str(done.correlation_id) for done in dones(rig)} == set(ids[0])
    assert {path.rsplit("/", 2)[-2] for path in rig.fs.deleted} == {"t0"}


def test_a_checked_bundle_leaves_no_check_time_behind_whether_carried_on_whole_or_member_by_member() -> None:
    """Each check of a bundle takes the time of the check that wrote it: none stays behind to be
    pruned (at 10,000 tables, thousands of entries an interval), only the newest bundles keep theirs."""
    rig = bundled_rig()
    consumer, loop, seen, _ids = started(rig)
    cycle(loop, rig, consumer, seen, 6)
    written_before = len(bundles(rig))
    cycle(loop, rig, consumer, seen, 1)
    records = bundles(rig)
    assert any(carried(record) >= 1 for record in records)  # some were carried on whole
    ids = [uuid.UUID(dict(record.headers)["ce_id"].decode()) for record in records]
    newest = ids[written_before:]
    assert newest  # written by the last check and not yet checked: their check time is kept for it
    assert all(rig.handler.take_checked_at_ms(event_id) is None for event_id in ids[:written_before])
    assert all(rig.handler.take_checked_at_ms(event_id) is not None for event_id in newest)


def test_a_member_sent_out_of_its_bundle_is_answered_only_by_a_lock_list_asked_after_the_bundles_check() -> None:
    rig = bundled_rig()
    consumer, loop, seen, _ids = started(rig)
    cycle(loop, rig, consumer, seen, 3)
    bundle = bundles(rig)[-1]
    written_ms = int(members_of(bundle)[0].occurred_at.timestamp() * 1000)  # the check that wrote it
    asked: dict[str, int | None] = {}
    take = rig.handler.take_checked_at_ms

    def recorded(event_id: uuid.UUID) -> int | None:
        asked[str(event_id)] = answer = take(event_id)
        return answer

    rig.handler.take_checked_at_ms = recorded  # type: ignore[method-assign]
    rig.metastore.release(lock_id(2))
    cycle(loop, rig, consumer, seen, 2)  # sent out, then read back
    [member] = [group for group in members_of(bundle) if group.table == "sales.t2"]
    # Read back on its own, the member needs a lock list asked after the bundle's check, which was after
    # the check that wrote the bundle: never an older one (its vacuums committed before that check).
    assert rig.metrics.events.labels("bundle_spilled")._value.get() == 1
    required = asked[str(member.event_id)]
    assert required is not None and required >= written_ms
    assert required <= rig.clock.now_ms()


@pytest.mark.parametrize("slow", [False, True], ids=["quick_checks", "checks_that_take_time"])
def test_a_table_whose_records_are_in_two_bundles_is_rechecked_in_both_then_goes_on_in_one_record(slow: bool) -> None:
    """With checks that take time, the two bundles' checks give the table's two records due times
    apart: they must still go on in one bundle (cut by due time alone, they went into two bundles
    again, came back in one batch and were read member by member interval after interval, never
    merged)."""
    rig = bundled_rig()
    if slow:
        slow_down(rig)
    consumer, loop, seen, ids = started(rig, per_table=1)
    cycle(loop, rig, consumer, seen, 3)
    # A second waiting vacuum of sales.t1, parked by another process in a bundle of its own.
    singles = [delta_name(w, w, 0) for w in range(4, 7)]
    rig.fs.add_acid_dirs(location(1), [*singles, delta_name(4, 6)])
    second = vacuum(
        event_id=uuid.uuid4(),
        table="sales.t1",
        partition=None,
        location=location(1),
        vacuum_job_id="job-1-elsewhere",
        new_directories=[delta_name(4, 6)],
        obsolete_directories=singles,
        highest_write_id=6,
        lock_snapshot=[lock(lock_id(1))],
    )
    rig.fs.mark_vacuum_output(second)
    now = rig.clock.now()
    parked = delay_envelope(
        second, Readiness(False, (lock(lock_id(1)),)), now=now, interval_ms=2000, max_wait_s=3600, due=now
    )
    other = Bundle(event_id=uuid.uuid4(), tenant="acme", partition=0, members=(parked,), occurred_at=now)
    out = other.outgoing("/acidclean/cleaner/elsewhere")
    log = consumer.logs[(D, 0)]
    log.append(RawRecord(D, 0, len(log), out.key, out.value, out.headers))
    both = {ids[1][0], str(second.event_id)}
    records_of_t1 = []
    for _ in range(4):
        before = len(bundles(rig))
        cycle(loop, rig, consumer, seen, 1)
        written = [
            event
            for record in bundles(rig)[before:]
            for event in map(encode_back, unpack(record).members)  # type: ignore[union-attr]
            if event.table == "sales.t1"  # type: ignore[attr-defined]
        ]
        assert {str(i) for i in waiting_vacuum_ids(written)} == both  # each interval, both went on
        records_of_t1.append(len(written))
    # Once both were in one bundle, its check wrote them on in one record.
    assert records_of_t1[-1] == 1, records_of_t1
    assert rig.metrics.bundles_by_member.labels("shared_keys")._value.get() >= 1  # why both were read
    assert (
        records_of_t1[0] == 2
        and records_of_t1[-1] == 1
        and rig.metrics.events.labels("bundle_merged")._value.get() >= 1
    )
    assert rig.fs.deleted == [] and dones(rig) == []
    rig.metastore.release(lock_id(1))
    cycle(loop, rig, consumer, seen, 3)
    assert sorted(str(done.correlation_id) for done in dones(rig)) == sorted(both)
    assert {path.rsplit("/", 2)[-2] for path in rig.fs.deleted} == {"t1"}


def test_a_group_at_its_check_limit_is_read_in_full_by_the_bundles_check_one_check_more_for_each_vacuum() -> None:
    rig = bundled_rig()
    consumer, loop, seen, ids = started(rig)
    cycle(loop, rig, consumer, seen, 3)
    first = len(bundles(rig))
    cycle(loop, rig, consumer, seen, 40)  # past every key's limit of checks carried on unread (16-31)
    later = bundles(rig)[first - 1 :]
    assert rig.metrics.events.labels("bundle_read_in_full")._value.get() >= TABLES
    assert rig.metrics.events.labels("bundle_spilled")._value.get() == 0  # never sent out for it
    assert rig.metrics.events.labels("bundle_carried_whole")._value.get() >= 20
    # A check may write a table's next record in another bundle than its last one's (a bundle cut by
    # size): each record is compared with its table's last one.
    # A bundle's check writes no member within READ_IN_FULL_WITHIN checks of its limit: that member is
    # read in full now, not a few checks later by a check that reads every member for its sake.
    rewritten = [bundle for bundle in later[1:] if summary_of(bundle).carried == 0]
    assert rewritten and all(summary_of(bundle).carries_left >= READ_IN_FULL_WITHIN for bundle in rewritten)
    last_of: dict[str, tuple[DelayedVacuums, RawRecord]] = {
        group.table: (group, later[0]) for group in members_of(later[0])
    }
    for next_one in later[1:]:
        for group in members_of(next_one):
            before, earlier = last_of[group.table]
            last_of[group.table] = (group, next_one)
            assert checked_at(next_one) >= (header_due_at_ms(earlier) or 0) / 1000  # never early
            # One check more for every vacuum, whether carried on unread (alone, or in a bundle carried
            # on whole: its own summary is then behind by the bundle's whole carries) or read anew.
            counted = dict(
                zip(
                    (str(w.vacuum.event_id) for w in group.waiting),
                    (checks + carried(next_one) for checks in checks_so_far(group)),
                    strict=True,
                )
            )
            counted_before = dict(
                zip(
                    (str(w.vacuum.event_id) for w in before.waiting),
                    (checks + carried(earlier) for checks in checks_so_far(before)),
                    strict=True,
                )
            )
            assert counted == {vacuum: checks + 1 for vacuum, checks in counted_before.items()}
            assert group.unchanged is not None and group.unchanged.checks + carried(next_one) < 32
    assert rig.fs.deleted == [] and dones(rig) == []
    rig.metastore.release(lock_id(5))
    cycle(loop, rig, consumer, seen, 3)
    assert sorted(str(done.correlation_id) for done in dones(rig)) == sorted(ids[5])


def test_a_check_that_merges_a_vacuum_delivered_again_with_its_record_writes_an_id_no_other_check_wrote() -> None:
    """Found by BundledLoopMachine: a table's first check merged two fresh vacuums into record A; a later
    check merged the same two, delivered again after a rewind, with A's successor B. Both checks had
    the same first source and the same vacuums, so they wrote the same id: the later B then looked
    like a copy of the earlier one, the bundle carrying it was skipped as already checked, and the two
    vacuums were never checked again."""
    rig = bundled_rig()
    started(rig)
    first, second = rig.pending[:2]  # type: ignore[attr-defined]
    now = rig.clock.now()
    envelopes = [
        delay_envelope(event, Readiness(False, (lock(lock_id(0)),)), now=now, interval_ms=2000, max_wait_s=3600)
        for event in (first, second)
    ]
    entries = [entry_of_envelope(envelope) for envelope in envelopes]
    later_record = uuid.uuid4()

    def written(sources: list[uuid.UUID]) -> uuid.UUID:
        [out] = build_groups(
            tenant="acme",
            table="sales.t0",
            partition=None,
            entries=entries,
            sources=sources,
            checked_at=now,
            due_at=now + timedelta(seconds=2),
        )
        return out.event.event_id

    assert written([first.event_id, second.event_id]) == written([first.event_id, second.event_id])  # a replay
    assert written([first.event_id, second.event_id, later_record]) != written([first.event_id, second.event_id])
    assert written([later_record]) != written([first.event_id])


class HeldExecutor(Executor):
    """Runs batches at once, or, while ``hold`` is set, keeps them (the worker stays busy) until
    :meth:`release`."""

    def __init__(self) -> None:
        self.hold = False
        self.held: list[Callable[[], object]] = []

    def submit(self, fn: Callable[..., object], /, *args: object, **kwargs: object) -> Future[object]:
        future: Future[object] = Future()
        if self.hold:
            self.held.append(lambda: fn(*args, **kwargs))
        else:
            future.set_result(fn(*args, **kwargs))
        return future

    def release(self) -> None:
        self.hold = False
        held, self.held = self.held, []
        for call in held:
            call()


def test_riders_whose_bundle_goes_with_its_partition_are_checked_in_their_own_tables_lanes() -> None:
    executor = HeldExecutor()
    rig = bundled_rig()
    consumer, loop, seen, ids = started(rig, executor=executor)
    cycle(loop, rig, consumer, seen, 3)
    fresh = fresh_vacuum(rig, 1)
    consumer.append(V, 0, fresh)
    run_for(loop, rig, 0.1)  # it waits for its table's bundle
    executor.hold = True
    rig.metastore.add_table("sales.busy", "file:/warehouse/sales.db/busy")
    consumer.append(V, 1, vacuum(table="sales.busy", partition=None, location="/warehouse/sales.db/busy"))
    run_for(loop, rig, 0.1)  # the one worker takes it, and is kept busy
    forward_delays(rig, consumer, seen)  # the table's next bundle
    run_for(loop, rig, 2.1)  # due meanwhile, the bundle waits in its lane with its rider
    [bundle_lane] = [lane for name, lane in loop.lanes.by_name.items() if name.startswith("\x00bundle/")]
    assert [type(work.event).__name__ for work in bundle_lane.queue] == ["WaitingBundle", "VacuumCommitted"]
    consumer.rebalance_revoke([(D, 0)])  # the bundle goes with its partition, its rider does not
    assert [work.event.event_id for work in loop.lanes.by_name["acme/sales.t1"].queue] == [fresh.event_id]
    assert not any(name.startswith("\x00bundle/") and lane.queue for name, lane in loop.lanes.by_name.items())
    executor.release()
    consumer.rebalance_assign([(D, 0)])
    cycle(loop, rig, consumer, seen, 3)
    assert not {path for path in rig.fs.deleted if "/t1/" in path}  # its reader still holds its lock
    rig.metastore.release(lock_id(1))
    cycle(loop, rig, consumer, seen, 4)
    t1_done = sorted(str(done.correlation_id) for done in dones(rig) if done.table == "sales.t1")
    assert t1_done == sorted([*ids[1], str(fresh.event_id)])


def test_a_fresh_vacuum_still_joins_its_tables_record_read_late_by_a_cleaner_behind_its_delay_partition() -> None:
    rig = bundled_rig()
    consumer, loop, seen, ids = started(rig)
    cycle(loop, rig, consumer, seen, 3)
    run_for(loop, rig, 4.1)  # the bundle just written is not delivered yet: overdue by over an interval
    assert rig.handler.chain_due["acme/sales.t1"] < rig.clock.now_ms() - 2000
    fresh = fresh_vacuum(rig, 1)
    consumer.append(V, 0, fresh)
    run_for(loop, rig, 0.1)
    assert "acme/sales.t1" in loop.joiners.waiting  # it waits for that record rather than going on alone
    cycle(loop, rig, consumer, seen, 2, slices=10)  # the record arrives late and takes it in
    assert joined(rig) == 1
    [table_one] = [group for group in members_of(bundles(rig)[-1]) if group.table == "sales.t1"]
    assert sorted(str(item.vacuum.event_id) for item in table_one.waiting) == sorted([*ids[1], str(fresh.event_id)])
    assert rig.fs.deleted == [] and dones(rig) == []
