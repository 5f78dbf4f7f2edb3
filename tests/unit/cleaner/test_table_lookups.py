"""The workers' table lookups merged into one metastore call at a time, each answered with its own
tables by a call that started after it was asked."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

from acidclean.consumers.table_lookups import TableLookups
from acidclean.shared.errors import MetastoreError
from acidclean.shared.metastore import TableInfo


def info(db: str, table: str) -> TableInfo:
    return TableInfo(db, table, f"/warehouse/{db}.db/{table}", {"transactional": "true"}, (), (), 1, ())


class SlowMetastore:
    """Answers each call once ``release`` is set; records the calls and the tables in each."""

    def __init__(self, absent: Sequence[str] = (), failing_dbs: Sequence[str] = ()) -> None:
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self.release = threading.Event()
        self.entered = threading.Event()
        self.absent, self.failing_dbs = set(absent), set(failing_dbs)
        self.concurrent = 0
        self.most_concurrent = 0
        self._lock = threading.Lock()

    def get_tables(self, db: str, tables: Sequence[str]) -> dict[str, TableInfo]:
        with self._lock:
            self.calls.append((db, tuple(tables)))
            self.concurrent += 1
            self.most_concurrent = max(self.most_concurrent, self.concurrent)
        self.entered.set()
        try:
            assert self.release.wait(10)
            if db in self.failing_dbs:
                raise MetastoreError(f"get_table_objects_by_name({db}) failed")
            return {name.lower(): info(db, name.lower()) for name in tables if name not in self.absent}
        finally:
            with self._lock:
                self.concurrent -= 1

    def valid_write_ids_of(self, tables: Sequence[tuple[str, str]], txn_list: str) -> list[str]:
        return [f"{db}.{table}:{txn_list}" for db, table in tables]


def ask(
    lookups: TableLookups, metastore: SlowMetastore, db: str, tables: Sequence[str], out: dict[str, object]
) -> threading.Thread:
    def run() -> None:
        try:
            out[",".join(tables)] = lookups.get_tables(metastore, db, tables)
        except MetastoreError as error:
            out[",".join(tables)] = error

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def wait_until(condition: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.005)
    assert condition(), "timed out"  # type: ignore[operator]


def test_lookups_asked_during_a_call_go_out_together_in_the_next_one_each_answered_with_its_own_tables() -> None:
    metastore = SlowMetastore(absent=["gone"])
    calls = []
    lookups = TableLookups(called=lambda: calls.append(1))
    out: dict[str, object] = {}
    first = ask(lookups, metastore, "sales", ["a", "b"], out)
    assert metastore.entered.wait(5)
    # Asked while the first call is under way: they wait for it, then share one call per database.
    later = [
        ask(lookups, metastore, "sales", ["b", "c"], out),
        ask(lookups, metastore, "sales", ["d", "gone"], out),
        ask(lookups, metastore, "hr", ["people"], out),
    ]
    wait_until(lambda: len(lookups._queued) == 3)
    assert metastore.calls == [("sales", ("a", "b"))]  # nothing else asked while the first call runs
    metastore.release.set()
    for thread in [first, *later]:
        thread.join(10)
    assert metastore.calls[0] == ("sales", ("a", "b"))
    assert sorted(metastore.calls[1:]) == [("hr", ("people",)), ("sales", ("b", "c", "d", "gone"))]
    assert metastore.most_concurrent == 1
    assert len(calls) == 3
    assert set(out["a,b"]) == {"a", "b"}  # type: ignore[arg-type]
    assert set(out["b,c"]) == {"b", "c"}  # type: ignore[arg-type]
    assert set(out["d,gone"]) == {"d"}  # type: ignore[arg-type]  # absent: not in the answer, as alone
    assert set(out["people"]) == {"people"}  # type: ignore[arg-type]


def test_a_failed_call_fails_every_lookup_it_carried_and_only_those() -> None:
    metastore = SlowMetastore(failing_dbs=["hr"])
    lookups = TableLookups()
    out: dict[str, object] = {}
    first = ask(lookups, metastore, "sales", ["a"], out)
    assert metastore.entered.wait(5)
    later = [ask(lookups, metastore, "hr", ["people"], out), ask(lookups, metastore, "sales", ["b"], out)]
    wait_until(lambda: len(lookups._queued) == 2)
    metastore.release.set()
    for thread in [first, *later]:
        thread.join(10)
    assert isinstance(out["people"], MetastoreError)
    assert set(out["a"]) == {"a"} and set(out["b"]) == {"b"}  # type: ignore[arg-type]


def test_one_lookup_alone_is_one_call_with_its_tables_and_the_other_calls_pass_through() -> None:
    metastore = SlowMetastore()
    metastore.release.set()
    lookups = TableLookups()
    merged = lookups.through(metastore)
    assert set(merged.get_tables("sales", ["A", "b"])) == {"a", "b"}
    assert metastore.calls == [("sales", ("A", "b"))]
    assert merged.valid_write_ids_of([("sales", "a")], "5:5::") == ["sales.a:5:5::"]


def test_an_error_other_than_the_metastores_reaches_the_caller() -> None:
    class Broken:
        def get_tables(self, db: str, tables: Sequence[str]) -> dict[str, TableInfo]:
            raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        TableLookups().get_tables(Broken(), "sales", ["a"])  # type: ignore[arg-type]
    # and the next lookup is not stuck behind it
    metastore = SlowMetastore()
    metastore.release.set()
    lookups = TableLookups()
    with pytest.raises(ValueError):
        lookups.get_tables(Broken(), "sales", ["a"])  # type: ignore[arg-type]
    assert set(lookups.get_tables(metastore, "sales", ["b"])) == {"b"}
