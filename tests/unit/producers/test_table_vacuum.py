"""A vacuum of every partition: which partitions, which errors skip or fail one, and which end the run."""

from __future__ import annotations

from typing import Any

import pytest

from acidclean.producers.plan import CompactionPlan
from acidclean.producers.table_vacuum import partitions_to_vacuum, summarize, vacuum_each_partition
from acidclean.producers.vacuum import VacuumRequest, VacuumResult
from acidclean.shared.errors import (
    MetastoreError,
    NothingToCompactError,
    TableNotFoundError,
    UnreadableFileError,
    VacuumBusyError,
    VacuumError,
)
from acidclean.shared.metastore import TableInfo


def table_info(partition_keys: tuple[str, ...]) -> TableInfo:
    return TableInfo(
        db="sales",
        table="orders",
        location="/warehouse/sales.db/orders",
        parameters={"transactional": "true"},
        partition_keys=partition_keys,
        bucket_columns=("id",),
        bucket_count=2,
        columns=(("id", "int"),),
    )


class Tables:
    def __init__(self, info: TableInfo | None, partitions: list[str]) -> None:
        self.info, self.partitions = info, partitions

    def get_table(self, db: str, table: str, partition: str | None = None) -> TableInfo:
        if self.info is None:
            raise TableNotFoundError(f"{db}.{table} table not found")
        return self.info

    def list_partitions(self, db: str, table: str) -> list[str]:
        return list(self.partitions)


def test_a_partitioned_tables_partitions_are_vacuumed_in_name_order() -> None:
    tables = Tables(table_info(("ds",)), ["ds=2026-01-02", "ds=2026-01-01"])
    assert partitions_to_vacuum(tables, "sales.orders") == ["ds=2026-01-01", "ds=2026-01-02"]


def test_a_table_that_is_not_partitioned_or_not_there_is_vacuumed_as_one() -> None:
    assert partitions_to_vacuum(Tables(table_info(()), []), "sales.orders") is None
    assert partitions_to_vacuum(Tables(None, []), "sales.orders") is None


def result(status: str) -> VacuumResult:
    return VacuumResult(status, CompactionPlan.__new__(CompactionPlan))


def runner(answers: dict[str, Any], ran: list[str]) -> Any:
    def run(request: VacuumRequest) -> VacuumResult:
        assert request.partition is not None and request.table == "sales.orders" and request.allow_uncleaned
        ran.append(request.partition)
        answer = answers[request.partition]
        if isinstance(answer, BaseException):
            raise answer
        return answer  # type: ignore[no-any-return]

    return run


def test_a_partition_skipped_refused_or_failed_does_not_stop_the_others() -> None:
    answers = {
        "ds=1": result("committed"),
        "ds=2": NothingToCompactError("nothing to compact in sales.orders partition ds=2: it has no committed delta"),
        "ds=3": VacuumBusyError("another vacuum of sales.orders partition ds=3 is running"),
        "ds=4": UnreadableFileError("cannot read ORC file .../bucket_00000: not ORC"),
        "ds=5": VacuumError("the vacuum failed while writing"),
        "ds=6": result("already-committed"),
    }
    ran: list[str] = []
    request = VacuumRequest("sales.orders", allow_uncleaned=True)
    outcomes = list(vacuum_each_partition(request, list(answers), runner(answers, ran)))
    assert ran == list(answers)
    assert [(o.partition, o.result is not None, o.skipped is not None, o.failed is not None) for o in outcomes] == [
        ("ds=1", True, False, False),
        ("ds=2", False, True, False),
        ("ds=3", False, False, True),
        ("ds=4", False, False, True),
        ("ds=5", False, False, True),
        ("ds=6", True, False, False),
    ]
    assert outcomes[2].failed == "another vacuum of sales.orders partition ds=3 is running"
    summary = summarize(outcomes)
    assert (summary.committed, summary.planned, summary.nothing_to_do) == (1, 0, 2)
    assert summary.failed == ("ds=3", "ds=4", "ds=5")


def test_an_unreachable_metastore_ends_the_run_after_the_partitions_already_done() -> None:
    answers = {"ds=1": result("committed"), "ds=2": MetastoreError("cannot reach the Hive Metastore"), "ds=3": None}
    ran: list[str] = []
    outcomes = vacuum_each_partition(
        VacuumRequest("sales.orders", allow_uncleaned=True), list(answers), runner(answers, ran)
    )
    first = next(outcomes)
    assert first.partition == "ds=1" and first.result is not None  # reported before the error comes
    with pytest.raises(MetastoreError):
        next(outcomes)
    assert ran == ["ds=1", "ds=2"]


def test_dry_runs_are_counted_as_planned() -> None:
    answers = {"ds=1": result("dry-run"), "ds=2": result("dry-run")}
    request = VacuumRequest("sales.orders", dry_run=True, allow_uncleaned=True)
    summary = summarize(list(vacuum_each_partition(request, list(answers), runner(answers, []))))
    assert (summary.committed, summary.planned, summary.nothing_to_do, summary.failed) == (0, 2, 0, ())
