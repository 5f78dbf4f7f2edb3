"""The audit's fast decoder gives exactly the rows the validated models give, on any stream.

Random histories are encoded as records, some of them damaged (not JSON, a field missing or unknown,
a bad name, ids and times in spellings the models accept and the fast decoder leaves to them, headers
that disagree with the body), and folded both ways: through the models, and through the fast
decoder with its fallback. The rows must be equal.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_support import examples

from acidclean.consumers.audit import FastDecoder, decode_records, fold, select
from acidclean.consumers.audit_wire import (
    WIRE_STRUCTS,
    WireDirectory,
    WireLock,
    WireRawHeader,
    WireSourceRecord,
    WireUnchangedWaiting,
    WireWaitingVacuum,
)
from acidclean.schemas.common import LockSnapshotEntry, StrictModel, event_key
from acidclean.schemas.events import (
    EVENT_CLASS_BY_TYPE,
    TOPIC_FIELD,
    RawHeader,
    RemovedDirectory,
    SourceRecord,
    UnchangedWaiting,
    WaitingVacuum,
)
from acidclean.shared.bus.codec import encode
from acidclean.shared.bus.records import RawRecord
from acidclean.shared.settings import load_settings

from .factories import (
    T0,
    delay,
    delayed_vacuums,
    done,
    lock,
    rejected,
    requested,
    started,
    unchanged,
    unchanged_vacuums,
    vacuum,
    vacuum_failed,
    vacuum_started,
)

EVENT_CLASS_BY_TYPE_NAME = {cls.__name__: cls for cls in EVENT_CLASS_BY_TYPE.values()}
SETTINGS = load_settings(environ={}, overrides={"topic_prefix": "p."})
TABLES = [("sales.orders", "ds=1"), ("sales.orders", "ds=2"), ("hr.people", None)]
NOW = T0 + timedelta(hours=2)
OVERDUE = timedelta(minutes=30)


def _directories(names: list[int]) -> list[RemovedDirectory]:
    return [
        RemovedDirectory(name=f"delta_{n:07d}_{n:07d}_0000", file_count=1, bytes=100 * n) for n in dict.fromkeys(names)
    ]


@st.composite
def histories(draw: st.DrawFn) -> list[Any]:
    """Events of a few vacuums: committed, waits (some stuck or failing, some of several vacuums of one key
    in one DelayedVacuums), announcements, reports, rejections."""
    events: list[Any] = []
    by_key: dict[tuple[str, str | None], list[Any]] = {}
    for index in range(draw(st.integers(1, 4))):
        table, partition = draw(st.sampled_from(TABLES))
        moment = T0 + timedelta(minutes=index, microseconds=draw(st.sampled_from([0, 500, 123456])))
        locks = [lock(n, f"user{n}", "host") for n in draw(st.lists(st.integers(1, 3), max_size=2, unique=True))]
        request_id = None
        if draw(st.booleans()):
            asked = requested(table=table, partition=partition, occurred_at=moment - timedelta(seconds=30))
            request_id = asked.event_id
            events.append(asked)
            if draw(st.booleans()):
                events.append(vacuum_started(asked))
            if draw(st.integers(0, 3)) == 0:
                events.append(vacuum_failed(asked, reason_code=draw(st.sampled_from(["error", "nothing_to_vacuum"]))))
            if draw(st.integers(0, 2)) == 0:
                continue  # no vacuum (yet) for this request
        v = vacuum(table=table, partition=partition, occurred_at=moment, lock_snapshot=locks, request_id=request_id)
        by_key.setdefault((table, partition), []).append(v)
        if draw(st.integers(0, 4)) > 0:  # else the vacuum is known from its delay envelopes only
            events.append(v)
        for attempt in draw(st.lists(st.integers(1, 5), max_size=3)):
            stuck = draw(st.booleans())
            events.append(
                delay(
                    v,
                    attempt,
                    locks_held=locks[: draw(st.integers(0, len(locks)))],
                    check_error=draw(st.sampled_from([None, "thrift://hms:9083 timed out"])),
                    stuck=stuck,
                    stuck_since=moment + timedelta(hours=1) if stuck else None,
                )
            )
        for attempt in draw(st.lists(st.integers(1, 5), max_size=2)):
            names = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
            events.append(
                started(
                    v,
                    attempt=attempt,
                    directories_to_remove=_directories(names),
                    occurred_at=moment + timedelta(seconds=draw(st.integers(1, 20))),
                )
            )
        for _ in range(draw(st.integers(0, 2))):
            names = draw(st.lists(st.integers(1, 4), max_size=3))
            events.append(
                done(
                    v,
                    directories_removed=_directories(names),
                    dry_run=draw(st.booleans()),
                    note=draw(st.sampled_from([None, "table dropped"])),
                    attempts=draw(st.integers(1, 5)),
                    time_waited_ms=draw(st.integers(0, 9000)),
                    occurred_at=moment + timedelta(seconds=draw(st.integers(1, 30))),
                )
            )
        if draw(st.booleans()):
            events.append(rejected(v, occurred_at=moment + timedelta(seconds=draw(st.integers(1, 30)))))
    for vacuums in by_key.values():
        for _ in range(draw(st.integers(0, 2))):
            chosen = draw(st.lists(st.sampled_from(range(len(vacuums))), min_size=1, max_size=3, unique=True))
            events.append(_delayed(draw, [vacuums[index] for index in chosen]))
    if draw(st.booleans()):
        events.append(rejected(None, event_id=uuid.uuid4(), reason_code="not_json", reason="not JSON"))
    return events


def _delayed(draw: st.DrawFn, vacuums: list[Any]) -> Any:
    """A DelayedVacuums of these vacuums (one key), each with its own attempt, locks, error and stuck state;
    when every vacuum waits on locks alone, sometimes with the ``unchanged`` summary of a few checks."""
    lock_only = all(v.lock_snapshot for v in vacuums) and draw(st.booleans())
    waiting = []
    for v in vacuums:
        stuck = draw(st.booleans())
        waiting.append(
            WaitingVacuum(
                vacuum=v,
                attempt=draw(st.integers(1, 5)),
                locks_held=v.lock_snapshot[: draw(st.integers(1 if lock_only else 0, len(v.lock_snapshot)))],
                check_error=None if lock_only else draw(st.sampled_from([None, "thrift://hms:9083 timed out"])),
                stuck=stuck,
                stuck_since=v.occurred_at + timedelta(hours=1) if stuck else None,
                open_txns=[] if lock_only else draw(st.lists(st.integers(1, 9), max_size=2)),
            )
        )
    return delayed_vacuums(
        *vacuums,
        waiting=waiting,
        unchanged=unchanged(waiting, draw(st.integers(0, 5))) if lock_only and draw(st.booleans()) else None,
        occurred_at=max(v.occurred_at for v in vacuums) + timedelta(seconds=draw(st.integers(1, 20))),
        merged_from=draw(st.lists(st.sampled_from([v.event_id for v in vacuums]), max_size=2)),
    )


def _body(record: RawRecord) -> dict[str, Any]:
    return json.loads(record.value or b"")  # type: ignore[no-any-return]


def _with_body(record: RawRecord, body: dict[str, Any]) -> RawRecord:
    return RawRecord(
        record.topic, record.partition, record.offset, record.key, json.dumps(body).encode(), record.headers, 1
    )


def _with_headers(record: RawRecord, headers: list[tuple[str, bytes | None]]) -> RawRecord:
    return RawRecord(record.topic, record.partition, record.offset, record.key, record.value, tuple(headers), 1)


def _change(body: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**body, **changes}


def _header(record: RawRecord, name: str, value: bytes | None) -> RawRecord:
    return _with_headers(record, [(n, value if n == name else v) for n, v in record.headers])


def _rekeyed(record: RawRecord, body: dict[str, Any]) -> RawRecord:
    """The record with this body, and the key and subject its tenant, table and partition make."""
    key = event_key(body["tenant"], body.get("table"), body.get("partition")).encode()
    headers = [(name, key if name == "ce_subject" else value) for name, value in record.headers]
    return RawRecord(record.topic, record.partition, record.offset, key, json.dumps(body).encode(), tuple(headers), 1)


def _same_id_everywhere(record: RawRecord, event_id: str) -> RawRecord:
    """The record with this event id in its body and in its ce_id header (and as its own correlation)."""
    body = _body(record)
    changed = {"event_id": event_id}
    if body.get("correlation_id") == body["event_id"]:
        changed["correlation_id"] = event_id
    record = _with_body(record, _change(body, **changed))
    if "correlation_id" in changed:
        record = _header(record, "correlation_id", event_id.encode())
    return _header(record, "ce_id", event_id.encode())


def _other_vacuum(record: RawRecord) -> RawRecord:
    """The record said to belong to another vacuum, in its body and its header alike."""
    other = str(uuid.uuid4())
    changed = _with_body(record, _change(_body(record), correlation_id=other))
    return _header(changed, "correlation_id", other.encode())


def _in_waiting(record: RawRecord, change: Any) -> RawRecord:
    """The record with ``change`` made to the vacuums a DelayedVacuums carries; any other event gets a
    ``waiting`` field it may not have."""
    body = _body(record)
    waiting = [dict(item, vacuum=dict(item["vacuum"])) for item in body.get("waiting") or [{"vacuum": {}}]]
    return _with_body(record, _change(body, waiting=change(waiting)))


def _stuck_without_since(waiting: list[dict[str, Any]]) -> list[dict[str, Any]]:
    waiting[0].update(stuck=True, stuck_since=None)
    return waiting


def _first_changed(waiting: list[dict[str, Any]], **changes: Any) -> list[dict[str, Any]]:
    waiting[0].update(changes)
    return waiting


def _of_another_table(waiting: list[dict[str, Any]]) -> list[dict[str, Any]]:
    waiting[-1]["vacuum"]["table"] = "other.table"
    return waiting


def _in_unchanged(record: RawRecord, change: Callable[[dict[str, Any]], dict[str, Any]]) -> RawRecord:
    """The record with ``change`` made to its ``unchanged`` summary; one is made up where it has none."""
    body = _body(record)
    made_up = {"lock_ids": [1], "checks": 0, "oldest_commit": body["occurred_at"], "oldest_unstuck_commit": None}
    return _with_body(record, _change(body, unchanged=change(dict(body.get("unchanged") or made_up))))


def _correlated(record: RawRecord) -> RawRecord:
    """The record said to belong to another flow, its correlation header added where it had none."""
    other = str(uuid.uuid4())
    changed = _with_body(record, _change(_body(record), correlation_id=other))
    headers = [(name, value) for name, value in changed.headers if name != "correlation_id"]
    return _with_headers(changed, [*headers, ("correlation_id", other.encode())])


def _east(moment: str) -> str:
    """The same instant written two hours east of UTC."""
    if not moment:
        return "2025-03-14T11:00:00+02:00"
    return (datetime.fromisoformat(moment.replace("Z", "+00:00")).astimezone(timezone(timedelta(hours=2)))).isoformat()


def _seven_digits(moment: str) -> str:
    """The same time with a seventh fractional digit, which the models cut."""
    seconds, _, fraction = moment.removesuffix("Z").partition(".")
    return f"{seconds}.{fraction.ljust(6, '0')}7Z"


# Each damage is one thing a record may get wrong, or spell in a way only the models read.
DAMAGES: dict[str, Callable[[RawRecord], RawRecord]] = {
    "not_json": lambda r: RawRecord(r.topic, r.partition, r.offset, r.key, b"{not json", r.headers, 1),
    "empty": lambda r: RawRecord(r.topic, r.partition, r.offset, r.key, b"", r.headers, 1),
    "missing_field": lambda r: _with_body(r, {k: v for k, v in _body(r).items() if k != "table"}),
    "unknown_field": lambda r: _with_body(r, _change(_body(r), surprise=1)),
    "bad_table": lambda r: _with_body(r, _change(_body(r), table="no dots")),
    "table_with_newline": lambda r: _rekeyed(r, _change(_body(r), table=f"{_body(r)['table'] or 'a.b'}\n")),
    "tenant_with_slash": lambda r: _rekeyed(r, _change(_body(r), tenant="acme/sales.orders", table="ds.x")),
    "partition_with_newline": lambda r: _rekeyed(r, _change(_body(r), partition="ds=1\n")),
    "two_lines": lambda r: _with_body(r, _change(_body(r), message="failed\nat line 2")),
    "stuck_without_since": lambda r: _with_body(r, _change(_body(r), stuck=True)),
    "locks_observed": lambda r: _with_body(r, _change(_body(r), locks_observed=7)),
    "other_vacuum": lambda r: _other_vacuum(r),
    "same_directory_twice": lambda r: _with_body(
        r, _change(_body(r), directories_to_remove=[{"name": "delta_1_1", "file_count": 1, "bytes": 1}] * 2)
    ),
    "due_two_hours_east": lambda r: _with_body(r, _change(_body(r), due_at=_east(_body(r).get("due_at") or ""))),
    "requested_two_hours_east": lambda r: _with_body(
        r, _change(_body(r), requested_at=_east(_body(r).get("requested_at") or ""))
    ),
    "two_hours_east": lambda r: _with_body(r, _change(_body(r), occurred_at=_east(_body(r)["occurred_at"]))),
    "other_lock_type": lambda r: _with_body(
        r, json.loads(json.dumps(_body(r)).replace('"SHARED_READ"', '"SHARED_WEIRD"'))
    ),
    "lower_case_lock_type": lambda r: _with_body(
        r, json.loads(json.dumps(_body(r)).replace('"SHARED_READ"', '"shared_read"'))
    ),
    "specversion": lambda r: _header(r, "ce_specversion", b"0.3"),
    "other_subject": lambda r: _header(r, "ce_subject", b"acme/x.y"),
    "other_due_time": lambda r: _with_headers(
        r, [*((n, v) for n, v in r.headers if n != "x-due-at"), ("x-due-at", (7).to_bytes(8, "big"))]
    ),
    "other_causation": lambda r: _header(r, "causation_id", str(uuid.uuid4()).encode()),
    "bad_tenant_no_table": lambda r: _rekeyed(r, _change(_body(r), tenant="bad tenant", table=None)),
    "bad_partition_no_table": lambda r: _rekeyed(r, _change(_body(r), table=None, partition="no equals sign")),
    "upper_case_ids_everywhere": lambda r: _same_id_everywhere(r, _body(r)["event_id"].upper()),
    "not_a_uuid_everywhere": lambda r: _same_id_everywhere(r, "z" * 36),
    "upper_case_id": lambda r: _with_body(r, _change(_body(r), event_id=_body(r)["event_id"].upper())),
    "seven_digits": lambda r: _with_body(r, _change(_body(r), occurred_at=_seven_digits(_body(r)["occurred_at"]))),
    "schema_version": lambda r: _with_body(r, _change(_body(r), schema_version=2)),
    "string_number": lambda r: _with_body(r, _change(_body(r), schema_version="1")),
    "no_source": lambda r: _with_headers(r, [(n, v) for n, v in r.headers if n != "ce_source"]),
    "twice": lambda r: _with_headers(r, [*r.headers, r.headers[0]]),
    "other_type": lambda r: _header(r, "ce_type", b"acidclean.delta.committed"),
    "other_key": lambda r: RawRecord(r.topic, r.partition, r.offset, b"acme/x.y", r.value, r.headers, 1),
    "upper_case_ce_id": lambda r: _header(r, "ce_id", (dict(r.headers)["ce_id"] or b"").upper()),
    "ce_time_offset": lambda r: _header(r, "ce_time", (dict(r.headers)["ce_time"] or b"").replace(b"Z", b"+00:00")),
    "ce_time_other": lambda r: _header(r, "ce_time", b"2020-01-01T00:00:00Z"),
    "extra_header": lambda r: _with_headers(r, [*r.headers, ("x-trace", b"\xff")]),
    "content_type": lambda r: _header(r, "content-type", b"application/json; charset=utf-8"),
    "latin1_source": lambda r: _header(r, "ce_source", b"\xe9"),
    "waiting_stuck_without_since": lambda r: _in_waiting(r, _stuck_without_since),
    "waiting_of_another_table": lambda r: _in_waiting(r, _of_another_table),
    "waiting_twice": lambda r: _in_waiting(r, lambda waiting: waiting[:1] * 2),
    "waiting_none": lambda r: _in_waiting(r, lambda waiting: []),
    "waiting_check_error": lambda r: _in_waiting(r, lambda waiting: _first_changed(waiting, check_error="timed out")),
    "waiting_open_txns": lambda r: _in_waiting(r, lambda waiting: _first_changed(waiting, open_txns=[11])),
    "waiting_no_locks_held": lambda r: _in_waiting(r, lambda waiting: _first_changed(waiting, locks_held=[])),
    "correlated": _correlated,
    "unchanged_extra_lock": lambda r: _in_unchanged(r, lambda u: {**u, "lock_ids": [*u["lock_ids"], 99]}),
    "unchanged_lock_ids_reversed": lambda r: _in_unchanged(r, lambda u: {**u, "lock_ids": u["lock_ids"][::-1]}),
    "unchanged_no_lock_ids": lambda r: _in_unchanged(r, lambda u: {**u, "lock_ids": []}),
    "unchanged_negative_checks": lambda r: _in_unchanged(r, lambda u: {**u, "checks": -1}),
    "unchanged_checks_as_text": lambda r: _in_unchanged(r, lambda u: {**u, "checks": "1"}),
    "unchanged_oldest_commit_east": lambda r: _in_unchanged(
        r, lambda u: {**u, "oldest_commit": _east(u["oldest_commit"])}
    ),
    "unchanged_oldest_commit_later": lambda r: _in_unchanged(
        r, lambda u: {**u, "oldest_commit": _body(r)["occurred_at"]}
    ),
    "unchanged_oldest_unstuck_east": lambda r: _in_unchanged(
        r, lambda u: {**u, "oldest_unstuck_commit": _east(u["oldest_unstuck_commit"] or "")}
    ),
    "unchanged_oldest_unstuck_null": lambda r: _in_unchanged(r, lambda u: {**u, "oldest_unstuck_commit": None}),
    "unchanged_unknown_field": lambda r: _in_unchanged(r, lambda u: {**u, "surprise": 1}),
    "merged_from_not_a_uuid": lambda r: _with_body(r, _change(_body(r), merged_from=["z" * 36])),
    "merged_from_upper_case": lambda r: _with_body(
        r, _change(_body(r), merged_from=[_body(r)["event_id"].upper(), *_body(r).get("merged_from", [])])
    ),
}


def _records(events: list[Any], damages: list[tuple[int, str]]) -> list[RawRecord]:
    records = []
    for offset, event in enumerate(events):
        out = encode(event)
        topic = SETTINGS.topic(TOPIC_FIELD[type(event)])
        records.append(RawRecord(topic, 0, offset, out.key, out.value, out.headers, 1_700_000_000_000 + offset))
    damaged: set[int] = set()
    for index, damage in damages:
        position = index % len(records) if records else 0
        if records and position not in damaged:
            damaged.add(position)
            records[position] = DAMAGES[damage](records[position])
    return records


def _both_ways(records: list[RawRecord], **filters: Any) -> tuple[list[Any], list[Any]]:
    validated = fold(decode_records(records, SETTINGS), now=NOW, overdue_after=OVERDUE)
    decoder = FastDecoder(SETTINGS, table=filters.get("table"), partition=filters.get("partition"))
    fast = fold(decoder.records(records), now=NOW, overdue_after=OVERDUE)
    # As JSON too: times equal as instants may still be written in another zone.
    return [(row, row.to_json()) for row in select(validated, **filters)], [
        (row, row.to_json()) for row in select(fast, **filters)
    ]


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    histories(),
    st.lists(st.tuples(st.integers(0, 1000), st.sampled_from(sorted(DAMAGES))), max_size=3),
    st.randoms(use_true_random=False),
)
def test_the_fast_fold_gives_the_rows_of_the_validated_fold(
    events: list[Any], damages: list[tuple[int, str]], rng: Any
) -> None:
    events = events + events[: len(events) // 3]  # redeliveries
    rng.shuffle(events)
    validated, fast = _both_ways(_records(events, damages))
    assert fast == validated


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.sampled_from(TABLES), st.booleans())
def test_filtering_by_the_key_gives_the_rows_of_the_validated_fold(
    events: list[Any], table: tuple[str, str | None], with_partition: bool
) -> None:
    filters: dict[str, Any] = {"table": table[0]}
    if with_partition and table[1] is not None:
        filters["partition"] = table[1]
    validated, fast = _both_ways(_records(events, []), **filters)
    assert fast == validated


def test_undamaged_records_never_reach_the_models() -> None:
    v = vacuum()
    other = vacuum(occurred_at=T0 + timedelta(minutes=1), lock_snapshot=[lock(1)])
    merged = delayed_vacuums(v, other, attempt=2)
    carried = unchanged_vacuums(v, other, attempt=2, checks=3)
    events = [v, delay(v, 1), merged, carried, started(v), done(v), rejected(v)]
    decoder = FastDecoder(SETTINGS)
    assert len(list(decoder.records(_records(events, [])))) == 7
    assert decoder.fallbacks == 0


# Spellings the fast decoder reads as the models do; every other damage is left to the models.
# (A vacuum event has no causation header, and no due time to check.)
READ_BY_BOTH = {"ce_time_offset", "other_causation", "other_due_time"}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_every_damage_goes_to_the_models(damage: str) -> None:
    v = vacuum()
    decoder = FastDecoder(SETTINGS)
    list(decoder.records(_records([v], [(0, damage)])))
    assert decoder.fallbacks == (0 if damage in READ_BY_BOTH else 1)


UNCHANGED_DAMAGES = sorted(name for name in DAMAGES if name.startswith("unchanged_"))


@pytest.mark.parametrize("damage", [*UNCHANGED_DAMAGES, "waiting_check_error", "waiting_open_txns"])
def test_every_damage_to_an_unchanged_summary_goes_to_the_models(damage: str) -> None:
    """Each breaks the summary (or only spells a time in another zone, which the models convert)."""
    v = vacuum(lock_snapshot=[lock(1), lock(2)])
    other = vacuum(occurred_at=T0 + timedelta(minutes=1))
    decoder = FastDecoder(SETTINGS)
    records = _records([unchanged_vacuums(v, other, attempt=2, checks=3)], [(0, damage)])
    assert len(list(decoder.records(records))) == 1
    assert decoder.fallbacks == 1


def test_filtering_by_the_key_skips_other_tables_unread() -> None:
    orders, people = vacuum(table="sales.orders"), vacuum(table="hr.people", partition=None)
    decoder = FastDecoder(SETTINGS, table="sales.orders")
    records = _records([orders, people, delay(people, 1)], [])
    assert [event.table for event in decoder.records(records)] == ["sales.orders"]
    assert decoder.skipped == 2


def test_a_seventh_digit_of_a_second_is_cut_as_the_models_cut_it() -> None:
    v = vacuum()
    [record] = _records([v], [(0, "seven_digits")])
    validated, fast = _both_ways([record])
    assert fast == validated and fast[0][0].vacuum_time == v.occurred_at


def _wire_fields(struct: type[Any]) -> dict[str, bool]:
    return {field.name: field.required for field in msgspec.structs.fields(struct)}


def _model_fields(model: type[StrictModel]) -> dict[str, bool]:
    required = set(getattr(model, "wire_required", ()))
    return {name: info.is_required() or name in required for name, info in model.model_fields.items()}


@pytest.mark.parametrize(
    ("model", "struct"),
    [
        *((EVENT_CLASS_BY_TYPE_NAME[name], struct) for name, struct in WIRE_STRUCTS.items()),
        (LockSnapshotEntry, WireLock),
        (WaitingVacuum, WireWaitingVacuum),
        (UnchangedWaiting, WireUnchangedWaiting),
        (RemovedDirectory, WireDirectory),
        (SourceRecord, WireSourceRecord),
        (RawHeader, WireRawHeader),
    ],
)
def test_each_wire_struct_declares_its_models_fields(model: type[StrictModel], struct: type[Any]) -> None:
    """A field added to a model must be added to its wire struct, else every such event takes the slow path."""
    assert _wire_fields(struct) == _model_fields(model)


def test_wire_times_are_utc_like_the_models() -> None:
    v = vacuum(occurred_at=T0.astimezone(timezone(timedelta(hours=2))))
    validated, fast = _both_ways(_records([v], []))
    assert fast == validated and fast[0][1]["vacuum_time"] == "2025-03-14T09:00:00Z"


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_each_damage_to_each_kind_of_event_gives_the_validated_rows(damage: str) -> None:
    v = vacuum(lock_snapshot=[lock(1), lock(2)])
    waiting = vacuum(table="hr.people", partition=None, occurred_at=T0 + timedelta(minutes=1))
    other = vacuum(occurred_at=T0 + timedelta(minutes=2))
    asked = requested()
    all_stuck = [
        WaitingVacuum(
            vacuum=parked, attempt=3, locks_held=parked.lock_snapshot, stuck=True, stuck_since=T0 + timedelta(hours=1)
        )
        for parked in (v, other)
    ]
    histories: list[list[Any]] = [
        [v, delay(v, 1), delay(v, 2, stuck=True, stuck_since=v.occurred_at), started(v, attempt=3), rejected(v)],
        [asked, vacuum_started(asked), vacuum_failed(asked)],
        [asked, vacuum_started(asked), vacuum(request_id=asked.event_id)],
        [waiting, delay(waiting, 1)],
        [v, started(v), done(v)],
        [v, delay(v, 1), delayed_vacuums(v, other, attempt=2), done(v, attempts=3)],
        [delayed_vacuums(v, other, waiting=[*_waiting(v, other)], merged_from=[v.event_id, other.event_id])],
        [v, other, unchanged_vacuums(v, other, attempt=2, checks=3), done(v, attempts=6)],
        [delayed_vacuums(v, other, waiting=all_stuck, unchanged=unchanged(all_stuck, 1))],
    ]
    for history in histories:
        for position in range(len(history)):
            validated, fast = _both_ways(_records(history, [(position, damage)]))
            assert fast == validated, f"{damage} on {type(history[position]).__name__}"


def _waiting(stuck: Any, failing: Any) -> list[WaitingVacuum]:
    """One stuck vacuum holding a lock, and one whose check failed."""
    return [
        WaitingVacuum(
            vacuum=stuck, attempt=4, locks_held=stuck.lock_snapshot[:1], stuck=True, stuck_since=T0 + timedelta(hours=1)
        ),
        WaitingVacuum(vacuum=failing, attempt=1, locks_held=[], check_error="timed out", open_txns=[7]),
    ]
