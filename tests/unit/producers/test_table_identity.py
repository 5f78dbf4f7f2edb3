"""The vacuum's record of which table it compacts (rule 9): read once the metastore's clock is past the
table's create second, and confirmed after the commit. Fakes for the metastore and its clock."""

from __future__ import annotations

import logging

import pytest

from acidclean.producers.table_identity import confirmed_identity, planned_identity, to_draft
from acidclean.shared.errors import TableNotFoundError
from acidclean.shared.metastore import TableIdentity, TableInfo

pytestmark = [pytest.mark.rule9]

LOCATION = "file:/warehouse/sales.db/t"


class ClockedMetastore:
    """A table whose create time is stamped by the metastore's clock (seconds), which ``sleep`` moves."""

    def __init__(self, now_s: float, created: int) -> None:
        self.now_s = now_s
        self.created: int | None = created
        self.reads = 0
        self.on_read: list[int] = []  # create times to switch to at each read (a table created again)

    def get_table(self, db: str, table: str, partition: str | None = None) -> TableInfo:
        self.reads += 1
        if self.on_read:
            self.created = self.on_read.pop(0)
        if self.created is None:
            raise TableNotFoundError(f"{db}.{table}")
        return TableInfo(db, table, LOCATION, {}, (), (), 1, (), partition, create_time=self.created)

    def clock_ms(self) -> int:
        return int(self.now_s * 1000)

    def sleep(self, seconds: float) -> None:
        self.now_s += seconds


def info() -> TableInfo:
    return TableInfo("sales", "t", LOCATION, {}, (), (), 1, (), None, create_time=100)


def test_a_table_older_than_the_metastores_current_second_is_read_at_once() -> None:
    metastore = ClockedMetastore(now_s=500.2, created=100)
    identity = planned_identity(metastore, info(), metastore.clock_ms, metastore.sleep)  # type: ignore[arg-type]
    assert identity == TableIdentity(None, 100, LOCATION)
    assert (metastore.reads, metastore.now_s) == (1, 500.2)


def test_a_table_created_this_second_is_read_again_once_the_metastores_clock_is_past_it() -> None:
    """Created at 100 and dropped and created again at 100 too: a create time read at 100 tells the two
    apart from nothing. Read past the second (and the margin), any later table has a later create time."""
    metastore = ClockedMetastore(now_s=100.4, created=100)
    metastore.on_read = [100, 100]  # the second read finds the table created again within second 100
    identity = planned_identity(metastore, info(), metastore.clock_ms, metastore.sleep)  # type: ignore[arg-type]
    assert identity is not None and identity.create_time == 100
    assert metastore.reads == 2 and metastore.now_s >= 102  # the second read came after second 101
    # A re-creation from now on gets create time >= 102 > 100: the cleaner tells it apart.


def test_without_the_metastores_time_two_reads_apart_by_the_monotonic_clock_must_agree() -> None:
    metastore = ClockedMetastore(now_s=100.4, created=100)
    metastore.on_read = [100, 101, 101, 101]  # created again between the first two reads
    identity = planned_identity(metastore, info(), lambda: None, metastore.sleep)  # type: ignore[arg-type]
    assert identity == TableIdentity(None, 101, LOCATION)
    assert metastore.reads == 4


def test_confirmed_after_the_commit_the_planned_identity_is_carried() -> None:
    metastore = ClockedMetastore(now_s=500, created=100)
    draft = {"table": "sales.t", "partition": None, "table_identity": to_draft(TableIdentity(None, 100, LOCATION))}
    carried = confirmed_identity(metastore, draft)  # type: ignore[arg-type]
    assert carried is not None and (carried.create_time, carried.location) == (100, LOCATION)


@pytest.mark.parametrize("now", [101, None], ids=["created-again", "dropped"])
def test_a_table_changed_while_it_was_vacuumed_keeps_the_planned_identity_and_says_so(
    now: int | None, caplog: pytest.LogCaptureFixture
) -> None:
    metastore = ClockedMetastore(now_s=500, created=100)
    metastore.created = now
    draft = {"table": "sales.t", "partition": None, "table_identity": to_draft(TableIdentity(None, 100, LOCATION))}
    with caplog.at_level(logging.WARNING):
        carried = confirmed_identity(metastore, draft)  # type: ignore[arg-type]
    assert carried is not None and carried.create_time == 100
    assert "changed while it was vacuumed" in caplog.text and "vacuum it again" in caplog.text


def test_a_draft_of_an_older_vacuum_carries_no_identity() -> None:
    metastore = ClockedMetastore(now_s=500, created=100)
    assert confirmed_identity(metastore, {"table": "sales.t", "partition": None}) is None  # type: ignore[arg-type]
    assert metastore.reads == 0


@pytest.mark.rule7
@pytest.mark.parametrize(
    ("now", "message"),
    [
        (101, r"did not rename: the table was dropped and created again while it was vacuumed \(it was created again"),
        (None, "did not rename: the table no longer exists; nothing was made visible"),
    ],
    ids=["created-again", "dropped"],
)
def test_the_fence_refuses_to_commit_into_a_table_that_is_not_the_one_planned_on(now: int | None, message: str) -> None:
    from acidclean.producers.table_identity import fence_on_identity
    from acidclean.shared.errors import VacuumFencedError

    metastore = ClockedMetastore(now_s=500, created=100)
    metastore.created = now
    with pytest.raises(VacuumFencedError, match=message):
        fence_on_identity(metastore, info(), TableIdentity(None, 100, LOCATION), "rename")  # type: ignore[arg-type]


def test_the_fence_lets_the_planned_table_commit_and_asks_nothing_without_an_identity() -> None:
    from acidclean.producers.table_identity import fence_on_identity

    metastore = ClockedMetastore(now_s=500, created=100)
    fence_on_identity(metastore, info(), TableIdentity(None, 100, LOCATION), "rename")  # type: ignore[arg-type]
    fence_on_identity(metastore, info(), None, "rename")  # type: ignore[arg-type]
    assert metastore.reads == 1
