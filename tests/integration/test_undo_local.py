"""Undo on the local disk, real files (no services): a cleanup moves its files under the trash root
(shared/storage/trash.py), its ledger reads back, and ``undo`` puts them back only where nothing is,
only into the same table, and refuses by name what the trash no longer holds.
"""

from __future__ import annotations

import os
import shutil
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from acidclean.consumers.ledger import Ledger, assemble, ledger_records
from acidclean.consumers.remover import CheckedCleanup, PlannedRemoval, Removal, checked_directory, remove_all
from acidclean.consumers.trash_expiry import EXPIRY_EVERY, TrashExpiry
from acidclean.consumers.undo import apply_undo, plan_undo
from acidclean.schemas.events import CleanupDone
from acidclean.schemas.ledger import CleanupLedger
from acidclean.shared.metastore import TableIdentity, TableInfo
from acidclean.shared.storage import open_location
from acidclean.shared.storage.trash import TrashPolicy, disposal_for

pytestmark = pytest.mark.integration
NOW = datetime(2026, 12, 2, 6, 30, tzinfo=timezone.utc)
D1, D2 = "delta_0000001_0000001_0000", "delta_0000002_0000002_0000"


def table_info(location: str, create_time: int = 1000) -> TableInfo:
    return TableInfo("sales", "t", location, {}, (), (), 1, (), None, create_time=create_time)


def write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


@pytest.fixture
def table(tmp_path: Path) -> Path:
    location = tmp_path / "warehouse" / "sales.db" / "t"
    for name in (D1, D2):
        write(location / name / "bucket_00000", name.encode() * 10)
        write(location / name / "_orc_acid_version", b"2")
    write(location / "base_0000002" / "bucket_00000", b"new base")
    return location


def clean(table: Path, trash: Path, parameters: dict[str, str] | None = None) -> tuple[Removal, list[str]]:
    """One cleanup of D1 and D2 as the cleaner does it (check, confirm, dispose), and its ledger's chunks."""
    location = open_location(str(table))
    info = table_info(location.path)
    cleanup = CheckedCleanup(
        TableIdentity.of(info), tuple(checked_directory(location.fs, location.child(n), n) for n in (D1, D2))
    )
    policy = TrashPolicy(root=str(trash))
    planned = PlannedRemoval(
        cleanup,
        location.fs,
        location.child,
        lambda: TableInfo(**{**info.__dict__, "parameters": parameters or {}}),
        {},
        lambda read: disposal_for(location.fs, policy, read.parameters, NOW, versioned=False),
    )
    [removal] = remove_all([planned], lambda function, items: [function(item) for item in items], lambda: None)
    done = CleanupDone(
        tenant="acme",
        table="sales.t",
        occurred_at=NOW,
        correlation_id=uuid.uuid4(),
        directories_removed=list(removal.removed),
        time_waited_ms=0,
        attempts=1,
        cleaner_id="c",
    )
    records = ledger_records(done, str(table), location.path, cleanup.table, removal.files)
    return removal, [record.model_dump_json() for record in records]


def ledger_of(table: Path, dumped: list[str]) -> Ledger:
    """The ledger as undo reads it back from the topic (the records' JSON)."""
    return assemble([CleanupLedger.model_validate_json(text) for text in dumped], open_location(str(table)).path)


def test_a_cleanup_goes_to_the_trash_root_and_undo_puts_back_the_same_files(table: Path, tmp_path: Path) -> None:
    trash = tmp_path / "trash"
    before = {p: p.read_bytes() for p in table.rglob("*") if p.is_file()}
    inodes = {p: os.stat(p).st_ino for p in before}
    removal, dumped = clean(table, trash)
    assert sorted(d.name for d in removal.removed) == [D1, D2]
    assert not (table / D1).exists() and not (table / D2).exists()
    assert all(item.went.startswith(f"trash:{trash}/261202063000{table}/") for item in removal.files)

    ledger = ledger_of(table, dumped)
    location = open_location(str(table))
    plan = plan_undo(ledger, location.fs, location.path, lambda: table_info(location.path))
    assert len(plan.restores) == 4 and plan.refused == ()
    assert (table / D1).exists() is False  # a plan moves nothing
    result = apply_undo(plan, location.fs)
    assert len(result.restored) == 4 and result.refused == ()
    after = {p: p.read_bytes() for p in table.rglob("*") if p.is_file()}
    assert after == before
    assert {p: os.stat(p).st_ino for p in after} == inodes  # the very files, renamed back


