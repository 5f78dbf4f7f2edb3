"""Which table a vacuum compacts, carried in ``VacuumCommitted.table_identity`` (safety rule 9).

A name says nothing about which table it names: a table dropped and created again under the same name
and location gets, as write ids restart at 1, the same directory names. The vacuum records the table's
identity (:class:`~acidclean.shared.metastore.TableIdentity`: Hive 4's table id where the client reads
it, else the create time; the location; a partition's create time) when it plans, before it lists the
directory, and confirms it after its commit; the cleaner deletes nothing under a table that is not it.

Create times have a resolution of one second, so a table created again within the second of the
original's creation would look the same. :func:`planned_identity` therefore reads the identity only
once the metastore's clock is past the second the table (or partition) was created in: any table
created under the name after that read has a later create time. The metastore's time comes from its
stamp of the vacuum lock's heartbeat (one clock, never this host's); where it gives none, two reads one
second apart by this host's monotonic clock prove the same. Almost always the table is older than the
current second and this costs one heartbeat and one ``show_locks``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from acidclean.schemas.common import VacuumedTable
from acidclean.shared.errors import MetastoreError, TableNotFoundError, VacuumFencedError
from acidclean.shared.metastore import Metastore, TableIdentity, TableInfo, table_difference

LOGGER = logging.getLogger(__name__)

DRAFT_KEY = "table_identity"
_MAX_WAITS = 5  # a table created again and again every second: give up and record no identity
# The heartbeat is stamped by the metastore's database, the create time by the metastore's process: allow
# them a second apart.
_CLOCK_MARGIN_S = 1


def planned_identity(
    metastore: Metastore,
    info: TableInfo,
    metastore_now_ms: Callable[[], int | None],
    sleep: Callable[[float], None] = time.sleep,
) -> TableIdentity | None:
    """The identity of ``info``'s table (or partition) read now, at a time the metastore's clock is
    past the second it was created in; None when that cannot be had (then the event carries none and
    the cleaner compares against its own check, as for events of older vacuums)."""
    for _ in range(_MAX_WAITS):
        now_ms = metastore_now_ms()
        current = metastore.get_table(info.db, info.table, info.partition)
        identity = TableIdentity.of(current)
        created = _created_second(identity)
        if created is None:
            return identity
        if now_ms is not None:
            if now_ms // 1000 > created + _CLOCK_MARGIN_S:
                return identity
            sleep(max(0.05, (created + 1 + _CLOCK_MARGIN_S) - now_ms / 1000))
            continue
        # No metastore time: the metastore's clock was at or past ``created`` when it answered; a
        # second (and the margin) later by this host's monotonic clock it is past it, and a second read
        # that still finds the same table finds the one any later re-creation differs from.
        sleep(1.0 + _CLOCK_MARGIN_S)
        again = TableIdentity.of(metastore.get_table(info.db, info.table, info.partition))
        if again == identity:
            return identity
    LOGGER.warning(
        "%s.%s was created again within each of the last seconds; this vacuum records no table identity",
        info.db,
        info.table,
    )
    return None


def _created_second(identity: TableIdentity) -> int | None:
    times = [t for t in (identity.create_time, identity.partition_create_time) if t is not None]
    return max(times) if times else None


def to_draft(identity: TableIdentity | None) -> dict[str, Any] | None:
    """The identity as the draft (outbox, commit marker) keeps it."""
    if identity is None:
        return None
    return {
        "table_id": identity.table_id,
        "create_time": identity.create_time,
        "location": identity.location,
        "partition_create_time": identity.partition_create_time,
    }


def confirmed_identity(metastore: Metastore, draft: dict[str, Any]) -> VacuumedTable | None:
    """The draft's identity, for the event, once the table is read again after the commit. A table that
    is gone or another table now keeps the planned identity (the one the vacuum compacted): the cleaner
    then finds another table, or none, and deletes nothing. Raises what the metastore raises otherwise."""
    planned = draft.get(DRAFT_KEY)
    if not planned:
        return None
    identity = TableIdentity(
        planned.get("table_id"), planned.get("create_time"), planned["location"], planned.get("partition_create_time")
    )
    db, _, table = str(draft["table"]).partition(".")
    try:
        now = TableIdentity.of(metastore.get_table(db, table, draft.get("partition")))
    except TableNotFoundError:
        now = None
    difference = "it no longer exists" if now is None else table_difference(identity, now)
    if difference is not None:
        LOGGER.warning(
            "%s changed while it was vacuumed (%s): the event names the table the vacuum compacted, so the "
            "cleaner will delete nothing; check the table and vacuum it again",
            draft["table"],
            difference,
        )
    return VacuumedTable(
        table_id=identity.table_id,
        create_time=identity.create_time,
        location=identity.location,
        partition_create_time=identity.partition_create_time,
    )


def fence_on_identity(metastore: Metastore, info: TableInfo, planned: TableIdentity | None, before: str) -> None:
    """Part of the fence before the commit (with the vacuum lock's): raise ``VacuumFencedError`` unless
    the table is still the one planned on. A table dropped and created again while the vacuum ran
    would get the old table's compacted rows as its own. Fails closed when the metastore cannot tell."""
    if planned is None:
        return
    where = f"{info.db}.{info.table}" + (f" partition {info.partition}" if info.partition else "")
    try:
        now = TableIdentity.of(metastore.get_table(info.db, info.table, info.partition))
    except TableNotFoundError:
        raise VacuumFencedError(
            f"the vacuum of {where} did not {before}: the table no longer exists; nothing was made visible"
        ) from None
    except MetastoreError as error:
        raise VacuumFencedError(
            f"the vacuum of {where} did not {before}: the table could not be read to confirm it is the one "
            f"compacted ({error}); nothing was made visible, try again"
        ) from error
    difference = table_difference(planned, now)
    if difference is not None:
        raise VacuumFencedError(
            f"the vacuum of {where} did not {before}: the table was dropped and created again while it was "
            f"vacuumed ({difference}); nothing was made visible, vacuum it again"
        )
