"""Which other tables and partitions share a vacuum's directory, and which locks are theirs (rule 8).

Hive keeps no index from a location to the names that use it, so :func:`resolve_sharers` asks the
metastore: the tables of the vacuum's database with their locations (``get_all_tables`` and one
``get_table_objects_by_name``), and the partitions with their locations (``get_partitions``) of the
vacuum's own table and of every other partitioned table whose location overlaps the directory. That is
3 calls for a partitioned table, 2 for an unpartitioned one, plus one per other partitioned table that
overlaps (normally none).

Not seen: a table of another database, or a partition of another table whose own location does not
overlap, that points into the directory (finding them would take a scan of every database and every
partition list of the metastore at each vacuum and each cleanup).

The vacuum resolves the set at its start (to take the vacuum lock on every name) and after its commit
(for its lock snapshot, carried in ``VacuumCommitted.shared_locations``); the cleaner resolves it again
at clean time and fails closed when it cannot.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from acidclean.schemas.common import SharedLocation
from acidclean.shared.acid.locations import locations_overlap
from acidclean.shared.acid.partition_names import lock_covers_partition
from acidclean.shared.metastore import LockInfo, TableInfo


class LocationCatalog(Protocol):
    """The metastore calls :func:`resolve_sharers` makes."""

    def get_all_tables(self, db: str) -> list[str]: ...

    def get_tables(self, db: str, tables: Sequence[str]) -> dict[str, TableInfo]: ...

    def partition_locations(self, table: TableInfo) -> dict[str, str]: ...


def _no_count(call: str) -> None:
    return None


def resolve_sharers(
    catalog: LocationCatalog,
    db: str,
    table: str,
    partition: str | None,
    location: str,
    count: Callable[[str], None] = _no_count,
) -> tuple[SharedLocation, ...]:
    """Every other table or partition of ``db`` whose location overlaps ``location`` (the directory of
    ``db.table`` ``partition``), sorted; raises what the metastore raises (callers fail closed)."""
    own_table = table.lower()
    count("get_all_tables")
    names = catalog.get_all_tables(db)
    count("get_tables")
    tables = catalog.get_tables(db, names) if names else {}
    found: dict[tuple[str, str | None], SharedLocation] = {}
    for name, info in sorted(tables.items()):
        name = name.lower()
        if info.partition_keys:
            if name != own_table and not locations_overlap(info.location, location):
                continue
            count("get_partitions")
            for spec, where in catalog.partition_locations(info).items():
                if locations_overlap(where, location):
                    found[(name, spec)] = SharedLocation(table=f"{db.lower()}.{name}", partition=spec, location=where)
        elif name != own_table and locations_overlap(info.location, location):
            found[(name, None)] = SharedLocation(table=f"{db.lower()}.{name}", partition=None, location=info.location)
    own = (own_table, partition)
    return tuple(
        sharer for key, sharer in sorted(found.items(), key=lambda item: (item[0][0], item[0][1] or "")) if key != own
    )


def on_shared_location(lock: LockInfo, sharers: Iterable[SharedLocation]) -> bool:
    """Whether ``lock`` is on one of ``sharers`` (for a partition: on it in any spelling, or on its whole
    table), names compared without case."""
    locked = f"{lock.db}.{lock.table or ''}".lower()
    return any(
        sharer.table.lower() == locked and lock_covers_partition(lock.partition, sharer.partition) for sharer in sharers
    )


def sharer_tables(sharers: Iterable[SharedLocation]) -> list[tuple[str, str]]:
    """The distinct (database, table) pairs of ``sharers``, lower case, in order."""
    seen: dict[tuple[str, str], None] = {}
    for sharer in sharers:
        db, _, name = sharer.table.lower().partition(".")
        seen.setdefault((db, name), None)
    return list(seen)


def merge_sharers(*groups: Iterable[SharedLocation]) -> tuple[SharedLocation, ...]:
    """The union of several resolutions (the vacuum's, the cleaner's), one entry per name."""
    merged: dict[tuple[str, str | None], SharedLocation] = {}
    for group in groups:
        for sharer in group:
            merged.setdefault((sharer.table.lower(), sharer.partition), sharer)
    return tuple(merged[key] for key in sorted(merged, key=lambda key: (key[0], key[1] or "")))