@pytest.mark.rule9
def test_undo_never_overwrites_a_file_put_in_the_way(table: Path, tmp_path: Path) -> None:
    _, dumped = clean(table, tmp_path / "trash")
    write(table / D1 / "bucket_00000", b"written after the cleanup")
    location = open_location(str(table))
    plan = plan_undo(ledger_of(table, dumped), location.fs, location.path, lambda: table_info(location.path))
    assert {item.file.directory for item in plan.restores} == {D2}
    assert {item.file.directory for item in plan.refused} == {D1}
    assert all("exists again" in item.reason for item in plan.refused)
    apply_undo(plan, location.fs)
    assert (table / D1 / "bucket_00000").read_bytes() == b"written after the cleanup"
    assert not (table / D1 / "_orc_acid_version").exists()  # nothing mixed into the directory written since
    assert (table / D2 / "bucket_00000").exists()


@pytest.mark.rule9
def test_a_file_that_appears_between_plan_and_apply_is_not_overwritten(table: Path, tmp_path: Path) -> None:
    _, dumped = clean(table, tmp_path / "trash")
    location = open_location(str(table))
    plan = plan_undo(ledger_of(table, dumped), location.fs, location.path, lambda: table_info(location.path))
    write(table / D2 / "bucket_00000", b"raced in")
    result = apply_undo(plan, location.fs)
    assert (table / D2 / "bucket_00000").read_bytes() == b"raced in"
    assert [item.file.path for item in result.refused if item.file.directory == D2] == ["bucket_00000"]
    assert "not overwritten" in result.refused[0].reason


@pytest.mark.rule9
def test_undo_into_a_re_created_table_puts_nothing_back(table: Path, tmp_path: Path) -> None:
    _, dumped = clean(table, tmp_path / "trash")
    location = open_location(str(table))
    plan = plan_undo(
        ledger_of(table, dumped), location.fs, location.path, lambda: table_info(location.path, create_time=2000)
    )
    assert plan.restores == () and plan.table_refusal is not None
    assert "not the one cleaned" in plan.table_refusal and "another table" in plan.table_refusal
    assert apply_undo(plan, location.fs).restored == ()
    assert not (table / D1).exists() and not (table / D2).exists()


def test_an_emptied_trash_is_refused_by_name(table: Path, tmp_path: Path) -> None:
    _, dumped = clean(table, tmp_path / "trash")
    shutil.rmtree(tmp_path / "trash")
    location = open_location(str(table))
    plan = plan_undo(ledger_of(table, dumped), location.fs, location.path, lambda: table_info(location.path))
    assert plan.restores == ()
    assert {item.reason for item in plan.refused} == {
        "no longer in the trash (emptied, or expired after its interval): it cannot be put back"
    }
    assert "4 refused" in plan.summary()


def test_auto_purge_deletes_outright_and_undo_says_so(table: Path, tmp_path: Path) -> None:
    removal, dumped = clean(table, tmp_path / "trash", {"auto.purge": "true"})
    assert {item.went for item in removal.files} == {"gone"}
    assert not (tmp_path / "trash").exists()
    location = open_location(str(table))
    plan = plan_undo(ledger_of(table, dumped), location.fs, location.path, lambda: table_info(location.path))
    assert plan.restores == () and all("deleted outright" in item.reason for item in plan.refused)


def test_the_cleaner_expires_its_own_trash_checkpoints_after_the_interval(tmp_path: Path) -> None:
    trash = tmp_path / "trash"
    for name in ("261130120000", "261202060000", "Current", "not-a-checkpoint"):
        write(trash / name / "warehouse" / "t" / "delta_1" / "bucket_00000", b"x")
    location = open_location(str(trash))
    expiry = TrashExpiry()
    assert expiry.expire(location.fs, location.path, NOW, 1440) == ["261130120000"]
    assert sorted(p.name for p in trash.iterdir()) == ["261202060000", "Current", "not-a-checkpoint"]
    # Rate-limited per root: a cleanup minutes later lists nothing; after EXPIRY_EVERY the next one does.
    later = NOW + timedelta(hours=2)
    assert expiry.expire(location.fs, location.path, NOW + timedelta(minutes=1), 10) == []
    assert expiry.expire(location.fs, location.path, later + EXPIRY_EVERY, 10) == ["261202060000"]
    assert sorted(p.name for p in trash.iterdir()) == ["Current", "not-a-checkpoint"]
