"""The vacuum lock of a directory that several names share (safety rule 8).

A vacuum takes its vacuum lock (:mod:`acidclean.producers.exclusion`) on its own table or partition
and, in the same lock request, on every other table or partition whose location overlaps its directory
(:func:`acidclean.shared.location_sharing.resolve_sharers`). The metastore grants a request whole or
not at all, so two vacuums of one directory under two names (``p=real`` and its alias ``p=latest``)
never run at once, whichever name each was asked for: each one's request names the other's resource.

A shared directory is vacuumed, not refused: the alias is the name readers and initiators see, and its
deltas are the real partition's, so refusing would leave the directory to grow under one of its names
for ever. Covering every name's locks makes the vacuum through either name as safe as through the other.
"""

from __future__ import annotations

from collections.abc import Sequence

from acidclean.producers.exclusion import vacuum_lock_component
from acidclean.schemas.common import SharedLocation
from acidclean.shared.location_sharing import LocationCatalog, resolve_sharers
from acidclean.shared.metastore import LockRequestComponent, TableInfo


def sharers_of(catalog: LocationCatalog, info: TableInfo) -> tuple[SharedLocation, ...]:
    """The other names of ``info``'s directory (``info`` from ``get_table``, narrowed to its partition)."""
    return resolve_sharers(catalog, info.db, info.table, info.partition, info.location)


def shared_vacuum_locks(sharers: Sequence[SharedLocation]) -> list[LockRequestComponent]:
    """The vacuum lock components of ``sharers``, one per name, in a stable order."""
    components: dict[tuple[str, str, str | None], LockRequestComponent] = {}
    for sharer in sharers:
        db, _, table = sharer.table.lower().partition(".")
        components.setdefault((db, table, sharer.partition), vacuum_lock_component(db, table, sharer.partition))
    return [components[key] for key in sorted(components, key=lambda key: (key[0], key[1], key[2] or ""))]


def describe_sharers(sharers: Sequence[SharedLocation]) -> str:
    """`` (its directory is also db.t partition p=latest, db.t2)`` for messages, or empty."""
    if not sharers:
        return ""
    names = [sharer.table + (f" partition {sharer.partition}" if sharer.partition else "") for sharer in sharers]
    return f" (its directory is also {', '.join(names)})"
