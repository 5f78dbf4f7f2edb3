"""No bytes on a topic can crash a consumer: every record decodes or becomes a publishable dead letter."""

from __future__ import annotations

import base64
import json
import random
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_support import examples

from acidclean.schemas.events import EVENT_CLASSES, CleanupRejected
from acidclean.shared.bus.codec import decode, encode
from acidclean.shared.bus.records import RawRecord

from .factories import delay, one_of_each, vacuum

NOW = datetime(2025, 6, 1, tzinfo=timezone.utc)
CASES = examples(10_000)  # seeded cases of the two loops below: 10,000 under the ci profile, 500 under fast


def _decode(record: RawRecord) -> Any:
    return decode(record, rejected_by="fuzz", tenant="fuzz", now=lambda: NOW)


def _check(record: RawRecord) -> bool:
    """Decode must return an event; a rejection must carry the raw record and itself be publishable.

    Returns whether the record was rejected.
    """
    result = _decode(record)
    assert isinstance(result, EVENT_CLASSES)
    if not isinstance(result, CleanupRejected) or result.source.offset != record.offset:
        return False
    assert result.source.value_b64 == (None if record.value is None else base64.b64encode(record.value).decode())
    assert result.source.key_b64 == (None if record.key is None else base64.b64encode(record.key).decode())
    out = encode(result)
    dead_letter = RawRecord("dlt", 0, 0, out.key, out.value, tuple(out.headers))
    assert _decode(dead_letter) == result
    return True


def _valid_records() -> list[RawRecord]:
    events = [*one_of_each(), delay(vacuum(partition=None), attempt=3)]
    return [
        RawRecord("acid.vacuum.committed", 1, index, out.key, out.value, tuple(out.headers))
        for index, out in ((i, encode(e)) for i, e in enumerate(events))
    ]


def _mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        position = rng.randrange(len(data) + 1)
        choice = rng.random()
        if choice < 0.4 and data:
            data[min(position, len(data) - 1)] = rng.randrange(256)
        elif choice < 0.7:
            data[position:position] = rng.randbytes(rng.randint(1, 3))
        else:
            del data[position : position + rng.randint(1, 8)]
    return bytes(data)


JSON_REPLACEMENTS: list[Any] = [
    None,
    0,
    -1,
    2**70,
    1.5,
    "",
    "x" * 5000,
    [],
    {},
    True,
    "2025-01-01T00:00:00",
    "../../etc",
    {"nested": [1, {"a": None}]},
]


def _mutate_json(rng: random.Random, value: bytes) -> bytes:
    body = json.loads(value)
    node: Any = body
    # walk down to a random object or array inside the event, then damage one member
    for _ in range(rng.randint(0, 3)):
        children = list(node.values()) if isinstance(node, dict) else node
        containers = [child for child in children if isinstance(child, (dict, list)) and child]
        if not containers:
            break
        node = rng.choice(containers)
    if isinstance(node, dict) and node:
        name = rng.choice(sorted(node))
        action = rng.random()
        if action < 0.3:
            del node[name]
        elif action < 0.4:
            node[name + "_extra"] = 1
        else:
            node[name] = rng.choice(JSON_REPLACEMENTS)
    elif isinstance(node, list) and node:
        node[rng.randrange(len(node))] = rng.choice(JSON_REPLACEMENTS)
    return json.dumps(body).encode()


def _mutate(rng: random.Random, record: RawRecord) -> RawRecord:
    kind = rng.randrange(5)
    if kind == 0:
        return replace(record, value=_mutate_bytes(rng, record.value or b""))
    if kind == 1:
        return replace(record, value=_mutate_json(rng, record.value or b"{}"))
    if kind == 2:
        return replace(record, key=rng.choice([None, b"", _mutate_bytes(rng, record.key or b"")]))
    headers = list(record.headers)
    if kind == 3 and headers:
        index = rng.randrange(len(headers))
        name, value = headers[index]
        headers[index] = (name, rng.choice([None, b"", _mutate_bytes(rng, value or b"")]))
    elif headers:
        del headers[rng.randrange(len(headers))]
    return replace(record, headers=tuple(headers))


def test_ten_thousand_random_byte_strings_never_escape_the_decoder() -> None:
    rng = random.Random(20250314)
    template = _valid_records()[0]
    rejected = 0
    for offset in range(CASES):
        junk = rng.randbytes(rng.choice([0, 1, 8, 64, 700]))
        where = offset % 3
        record = replace(
            template,
            offset=offset,
            value=junk if where == 0 else template.value,
            key=junk if where == 1 else template.key,
            headers=template.headers if where != 2 else (*template.headers[:3], ("ce_type", junk)),
        )
        rejected += _check(record)
    assert rejected == CASES  # random bytes never make a valid event


def test_ten_thousand_mutated_valid_events_decode_or_become_dead_letters() -> None:
    rng = random.Random(7)
    valid = _valid_records()
    rejected = 0
    for offset in range(CASES):
        rejected += _check(replace(_mutate(rng, rng.choice(valid)), offset=offset))
    # some mutations are harmless (an unrelated header emptied); most are not
    assert CASES * 0.6 < rejected < CASES


@settings(max_examples=examples(300), deadline=None)
@given(
    key=st.none() | st.binary(max_size=64),
    value=st.none() | st.binary(max_size=256) | st.text(max_size=256).map(str.encode),
    headers=st.lists(
        st.tuples(
            st.sampled_from(
                [
                    "ce_type",
                    "ce_id",
                    "ce_specversion",
                    "ce_time",
                    "ce_subject",
                    "correlation_id",
                    "x-due-at",
                    "other",
                    "content-type",
                ]
            ),
            st.none() | st.binary(max_size=40),
        ),
        max_size=10,
    ),
)
def test_arbitrary_records_never_escape_the_decoder(
    key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]]
) -> None:
    assert _check(RawRecord("t", 0, 1, key, value, tuple(headers)))
