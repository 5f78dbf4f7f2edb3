"""A vacuum of every partition of a partitioned table, as openLooKeng's ``VACUUM TABLE t [FULL]``
without a ``PARTITION`` clause.

Each partition is a vacuum of its own, exactly as ``--partition`` runs it: its own vacuum lock, commit,
lock snapshot and ``VacuumCommitted``, so its own cleanup, which waits only for that partition's
readers (Hive's compactor also compacts one partition per compaction). They run one after the other,
in the order of the metastore's partition names. A partition with nothing to compact is skipped and
says why; one that is refused (another vacuum holds it, Hive's compactor is at it, an earlier
vacuum's cleanup has not run) or whose compaction fails is reported and the others go on. Any other
error (the metastore or the broker not answering, bad settings) ends the run: what is done stays
done, and the partitions after it are left as they were.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from acidclean.shared.errors import (
    AcidLayoutError,
    NothingToCompactError,
    TableNotFoundError,
    UnreadableFileError,
    UnsafePathError,
    VacuumError,
)
from acidclean.shared.metastore import TableInfo, split_table_name

if TYPE_CHECKING:  # the vacuum imports Spark and the ORC writer (the vacuum extra)
    from acidclean.producers.vacuum import VacuumRequest, VacuumResult

# What one partition's vacuum may fail with while the others can still run: its own refusal or
# failure, or a file or directory of its own that cannot be read.
PARTITION_ERRORS = (VacuumError, AcidLayoutError, UnreadableFileError, UnsafePathError)


class PartitionedMetastore(Protocol):
    def get_table(self, db: str, table: str, partition: str | None = None) -> TableInfo: ...

    def list_partitions(self, db: str, table: str) -> list[str]: ...


@dataclass(frozen=True)
class PartitionOutcome:
    """One partition's vacuum: its result, or why it was skipped (nothing to compact) or not done."""

    partition: str
    result: VacuumResult | None = None
    skipped: str | None = None  # nothing to compact: why
    failed: str | None = None  # refused or failed (nothing of it was committed): why


@dataclass(frozen=True)
class TableVacuumSummary:
    committed: int  # vacuums committed (published or kept in the outbox)
    planned: int  # dry runs: vacuums that would run
    nothing_to_do: int  # nothing to compact, or already committed by an earlier run
    failed: tuple[str, ...]  # the partitions refused or failed


def partitions_to_vacuum(metastore: PartitionedMetastore, table: str) -> list[str] | None:
    """The partitions of ``table`` (as the metastore names them, escaped), or None when the table is not
    partitioned or not there (a vacuum of the table itself then says what it can do with it)."""
    db, name = split_table_name(table)
    try:
        info = metastore.get_table(db, name)
    except TableNotFoundError:
        return None
    if not info.partition_keys:
        return None
    return sorted(metastore.list_partitions(db, name))


def vacuum_each_partition(
    request: VacuumRequest, partitions: Sequence[str], run: Callable[[VacuumRequest], VacuumResult]
) -> Iterator[PartitionOutcome]:
    """``request`` run for each partition in turn by ``run`` (``run_vacuum`` with its services bound),
    each outcome yielded as soon as it is known."""
    for partition in partitions:
        try:
            result = run(dataclasses.replace(request, partition=partition))
        except NothingToCompactError as error:
            yield PartitionOutcome(partition, skipped=str(error))
        except PARTITION_ERRORS as error:
            yield PartitionOutcome(partition, failed=str(error))
        else:
            yield PartitionOutcome(partition, result=result)


def summarize(outcomes: Sequence[PartitionOutcome]) -> TableVacuumSummary:
    statuses = [outcome.result.status for outcome in outcomes if outcome.result is not None]
    return TableVacuumSummary(
        committed=statuses.count("committed"),
        planned=statuses.count("dry-run"),
        nothing_to_do=statuses.count("already-committed") + sum(1 for o in outcomes if o.skipped is not None),
        failed=tuple(outcome.partition for outcome in outcomes if outcome.failed is not None),
    )
