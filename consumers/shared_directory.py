"""The other names of a vacuum's directory and their locks, asked again at clean time (safety rule 8).

The vacuum carries the tables and partitions that shared its directory when it committed
(``VacuumCommitted.shared_locations``); the cleaner resolves them again just before it deletes, so an
alias added since, or an event from a vacuum that did not resolve them, is covered too, and keeps the
union. It lists the locks of each other table among them (the vacuum's own table's locks are the
check's own list). :func:`acidclean.consumers.rules.readiness.locks_missing_from_snapshot` decides with
them. A metastore that does not answer raises: the caller fails closed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from acidclean.schemas.common import SharedLocation
from acidclean.schemas.events import VacuumCommitted
from acidclean.shared.location_sharing import LocationCatalog, merge_sharers, resolve_sharers, sharer_tables
from acidclean.shared.metastore import LockInfo, TableInfo


class DirectoryCatalog(LocationCatalog, Protocol):
    """:class:`LocationCatalog` plus the lock list."""

    def show_locks(
        self, db: str | None = None, table: str | None = None, partition: str | None = None
    ) -> list[LockInfo]: ...


@dataclass(frozen=True)
class DirectoryLocks:
    """The other names of a directory and the locks of their tables."""

    sharers: tuple[SharedLocation, ...]
    locks: tuple[LockInfo, ...]


def directory_locks(
    catalog: DirectoryCatalog,
    table: TableInfo,
    vacuum: VacuumCommitted,
    own_locks: Sequence[LockInfo],
    count: Callable[[str], None],
) -> DirectoryLocks:
    """The names sharing ``table``'s directory (the vacuum's and the metastore's now) and their locks;
    ``own_locks``: the vacuum's own table's, already listed. Raises ``MetastoreError``."""
    db, name = table.db.lower(), table.table.lower()
    resolved = resolve_sharers(catalog, db, name, vacuum.partition, table.location, count)
    sharers = merge_sharers(vacuum.shared_locations or (), resolved)
    locks = list(own_locks)
    for scope in sharer_tables(sharers):
        if scope != (db, name):
            count("show_locks")
            locks.extend(catalog.show_locks(*scope))
    return DirectoryLocks(sharers, tuple(locks))
