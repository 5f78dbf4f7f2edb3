"""The other names of a vacuum's directory and their locks, at clean time (safety rule 8).

The vacuum carries the tables and partitions that shared its directory when it committed
(``VacuumCommitted.shared_locations``, resolved after its rename). The cleaner adds, just before it
deletes, every other partition of the vacuum's own table that holds a lock acquired before the commit
and missing from the snapshot, located in one metastore call
(:func:`acidclean.consumers.rules.readiness.lock_names_to_locate`): that covers an event from a vacuum
that did not resolve the names (older acidclean) and an alias added since, at no cost when no such lock
exists. A lock name the metastore does not know is counted as a name of the directory (fail safe). It
then lists the locks of each other table among them (the vacuum's own table's locks are the check's own
list). :func:`acidclean.consumers.rules.readiness.locks_missing_from_snapshot` decides with them. A
metastore that does not answer raises: the caller fails closed.

Not re-resolved here: another table created on the directory after the vacuum's resolution (its
readers locked after the commit, so they read the new directory; rule 2).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from acidclean.consumers.rules.readiness import lock_names_to_locate
from acidclean.schemas.common import SharedLocation
from acidclean.schemas.events import VacuumCommitted
from acidclean.shared.acid.locations import locations_overlap
from acidclean.shared.acid.partition_names import lock_covers_partition
from acidclean.shared.location_sharing import merge_sharers, sharer_tables
from acidclean.shared.metastore import LockInfo, TableInfo


class DirectoryCatalog(Protocol):
    """The metastore calls :func:`directory_locks` makes."""

    def partitions_located(self, table: TableInfo, names: Sequence[str]) -> dict[str, str]: ...

    def partition_locations(self, table: TableInfo) -> dict[str, str]: ...

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
    committed_by: datetime,
    count: Callable[[str], None],
) -> DirectoryLocks:
    """The names sharing ``table``'s directory (``table``: the vacuum's, narrowed to its partition) and
    their tables' locks; ``own_locks``: the vacuum's own table's, already listed. Raises ``MetastoreError``."""
    db, name = table.db.lower(), table.table.lower()
    known = tuple(vacuum.shared_locations or ())
    names = lock_names_to_locate(vacuum.lock_snapshot, own_locks, vacuum.partition, committed_by, known)
    located: dict[str, str] = {}
    if names:
        count("get_partitions_by_names")
        located = catalog.partitions_located(table, names)
        if len(located) < len(names):  # a lock name spelled otherwise (Hive 3 lower-cases them): ask for all
            count("get_partitions")
            located = {
                spec: where
                for spec, where in catalog.partition_locations(table).items()
                if any(lock_covers_partition(lock_name, spec) for lock_name in names)
            }
    found = [
        SharedLocation(table=f"{db}.{name}", partition=spec, location=where)
        for spec, where in located.items()
        if locations_overlap(where, table.location)
    ]
    # A locked name no partition answers to is counted as the directory's (it only makes the cleanup wait).
    unknown = [
        SharedLocation.model_construct(table=f"{db}.{name}", partition=lock_name, location="")
        for lock_name in names
        if not any(lock_covers_partition(lock_name, spec) for spec in located)
    ]
    sharers = merge_sharers(known, found, unknown)
    locks = list(own_locks)
    for scope in sharer_tables(sharers):
        if scope != (db, name):
            count("show_locks")
            locks.extend(catalog.show_locks(*scope))
    return DirectoryLocks(sharers, tuple(locks))
