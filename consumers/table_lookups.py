"""Table lookups of concurrent batches, merged into one metastore call at a time.

Every batch of cleanups asks the metastore for its tables (``get_table_objects_by_name``), and on a
metastore that loads each table field by field from its database, that call is most of the
metastore's work for a cleanup. With several worker threads, the batches are smaller and their
lookups reached the metastore at once; measured on the local stack (Hive 2.3 on Derby, two cores),
the metastore then spent 2.4-2.7 ms of CPU a table with 4 threads against 1.7 ms with 1, so threads
bought little. Here a lookup asked while another is under way waits for it to end, and the lookups
queued meanwhile go out together in the next call (one per database), which answers each its own
tables: one call at a time, as large as the waiting allows.

Nothing about freshness changes: a lookup is answered only by a call that started after it was asked.
A failed call fails every lookup it carried, each as its own call would have (the caller then asks
table by table, and fails closed).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from acidclean.shared.metastore import TableInfo


class TableObjectsMetastore(Protocol):
    def get_tables(self, db: str, tables: Sequence[str]) -> dict[str, TableInfo]: ...

    def valid_write_ids_of(self, tables: Sequence[tuple[str, str]], txn_list: str) -> list[str]: ...


@dataclass
class _Lookup:
    db: str
    tables: tuple[str, ...]
    found: dict[str, TableInfo] | None = None
    error: BaseException | None = None
    done: bool = False

    def answer(self) -> dict[str, TableInfo]:
        if self.error is not None:
            raise self.error
        assert self.found is not None
        return self.found


@dataclass
class TableLookups:
    """Shared by a cleaner's worker threads. ``called`` is told of each metastore call made."""

    called: Callable[[], None] = lambda: None
    _guard: threading.Condition = field(default_factory=threading.Condition)
    _queued: list[_Lookup] = field(default_factory=list)
    _calling: bool = False

    def get_tables(self, metastore: TableObjectsMetastore, db: str, tables: Sequence[str]) -> dict[str, TableInfo]:
        """``metastore.get_tables(db, tables)``, merged with the lookups of other threads asked while a
        call was under way. The thread that makes a call makes it with its own ``metastore``."""
        lookup = _Lookup(db, tuple(tables))
        with self._guard:
            self._queued.append(lookup)
            while self._calling and not lookup.done:
                self._guard.wait()
            if lookup.done:
                return lookup.answer()
            self._calling = True
            carried, self._queued = self._queued, []
        try:
            self._call(metastore, carried)
        finally:
            with self._guard:
                self._calling = False
                self._guard.notify_all()
        return lookup.answer()

    def through(self, metastore: TableObjectsMetastore) -> TableObjectsMetastore:
        """``metastore`` with its table lookups merged here (its other calls as they are)."""
        return _Merged(self, metastore)

    def _call(self, metastore: TableObjectsMetastore, carried: list[_Lookup]) -> None:
        by_db: dict[str, list[_Lookup]] = {}
        for lookup in carried:
            by_db.setdefault(lookup.db, []).append(lookup)
        try:
            for db, lookups in by_db.items():
                names = list(dict.fromkeys(name for lookup in lookups for name in lookup.tables))
                try:
                    self.called()
                    found = metastore.get_tables(db, names)
                except Exception as error:
                    for lookup in lookups:
                        lookup.error = error
                    continue
                for lookup in lookups:
                    lookup.found = {
                        name.lower(): found[name.lower()] for name in lookup.tables if name.lower() in found
                    }
        finally:
            for lookup in carried:
                if lookup.found is None and lookup.error is None:  # interrupted before its database
                    lookup.error = RuntimeError("the table lookup it was merged into did not finish")
                lookup.done = True


class _Merged:
    def __init__(self, lookups: TableLookups, metastore: TableObjectsMetastore) -> None:
        self._lookups, self._metastore = lookups, metastore

    def get_tables(self, db: str, tables: Sequence[str]) -> dict[str, TableInfo]:
        return self._lookups.get_tables(self._metastore, db, tables)

    def valid_write_ids_of(self, tables: Sequence[tuple[str, str]], txn_list: str) -> list[str]:
        return self._metastore.valid_write_ids_of(tables, txn_list)
