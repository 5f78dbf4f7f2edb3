"""Is the table the cleaner finds the one the vacuum compacted (docs/design.md section 7, rule 9)?

``VacuumCommitted.table_identity`` names the table the vacuum planned on and confirmed after its commit
(:mod:`acidclean.producers.table_identity`). A table dropped and created again under the same name and
location before the cleanup (before its first check too) has another create time, or another id; its
directories, whose names repeat the old ones, are not this vacuum's to delete. Pure: no metastore call,
the table is the one the check read anyway. Events without the field are left to the check's own
identity, compared again just before the deletes (:mod:`acidclean.consumers.remover`).
"""

from __future__ import annotations

from acidclean.schemas.events import VacuumCommitted
from acidclean.shared.metastore import TableIdentity, TableInfo, table_difference


def vacuums_identity(vacuum: VacuumCommitted) -> TableIdentity | None:
    recorded = vacuum.table_identity
    if recorded is None:
        return None
    return TableIdentity(recorded.table_id, recorded.create_time, recorded.location, recorded.partition_create_time)


def not_the_vacuums_table(vacuum: VacuumCommitted, table: TableInfo) -> str | None:
    """Why ``table`` (as the check read it) is not the table the vacuum compacted, as the note of a
    ``CleanupDone`` that deletes nothing; None when it is, or when the event does not say."""
    recorded = vacuums_identity(vacuum)
    if recorded is None:
        return None
    difference = table_difference(recorded, TableIdentity.of(table))
    if difference is None:
        return None
    what = vacuum.table + (f" partition {vacuum.partition}" if vacuum.partition else "")
    return (
        f"nothing deleted: {what} is not the table this vacuum compacted ({difference}); its directories "
        "belong to the table there now: vacuum it again to clean them"
    )
