"""Rule 9: the cleaner deletes exactly what it checked (consumers/remover.py), against fakes.

Each test checks a cleanup, changes something between the check and the delete (as a drop and
re-create, or a writer, would during the broker's acknowledgement of ``CleanupStarted``), then lets
the deletes run: only the files listed at the check that are still the same files go.
"""

from __future__ import annotations

import pytest

from acidclean.consumers.crash_points import CrashPoint
from acidclean.consumers.remover import (
    CheckedCleanup,
    PlannedRemoval,
    Removal,
    checked_directory,
    remove_all,
)
from acidclean.shared.errors import MetastoreError, TableNotFoundError
from acidclean.shared.metastore import TableIdentity, TableInfo, table_difference

from .fakes import LOCATION, FakeFileSystem, Rig, vacuum

pytestmark = [pytest.mark.rule9, pytest.mark.rule3]

TABLE = "/warehouse/sales.db/t"
D1, D2 = "delta_0000001_0000001_0000", "delta_0000002_0000002_0000"


def table_info(create_time: int | None = 1000, table_id: int | None = None, location: str = TABLE) -> TableInfo:
    return TableInfo("sales", "t", location, {}, (), (), 1, (), None, table_id=table_id, create_time=create_time)


def checked(fs: FakeFileSystem, names: list[str], table: TableInfo) -> CheckedCleanup:
    return CheckedCleanup(
        TableIdentity.of(table), tuple(checked_directory(fs, f"{TABLE}/{name}", name) for name in names)
    )


def remove(fs: FakeFileSystem, cleanup: CheckedCleanup, now: TableInfo | Exception) -> Removal:
    def reread() -> TableInfo:
        if isinstance(now, Exception):
            raise now
        return now

    planned = PlannedRemoval(cleanup, fs, lambda name: f"{TABLE}/{name}", reread, {})
    [removal] = remove_all([planned], lambda function, items: [function(item) for item in items], lambda: None)
    return removal


@pytest.fixture
def fs() -> FakeFileSystem:
    fs = FakeFileSystem()
    fs.add_acid_dirs(TABLE, [D1, D2])
    return fs


def test_files_unchanged_since_the_check_are_deleted_with_their_directories(fs: FakeFileSystem) -> None:
    removal = remove(fs, checked(fs, [D1, D2], table_info()), table_info())
    assert [(d.name, d.file_count, d.bytes) for d in removal.removed] == [(D1, 2, 101), (D2, 2, 101)]
    assert removal.left == () and removal.errors == () and removal.note() is None
    assert not fs.exists(f"{TABLE}/{D1}") and not fs.exists(f"{TABLE}/{D2}")


def test_a_file_written_again_with_the_same_name_and_size_is_left(fs: FakeFileSystem) -> None:
    cleanup = checked(fs, [D1], table_info())
    fs.put_file(f"{TABLE}/{D1}/bucket_00000", 100)  # another file, same name and size
    removal = remove(fs, cleanup, table_info())
    assert fs.exists(f"{TABLE}/{D1}/bucket_00000") and fs.exists(f"{TABLE}/{D1}")
    assert not fs.exists(f"{TABLE}/{D1}/_orc_acid_version")  # still the file listed: deleted
    assert [(item.path, item.reason.split(" (")[0]) for item in removal.left] == [("bucket_00000", "another file now")]
    assert [(d.name, d.file_count) for d in removal.removed] == [(D1, 1)]


def test_a_file_whose_size_changed_is_left(fs: FakeFileSystem) -> None:
    cleanup = checked(fs, [D1], table_info())
    fs.files[f"{TABLE}/{D1}/bucket_00000"] = 150  # appended to in place
    removal = remove(fs, cleanup, table_info())
    assert fs.files[f"{TABLE}/{D1}/bucket_00000"] == 150
    assert [item.reason for item in removal.left] == ["size changed from 100 to 150"]


def test_a_file_added_after_the_check_is_left_and_keeps_its_directory(fs: FakeFileSystem) -> None:
    cleanup = checked(fs, [D1], table_info())
    fs.put_file(f"{TABLE}/{D1}/bucket_00001", 7)
    removal = remove(fs, cleanup, table_info())
    assert fs.exists(f"{TABLE}/{D1}/bucket_00001") and fs.exists(f"{TABLE}/{D1}")
    assert [(item.path, item.reason) for item in removal.left] == [("bucket_00001", "not listed at the check")]
    assert f"{TABLE}/{D1}" not in fs.deleted
    assert "left 1 item(s)" in (removal.note() or "")


def test_a_directory_replaced_by_one_of_the_same_name_and_files_is_left_whole(fs: FakeFileSystem) -> None:
    cleanup = checked(fs, [D1, D2], table_info())
    fs.delete_dir(f"{TABLE}/{D1}")
    fs.deleted.clear()
    fs.add_acid_dirs(TABLE, [D1])  # same names, same sizes: new files
    removal = remove(fs, cleanup, table_info())
    assert sorted(path for path in fs.files if path.startswith(f"{TABLE}/{D1}/")) == [
        f"{TABLE}/{D1}/_orc_acid_version",
        f"{TABLE}/{D1}/bucket_00000",
    ]
    assert {item.directory for item in removal.left} == {D1}
    assert [d.name for d in removal.removed] == [D2]


