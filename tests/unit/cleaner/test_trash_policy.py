"""Hive's trash semantics as acidclean chooses them (shared/storage/trash.py), against fakes: which
disposal a cleanup gets, that the remover records each file it removes and where it went, and the
expiry of acidclean's own trash checkpoints."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from acidclean.consumers.remover import CheckedCleanup, PlannedRemoval, checked_directory, remove_all
from acidclean.consumers.replication_check import ReplicationCheck
from acidclean.shared.errors import MetastoreError
from acidclean.shared.metastore import TableIdentity, TableInfo
from acidclean.shared.storage import StorageError
from acidclean.shared.storage.trash import (
    Delete,
    HdfsTrash,
    PrefixTrash,
    S3Versions,
    TrashPolicy,
    checkpoint_name,
    disposal_for,
    expired_checkpoints,
    purge_requested,
    replication_note,
    trash_path,
    version_of,
)

from .fakes import FakeFileSystem

NOW = datetime(2026, 12, 2, 6, 30, tzinfo=timezone.utc)
TABLE = "/warehouse/sales.db/t"
D1 = "delta_0000001_0000001_0000"


class TrashNotEnabledError(Exception):
    """hdfs-native's refusal (an ``Exception``, not an ``OSError``) while the NameNode's interval is 0."""


class FakeNative:
    """hdfs-native's ``trash()``: moves a file to ``/user/u/.Trash/Current/<path>``, or refuses as a
    NameNode with ``fs.trash.interval=0`` makes it."""

    def __init__(self, fs: FakeFileSystem, enabled: bool = True) -> None:
        self.fs = fs
        self.enabled = enabled

    def trash(self, path: str) -> str | None:
        if not self.enabled:
            raise TrashNotEnabledError("Trash is not enabled")
        target = f"/user/u/.Trash/Current{path}"
        self.fs.put_file(target, self.fs.files.pop(path))
        return target


class FakeHdfs(FakeFileSystem):
    def __init__(self, enabled: bool = True) -> None:
        super().__init__()
        self.native: Any = FakeNative(self, enabled)


def table(parameters: dict[str, str] | None = None) -> TableInfo:
    return TableInfo("sales", "t", TABLE, parameters or {}, (), (), 1, (), None, create_time=1000)


def test_auto_purge_true_skips_the_trash_whatever_its_case() -> None:
    assert purge_requested({"auto.purge": "TRUE"})
    assert not purge_requested({"auto.purge": "false"})
    assert not purge_requested({})


def test_hdfs_moves_to_the_trash_unless_the_table_purges_or_the_trash_is_off() -> None:
    fs = FakeHdfs()
    assert isinstance(disposal_for(fs, TrashPolicy(), {}, NOW, versioned=False), HdfsTrash)
    assert isinstance(disposal_for(fs, TrashPolicy(), {"auto.purge": "true"}, NOW, versioned=False), Delete)
    assert isinstance(disposal_for(fs, TrashPolicy(enabled=False), {}, NOW, versioned=False), Delete)


def test_local_and_s3_use_the_trash_root_only_when_one_is_set_and_versions_are_not_kept() -> None:
    fs = FakeFileSystem()
    assert isinstance(disposal_for(fs, TrashPolicy(), {}, NOW, versioned=False), Delete)
    chosen = disposal_for(fs, TrashPolicy(root="/trash"), {}, NOW, versioned=False)
    assert chosen == PrefixTrash(fs, "/trash", "261202063000")
    assert isinstance(disposal_for(fs, TrashPolicy(root="/trash"), {}, NOW, versioned=True), S3Versions)
    assert isinstance(disposal_for(fs, TrashPolicy(), {}, NOW, versioned=True), S3Versions)
    assert isinstance(disposal_for(fs, TrashPolicy(), {"auto.purge": "true"}, NOW, versioned=True), Delete)


def test_the_ledger_says_where_each_file_went_on_hdfs() -> None:
    fs = FakeHdfs()
    fs.add_acid_dirs(TABLE, [D1])
    removal = remove(fs, table())
    assert sorted((item.path, item.went) for item in removal.files) == [
        ("_orc_acid_version", f"trash:/user/u/.Trash/Current{TABLE}/{D1}/_orc_acid_version"),
        ("bucket_00000", f"trash:/user/u/.Trash/Current{TABLE}/{D1}/bucket_00000"),
    ]
    assert all(item.directory == D1 and item.identity.startswith("born=") for item in removal.files)
    assert f"{TABLE}/{D1}" not in fs.dirs


def test_a_namenode_without_trash_deletes_and_the_ledger_says_gone() -> None:
    fs = FakeHdfs(enabled=False)
    fs.add_acid_dirs(TABLE, [D1])
    removal = remove(fs, table())
    assert [item.went for item in removal.files] == ["gone", "gone"]
    assert not any(name.startswith(f"{TABLE}/") for name in fs.files)


def test_auto_purge_deletes_on_hdfs_and_the_ledger_says_gone() -> None:
    fs = FakeHdfs()
    fs.add_acid_dirs(TABLE, [D1])
    removal = remove(fs, table({"auto.purge": "true"}))
    assert [item.went for item in removal.files] == ["gone", "gone"]
    assert not any(name.startswith("/user/") for name in fs.files)


def test_a_versioned_s3_delete_records_the_version_it_leaves() -> None:
    fs = FakeFileSystem()
    assert version_of("etag=abc,modified=1,version=3HL4kqtJlcpXroDTDmJ") == "3HL4kqtJlcpXroDTDmJ"
    assert version_of("etag=abc,modified=1") is None
    fs.add_acid_dirs(TABLE, [D1])
    [one] = Delete(fs).dispose(f"{TABLE}/{D1}", [checked_directory(fs, f"{TABLE}/{D1}", D1).files[0]])
    assert one == "gone"


def test_trash_checkpoints_expire_after_the_interval_only() -> None:
    names = [checkpoint_name(datetime(2026, 12, 1, 6, 29, tzinfo=timezone.utc)), "261202060000", "Current", "x"]
    assert expired_checkpoints(names, NOW, 1440) == ["261201062900"]
    assert expired_checkpoints(names, NOW, 10) == ["261201062900", "261202060000"]
    assert trash_path("/trash/", "261202063000", "/warehouse/t/d/f") == "/trash/261202063000/warehouse/t/d/f"


def test_a_replication_source_is_named_in_one_line() -> None:
    note = replication_note({"repl.source.for": "policy1"})
    assert note is not None and "repl.source.for=policy1" in note and "\n" not in note
    assert replication_note({}) is None


def remove(fs: FakeFileSystem, now: TableInfo) -> Any:
    cleanup = CheckedCleanup(TableIdentity.of(now), (checked_directory(fs, f"{TABLE}/{D1}", D1),))
    planned = PlannedRemoval(
        cleanup,
        fs,
        lambda name: f"{TABLE}/{name}",
        lambda: now,
        {},
        lambda read: disposal_for(fs, TrashPolicy(), read.parameters, NOW, versioned=False),
    )
    [removal] = remove_all([planned], lambda function, items: [function(item) for item in items], lambda: None)
    return removal


@pytest.mark.rule9
def test_only_files_confirmed_by_rule_9_reach_the_trash() -> None:
    fs = FakeHdfs()
    fs.add_acid_dirs(TABLE, [D1])
    cleanup = CheckedCleanup(TableIdentity.of(table()), (checked_directory(fs, f"{TABLE}/{D1}", D1),))
    fs.put_file(f"{TABLE}/{D1}/bucket_00000", 100)  # written again after the check: another file
    planned = PlannedRemoval(
        cleanup,
        fs,
        lambda name: f"{TABLE}/{name}",
        table,
        {},
        lambda read: disposal_for(fs, TrashPolicy(), read.parameters, NOW, versioned=False),
    )
    [removal] = remove_all([planned], lambda function, items: [function(item) for item in items], lambda: None)
    assert [item.path for item in removal.files] == ["_orc_acid_version"]
    assert f"{TABLE}/{D1}/bucket_00000" in fs.files
    assert f"/user/u/.Trash/Current{TABLE}/{D1}/bucket_00000" not in fs.files


class ReplicationMetastore:
    def __init__(self, parameters: dict[str, dict[str, str]], fail: bool = False) -> None:
        self.parameters = parameters
        self.fail = fail
        self.asked: list[str] = []

    def database_parameters(self, db: str) -> dict[str, str]:
        self.asked.append(db)
        if self.fail:
            raise MetastoreError("cannot reach the Hive Metastore (get_database)")
        return self.parameters.get(db, {})


def test_a_replication_source_is_asked_once_and_named_once(caplog: pytest.LogCaptureFixture) -> None:
    metastore = ReplicationMetastore({"sales": {"repl.source.for": "nightly"}})
    check = ReplicationCheck()
    with caplog.at_level("WARNING", logger="acidclean.cleaner"):
        for _ in range(3):
            assert check.note(metastore, "sales") is not None
            assert check.note(metastore, "other") is None
    assert metastore.asked == ["sales", "other"]
    warnings = [record.getMessage() for record in caplog.records if "repl.source.for=nightly" in record.getMessage()]
    assert len(warnings) == 1


def test_a_metastore_that_cannot_tell_does_not_stop_the_cleanup() -> None:
    metastore = ReplicationMetastore({}, fail=True)
    check = ReplicationCheck()
    assert check.note(metastore, "sales") is None and check.note(metastore, "sales") is None
    assert metastore.asked == ["sales", "sales"]  # asked again: no answer was cached


def test_a_storage_that_cannot_say_where_files_go_deletes_nothing_and_is_checked_again() -> None:
    fs = FakeHdfs()
    fs.add_acid_dirs(TABLE, [D1])
    cleanup = CheckedCleanup(TableIdentity.of(table()), (checked_directory(fs, f"{TABLE}/{D1}", D1),))

    def unreadable(read: TableInfo) -> Any:
        raise StorageError("cannot read the versioning of bucket b: AccessDenied")

    planned = PlannedRemoval(cleanup, fs, lambda name: f"{TABLE}/{name}", table, {}, unreadable)
    [removal] = remove_all([planned], lambda function, items: [function(item) for item in items], lambda: None)
    assert removal.removed == () and removal.files == ()
    assert removal.errors and "AccessDenied" in removal.errors[0]
    assert f"{TABLE}/{D1}/bucket_00000" in fs.files
