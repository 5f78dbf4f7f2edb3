"""Rule 8 in the vacuum: its lock snapshot and its vacuum lock cover every name of its directory."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acidclean.producers.exclusion import vacuum_lock_component
from acidclean.producers.locks import lock_snapshot
from acidclean.producers.publish import complete_event
from acidclean.producers.shared_locations import describe_sharers, shared_vacuum_locks
from acidclean.shared.location_sharing import resolve_sharers
from acidclean.shared.metastore import LockInfo, TableInfo

pytestmark = pytest.mark.rule8

WAREHOUSE = "hdfs://nn:8020/warehouse/db.db"


def table(name: str, location: str, keys: tuple[str, ...] = ()) -> TableInfo:
    return TableInfo("db", name, location, {"transactional": "true"}, keys, (), 1, ())


class Catalog:
    """Tables, partitions with their locations, and locks; counts the calls."""

    def __init__(
        self, tables: dict[str, TableInfo], partitions: dict[str, dict[str, str]], locks: Sequence[LockInfo] = ()
    ):
        self.tables, self.partitions, self.locks = tables, partitions, list(locks)
        self.calls: list[str] = []

    def get_all_tables(self, db: str) -> list[str]:
        self.calls.append("get_all_tables")
        return list(self.tables)

    def get_tables(self, db: str, names: Sequence[str]) -> dict[str, TableInfo]:
        self.calls.append("get_tables")
        return {name: self.tables[name] for name in names}

    def partition_locations(self, info: TableInfo) -> dict[str, str]:
        self.calls.append(f"get_partitions {info.table}")
        return dict(self.partitions.get(info.table, {}))

    def show_locks(
        self, db: str | None = None, name: str | None = None, partition: str | None = None
    ) -> list[LockInfo]:
        self.calls.append(f"show_locks {name}")
        return [lock for lock in self.locks if lock.table == name]

    def valid_txn_list(self) -> str:
        return f"41:{2**63 - 1}::"


def reader(lock_id: int, name: str, partition: str | None) -> LockInfo:
    return LockInfo(lock_id, 7, "db", name, partition, "SHARED_READ", "ACQUIRED", "alice", "h", 1_700_000_000_000, None)


def catalog(locks: Sequence[LockInfo] = ()) -> Catalog:
    return Catalog(
        {
            "t": table("t", f"{WAREHOUSE}/t", ("p",)),
            "t_copy": table("t_copy", f"{WAREHOUSE}/t/p=real/"),  # created on the same LOCATION
            "u": table("u", f"{WAREHOUSE}/u"),
            "v": table("v", f"{WAREHOUSE}/v", ("p",)),
        },
        {
            "t": {
                "p=real": f"{WAREHOUSE}/t/p=real",
                "p=latest": f"{WAREHOUSE}/t/p=real/",  # the alias
                "p=nested": f"{WAREHOUSE}/t/p=real/sub",  # inside it
                "p=real2": f"{WAREHOUSE}/t/p=real2",  # a prefix, not a directory
            },
            "v": {"p=1": f"{WAREHOUSE}/t/p=real"},  # another table's partition, its root elsewhere: not seen
        },
        locks,
    )


def test_the_sharers_are_the_alias_the_nested_partition_and_the_twin_table_in_three_calls() -> None:
    metastore = catalog()
    sharers = resolve_sharers(metastore, "db", "t", "p=latest", f"{WAREHOUSE}/t/p=real")
    assert [(s.table, s.partition) for s in sharers] == [
        ("db.t", "p=nested"),
        ("db.t", "p=real"),
        ("db.t_copy", None),
    ]
    assert metastore.calls == ["get_all_tables", "get_tables", "get_partitions t"]


@given(asked=st.sampled_from(["p=real", "p=latest", "P=LATEST"]))
def test_the_snapshot_of_either_name_holds_the_readers_of_both(asked: str) -> None:
    locks = [reader(1, "t", "p=real"), reader(2, "t", "p=latest"), reader(3, "t", None), reader(4, "t_copy", None)]
    locks += [reader(5, "t", "p=real2"), reader(6, "u", None)]
    metastore = catalog(locks)
    sharers = resolve_sharers(metastore, "db", "t", asked, f"{WAREHOUSE}/t/p=real")
    assert [entry.lock_id for entry in lock_snapshot(metastore, "db", "t", asked, sharers)] == [1, 2, 3, 4]  # type: ignore[arg-type]
    assert [entry.lock_id for entry in lock_snapshot(metastore, "db", "t", asked)] != [1, 2, 3, 4]  # type: ignore[arg-type]


def test_the_event_carries_the_sharers_and_their_locks(tmp_path: Path) -> None:
    metastore = catalog([reader(1, "t", "p=real"), reader(4, "t_copy", None)])
    draft = {
        "event_id": "6f0c9f4e-1d0a-5b1e-9c55-0ac1dc1e0002",
        "tenant": "default",
        "table": "db.t",
        "partition": "p=latest",
        "location": f"{WAREHOUSE}/t/p=real/",
        "compaction_type": "MAJOR",
        "new_directories": ["base_0000004"],
        "obsolete_directories": [],
        "highest_write_id": 4,
        "vacuum_job_id": "job-1",
    }
    event = complete_event(draft, metastore)  # type: ignore[arg-type]
    assert [entry.lock_id for entry in event.lock_snapshot] == [1, 4]
    assert [(s.table, s.partition) for s in event.shared_locations or []] == [
        ("db.t", "p=nested"),
        ("db.t", "p=real"),
        ("db.t_copy", None),
    ]


def test_an_unshared_directory_adds_nothing_to_the_event() -> None:
    metastore = catalog()
    sharers = resolve_sharers(metastore, "db", "t", "p=real2", f"{WAREHOUSE}/t/p=real2")
    assert sharers == () and shared_vacuum_locks(sharers) == [] and describe_sharers(sharers) == ""


def test_the_vacuum_lock_names_every_sharer_once() -> None:
    sharers = resolve_sharers(catalog(), "db", "t", "p=latest", f"{WAREHOUSE}/t/p=real")
    components = shared_vacuum_locks(sharers + sharers)
    assert components == [
        vacuum_lock_component("db", "t", "p=nested"),
        vacuum_lock_component("db", "t", "p=real"),
        vacuum_lock_component("db", "t_copy", None),
    ]
    assert "db.t partition p=real" in describe_sharers(sharers)