@pytest.mark.parametrize(
    "now",
    [
        table_info(create_time=1001),  # Hive 2 and 3: dropped and created again
        table_info(location="/warehouse/sales.db/t2"),
    ],
    ids=["create-time", "location"],
)
def test_a_table_that_is_not_the_table_checked_deletes_nothing(fs: FakeFileSystem, now: TableInfo) -> None:
    before = dict(fs.files)
    removal = remove(fs, checked(fs, [D1, D2], table_info()), now)
    assert fs.files == before and fs.deleted == []
    assert removal.removed == () and {item.directory for item in removal.left} == {D1, D2}
    assert removal.errors == ()


def test_hive4s_table_id_decides_even_when_the_create_time_repeats(fs: FakeFileSystem) -> None:
    before = dict(fs.files)
    removal = remove(fs, checked(fs, [D1], table_info(table_id=7)), table_info(table_id=8))
    assert fs.files == before and removal.removed == ()
    assert "table id 8" in removal.left[0].reason


def test_a_table_dropped_since_the_check_deletes_nothing(fs: FakeFileSystem) -> None:
    before = dict(fs.files)
    removal = remove(fs, checked(fs, [D1], table_info()), TableNotFoundError("sales.t: no such table"))
    assert fs.files == before and removal.removed == () and "no longer exists" in removal.left[0].reason


def test_a_metastore_that_cannot_confirm_the_table_deletes_nothing_and_fails_closed(fs: FakeFileSystem) -> None:
    before = dict(fs.files)
    removal = remove(fs, checked(fs, [D1], table_info()), MetastoreError("cannot reach the Hive Metastore"))
    assert fs.files == before and removal.removed == () and removal.left == ()
    assert len(removal.errors) == 1  # the handler delays the event: it is checked again later


def test_the_same_create_time_but_a_different_table_id_is_not_the_same_table() -> None:
    assert table_difference(TableIdentity(1, 5, TABLE), TableIdentity(2, 5, TABLE)) is not None
    assert table_difference(TableIdentity(1, 5, TABLE), TableIdentity(1, 5, TABLE + "/")) is None
    assert table_difference(TableIdentity(None, 5, TABLE), TableIdentity(None, 6, TABLE)) is not None
    # A partition dropped and added again (same location): its own create time tells.
    assert table_difference(TableIdentity(None, 5, TABLE, 10), TableIdentity(None, 5, TABLE, 11)) is not None
    assert table_difference(TableIdentity(1, 5, TABLE, 10), TableIdentity(1, 5, TABLE, 11)) is not None


class RecreateAt:
    """At the step between the announcement and the deletes, drop and re-create the table with the
    same directories (write ids restart at 1), as the issue's 8 s broker stall allowed."""

    def __init__(self, rig: Rig, *, same_table: bool = False) -> None:
        self.rig, self.same_table = rig, same_table

    def reached(self, point: CrashPoint) -> None:
        if point != "before-delete":
            return
        if not self.same_table:
            self.rig.metastore.recreate_table("sales.orders")
        for name in (D1, D2, "delta_0000003_0000003_0000"):
            self.rig.fs.delete_dir(f"{LOCATION}/{name}")
        self.rig.fs.deleted.clear()
        self.rig.fs.add_acid_dirs(LOCATION, [D1, D2, "delta_0000003_0000003_0000"])


@pytest.mark.parametrize("same_table", [False, True], ids=["recreated", "same-create-time"])
def test_a_table_recreated_between_the_announcement_and_the_delete_keeps_every_file(same_table: bool) -> None:
    rig = Rig()
    rig.metastore.add_table("sales.orders", "file:" + LOCATION, "ds=2025-03-14")
    rig.fs.add_acid_dirs(LOCATION, [D1, D2, "delta_0000003_0000003_0000", "delta_0000001_0000003"])
    rig.handler.context.crash = RecreateAt(rig, same_table=same_table)  # type: ignore[assignment]
    outcome = rig.handle(vacuum())
    assert outcome.kind == "cleaned"
    assert rig.fs.deleted == []
    singles = (D1, D2, "delta_0000003_0000003_0000")
    kept = sorted(path.removeprefix(LOCATION + "/") for path in rig.fs.files if path.split("/")[-2] in singles)
    assert kept == sorted(f"{name}/{file}" for name in singles for file in ("_orc_acid_version", "bucket_00000"))
    [started] = rig.starts()
    assert len(started.directories_to_remove) == 3
    [done] = rig.dones()
    assert done.directories_removed == [] and "changed since the check" in (done.note or "")
