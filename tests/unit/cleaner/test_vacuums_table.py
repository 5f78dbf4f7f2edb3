"""Rule 9 with the table's identity in ``VacuumCommitted`` (issue 49, leftover 1), against fakes.

The cleaner compares the table it finds with the table the vacuum compacted, not only with its own
later view: a table dropped and created again under the same name and location between the vacuum's
commit and the cleanup, before the first check too, deletes nothing. Events without the field keep
today's behaviour.
"""

from __future__ import annotations

import pytest

from acidclean.schemas.common import VacuumedTable

from .fakes import LOCATION, Rig, vacuum

pytestmark = [pytest.mark.rule9]

SINGLES = ["delta_0000001_0000001_0000", "delta_0000002_0000002_0000", "delta_0000003_0000003_0000"]
CREATED = 1_700_000_000


def rig_with_table() -> Rig:
    rig = Rig()
    rig.metastore.add_table("sales.orders", "file:" + LOCATION, "ds=2025-03-14")
    rig.fs.add_acid_dirs(LOCATION, [*SINGLES, "delta_0000001_0000003"])
    return rig


def compacted(create_time: int = CREATED, location: str = "file:" + LOCATION) -> VacuumedTable:
    return VacuumedTable(table_id=None, create_time=create_time, location=location)


def test_a_table_created_again_before_the_first_check_deletes_nothing_and_says_what_to_do() -> None:
    rig = rig_with_table()
    rig.metastore.recreate_table("sales.orders")  # between the vacuum's commit and the cleanup

    outcome = rig.handle(vacuum(table_identity=compacted()))

    assert outcome.kind == "table_dropped"
    assert rig.fs.deleted == [] and rig.starts() == []
    [done] = rig.dones()
    assert done.directories_removed == []
    assert done.note is not None
    assert "is not the table this vacuum compacted (it was created again" in done.note
    assert done.note.endswith("vacuum it again to clean them")


def test_the_vacuums_own_table_is_cleaned() -> None:
    rig = rig_with_table()
    outcome = rig.handle(vacuum(table_identity=compacted()))
    assert outcome.kind == "cleaned"
    [done] = rig.dones()
    assert sorted(d.name for d in done.directories_removed) == SINGLES


def test_another_location_under_the_same_name_is_not_the_vacuums_table() -> None:
    rig = rig_with_table()
    outcome = rig.handle(vacuum(table_identity=compacted(location="file:/elsewhere/orders")))
    assert outcome.kind == "table_dropped" and rig.fs.deleted == []


def test_an_event_without_the_identity_keeps_todays_behaviour() -> None:
    """What the field closes: without it the cleaner's first check takes the re-created table as its own."""
    rig = rig_with_table()
    rig.metastore.recreate_table("sales.orders")
    outcome = rig.handle(vacuum())
    assert outcome.kind == "cleaned"
    [done] = rig.dones()
    assert sorted(d.name for d in done.directories_removed) == SINGLES
