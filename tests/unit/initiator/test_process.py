"""The initiator's decisions with fakes for the metastore, the storage and the bus (no Kafka here):
a failing metastore or storage keeps a key's offsets for a later try; a table turned off, gone or
below the thresholds is decided without a request; a key another process owns is never requested."""

from __future__ import annotations

from typing import Any

import pytest

from acidclean.producers.initiator.process import InitiatorProcess, key_partition
from acidclean.schemas.events import VacuumRequested
from acidclean.shared.acid.state import ListedFile, Listing
from acidclean.shared.errors import ConfigurationError, MetastoreError, TableNotFoundError
from acidclean.shared.metastore import TableInfo
from acidclean.shared.settings import load_settings

KEY = "default/db.t"


class FakeMetastore:
    def __init__(self, parameters: dict[str, str] | None = None) -> None:
        self.parameters = {"transactional": "true", **(parameters or {})}
        self.failures: list[Exception] = []
        self.calls: list[str] = []

    def _maybe_fail(self, call: str) -> None:
        self.calls.append(call)
        if self.failures:
            raise self.failures.pop(0)

    def get_table(self, db: str, table: str, partition: str | None = None) -> TableInfo:
        self._maybe_fail("get_table")
        return TableInfo(db, table, "/warehouse/db.db/t", dict(self.parameters), (), (), 1, ())

    def valid_write_ids(self, db: str, table: str) -> str:
        self._maybe_fail("valid_write_ids")
        return f"{db}.{table}:20:9223372036854775807::"


class FakeBus:
    def __init__(self) -> None:
        self.published: list[Any] = []

    def publish(self, topic: str, event: Any) -> None:
        self.published.append((topic, event))


def _process(metastore: FakeMetastore, deltas: int = 11) -> tuple[InitiatorProcess, FakeBus, list[int]]:
    listed: list[int] = []

    def lister(location: str) -> Listing:
        listed.append(1)
        names = [f"delta_{w:07d}_{w:07d}_0000" for w in range(1, deltas + 1)]
        return Listing(tuple(ListedFile(f"{name}/bucket_00000", 100) for name in names), tuple(names))

    process = InitiatorProcess(load_settings(environ={}), lister=lister, metastore=metastore, clock=lambda: 0.0)
    bus = FakeBus()
    process.bus = bus  # type: ignore[assignment]
    process.deltas.owned = {0}
    process.deltas.key_partition[KEY] = 0
    process.deltas.locations[KEY] = "/warehouse/db.db/t"
    process.deltas.pending[KEY] = []
    process.core.dirty.add(KEY)
    return process, bus, listed


def test_eleven_deltas_yield_one_request_with_the_reason_and_figures() -> None:
    process, bus, listed = _process(FakeMetastore())
    process._decide_dirty("event")
    ((topic, request),) = bus.published
    assert topic == "acid.vacuum.requests" and isinstance(request, VacuumRequested)
    assert request.figures.delta_count == 11 and request.figures.delta_bytes == 1100
    assert request.compaction_type == "MAJOR"  # no base
    assert request.reason == "11 deltas > hive.compactor.delta.num.threshold 10 (no base)"
    assert KEY not in process.core.dirty and listed == [1]
    process.core.observe_delta(KEY, "delta_0000012_0000012_0000", 1)
    process._decide_dirty("event")
    assert len(bus.published) == 1  # in flight: no second request


def test_a_metastore_failure_keeps_the_key_for_a_later_try() -> None:
    metastore = FakeMetastore()
    metastore.failures = [MetastoreError("metastore at thrift://x:9083 did not answer")]
    process, bus, _ = _process(metastore)
    process._decide_dirty("event")
    assert bus.published == [] and KEY in process.core.dirty and process._retry_at[KEY] == 5.0
    process._clock = lambda: 6.0
    process._decide_dirty("event")
    assert len(bus.published) == 1 and KEY not in process.core.dirty


@pytest.mark.parametrize(
    ("parameters", "failure"),
    [
        ({"NO_AUTO_COMPACTION": "true"}, None),
        ({"compactorthreshold.hive.compactor.delta.num.threshold": "20"}, None),
        ({"transactional": "false"}, None),
        ({}, TableNotFoundError("db.t does not exist")),
        ({"compactorthreshold.hive.compactor.delta.num.threshold": "x"}, None),
    ],
)
def test_tables_that_need_nothing_are_decided_without_a_request(
    parameters: dict[str, str], failure: Exception | None
) -> None:
    metastore = FakeMetastore(parameters)
    metastore.failures = [failure] if failure else []
    process, bus, _ = _process(metastore)
    process._decide_dirty("event")
    assert bus.published == [] and KEY not in process.core.dirty


def test_a_key_of_another_process_is_never_requested() -> None:
    process, bus, listed = _process(FakeMetastore())
    process.deltas.owned = {1}
    process._decide_dirty("event")
    assert bus.published == [] and listed == [] and KEY not in process.core.dirty


def test_requests_wait_until_the_tail_has_read_the_topics() -> None:
    process, bus, _ = _process(FakeMetastore())
    process.lifecycle.barrier = {("acid.vacuum.requests", 0): 3}
    process.lifecycle.positions = {("acid.vacuum.requests", 0): 2}
    process._decide_dirty("event")
    assert bus.published == [] and KEY in process.core.dirty
    process.lifecycle.positions[("acid.vacuum.requests", 0)] = 3
    process._decide_dirty("event")
    assert len(bus.published) == 1


def test_the_sweep_finds_owners_with_librdkafkas_partitioner_only() -> None:
    assert key_partition("default/db.t", 6) == key_partition("default/db.t", 6) < 6
    with pytest.raises(ConfigurationError, match="consistent partitioner"):
        key_partition("default/db.t", 6, "murmur2_random")
