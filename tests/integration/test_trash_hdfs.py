"""Issue 54 on a real HDFS (the session's NameNode runs with fs.trash.interval on, as a cluster does):
a cleanup moves its files to the owner's .Trash/Current by default and deletes them with
auto.purge=true; its ledger is on the ledger topic; ``acidclean undo`` puts them back, and a reader
pinned to the snapshot taken before the vacuum reads the same rows as before it; an undo refuses a
table dropped and created again under the same name.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from cleaner_support import TENANT, Watcher, running_cleaner
from click.testing import CliRunner
from storage_support import StorageStack
from test_storages import IDENTITY_ORDER, StorageTable, new_table, table_settings, vacuum

from acidclean.cli import main
from acidclean.consumers.audit import read_audit
from acidclean.consumers.cleaner_process import CleanerOptions
from acidclean.consumers.undo_log import read_ledger_log, select_cleanups
from acidclean.deploy.local.hdfs import start_hdfs
from acidclean.deploy.local.process import stop_process
from acidclean.producers.ingest import create_table
from acidclean.schemas.events import CleanupDone
from acidclean.schemas.ledger import CleanupUndone
from acidclean.shared.acid.id_lists import reader_ids
from acidclean.shared.acid.write_ids import ValidTxnList
from acidclean.shared.orc.reader import read_snapshot
from acidclean.shared.settings import Settings
from acidclean.shared.storage import open_location
from acidclean.shared.storage.trash import HdfsTrash, TrashPolicy, disposal_for

pytestmark = pytest.mark.integration


@pytest.fixture
def watched() -> Iterator[list[Watcher]]:
    watchers: list[Watcher] = []
    yield watchers
    for watcher in watchers:
        watcher.close()


class PinnedReader:
    """A reader that took its snapshot (valid write ids and transactions) before the vacuum."""

    def __init__(self, table: StorageTable) -> None:
        metastore = table.storage.metastore
        self.table = table
        self.ids = reader_ids(metastore.valid_write_ids(table.db, table.name), metastore.kind)
        self.txns = ValidTxnList.from_string(metastore.valid_txn_list())

    def rows(self) -> pa.Table:
        location = self.table.location
        rows = read_snapshot(location.fs.arrow, location.path, self.ids, with_row_id=True, valid_txns=self.txns)
        return rows.sort_by(IDENTITY_ORDER)


def cleaned(table: StorageTable, settings: Settings, spark: Any, watched: list[Watcher]) -> tuple[Any, CleanupDone]:
    watcher = Watcher(settings)
    watched.append(watcher)
    result = vacuum(table, settings, spark)
    assert result.status == "committed" and result.publish is not None
    event = result.publish.event
    with running_cleaner(settings, CleanerOptions(cleaner_id=f"trash-{table.name}")):
        [done] = watcher.wait_for(lambda: watcher.done(event), 60, "CleanupDone")
    return event, done


def cli_env(settings: Settings, tmp_path: Path) -> dict[str, str]:
    return {
        "ACIDCLEAN_STATE_DIR": str(tmp_path / "no-stack"),
        "ACIDCLEAN_KAFKA_BOOTSTRAP": settings.kafka["bootstrap.servers"],
        "ACIDCLEAN_TOPIC_PREFIX": settings.topic_prefix,
        "ACIDCLEAN_METASTORE_URIS": settings.metastore_uris,
        "ACIDCLEAN_TENANT": TENANT,
    }


def set_table_parameter(table: StorageTable, key: str, value: str) -> None:
    """ALTER TABLE ... SET TBLPROPERTIES, through the metastore's Thrift API."""
    metastore = table.storage.metastore
    thrift_table = metastore._get_thrift_table(table.db, table.name)
    thrift_table.parameters[key] = value
    metastore._call("alter_table", lambda client: client.alter_table(table.db, table.name, thrift_table))


def test_a_cleanup_goes_to_the_hdfs_trash_and_undo_gives_a_pinned_reader_its_rows_back(
    hdfs_stack: StorageStack, kafka_bootstrap: str, spark: Any, unique_name: str, tmp_path: Path, watched: list[Watcher]
) -> None:
    table = new_table(hdfs_stack, unique_name)
    table.write(commits=3, delete_fraction=0.1)
    pinned = PinnedReader(table)
    before = pinned.rows()
    settings = table_settings(hdfs_stack, table, kafka_bootstrap, tmp_path)
    event, done = cleaned(table, settings, spark, watched)

    location = table.location
    assert not set(event.obsolete_directories) & table.children()
    [chunks] = select_cleanups(read_ledger_log(settings), str(done.event_id), None, None)
    files = sum(chunk.files for chunk in chunks)
    assert files == sum(directory.file_count for directory in done.directories_removed) > 0
    # Hadoop's default trash policy: the owner's .Trash/Current/<original path>, each file there now.
    trash = [path for path in _ledger_destinations(settings, done)]
    assert all(f"/.Trash/Current{location.path}/" in path for path in trash) and len(trash) == files
    assert all(location.fs.exists(path) for path in trash)

    runner = CliRunner()
    env = cli_env(settings, tmp_path)
    dry = runner.invoke(main, ["undo", str(done.event_id)], env=env, catch_exceptions=False)
    assert dry.exit_code == 0, dry.output
    assert f"would put back {files} file(s)" in dry.stdout and "dry run: nothing moved" in dry.stdout
    assert not set(event.obsolete_directories) & table.children()

    applied = runner.invoke(main, ["undo", str(done.event_id), "--apply"], env=env, catch_exceptions=False)
    assert applied.exit_code == 0, applied.output
    assert f"put back {files} file(s)" in applied.stdout
    assert set(event.obsolete_directories) <= table.children()
    assert pinned.rows().equals(before)
    undone = [
        item
        for items in read_ledger_log(settings).undone.values()
        for item in items
        if item.cleanup_id == done.event_id
    ]
    assert [(item.restored_files, item.refused_files) for item in undone] == [(files, 0)]
    assert isinstance(undone[0], CleanupUndone)
    [row] = read_audit(settings, table=table.full_name)[0]
    assert row.state == "cleaned" and row.reason is not None
    assert f"{files} file(s) put back, 0 refused" in row.reason and "undone " in row.reason

    # Undone once, the files are back: a second undo refuses every file, and overwrites none.
    again = runner.invoke(main, ["undo", str(done.event_id), "--apply"], env=env, catch_exceptions=False)
    assert again.exit_code == 1 and "exists again" in again.stdout
    assert pinned.rows().equals(before)


def test_auto_purge_deletes_on_hdfs_and_undo_says_there_is_nothing_to_put_back(
    hdfs_stack: StorageStack, kafka_bootstrap: str, spark: Any, unique_name: str, tmp_path: Path, watched: list[Watcher]
) -> None:
    table = new_table(hdfs_stack, unique_name)
    table.write(commits=3)
    set_table_parameter(table, "auto.purge", "true")
    # The replication check's one metastore call (get_database) answers on this metastore: not a source.
    assert "repl.source.for" not in hdfs_stack.metastore.database_parameters(table.db)
    settings = table_settings(hdfs_stack, table, kafka_bootstrap, tmp_path)
    event, done = cleaned(table, settings, spark, watched)
    assert not set(event.obsolete_directories) & table.children()
    assert set(_ledger_destinations(settings, done)) == {"gone"}
    location = table.location
    users = [entry.name for entry in location.fs.list_dir("/user")] if location.fs.exists("/user") else []
    for user in users:
        assert not location.fs.exists(f"/user/{user}/.Trash/Current{location.path}")
    result = CliRunner().invoke(main, ["undo", str(done.event_id)], env=cli_env(settings, tmp_path))
    assert "deleted outright (auto.purge=true" in result.stdout


@pytest.mark.rule9
def test_undo_refuses_a_table_dropped_and_created_again_under_the_same_name(
    hdfs_stack: StorageStack, kafka_bootstrap: str, spark: Any, unique_name: str, tmp_path: Path, watched: list[Watcher]
) -> None:
    table = new_table(hdfs_stack, unique_name)
    table.write(commits=3)
    settings = table_settings(hdfs_stack, table, kafka_bootstrap, tmp_path)
    _, done = cleaned(table, settings, spark, watched)
    time.sleep(1.1)  # Hive 2 and 3 tell tables apart by create time in seconds (rule 9's identity there)
    hdfs_stack.metastore.drop_table(table.db, table.name, delete_data=True)
    create_table(hdfs_stack.metastore, table.db, table.name, (("id", "int"), ("v", "string")), buckets=2)
    table.write(commits=3)  # the new table's deltas have the old one's names: delta_1_1 ...
    children = table.children()
    result = CliRunner().invoke(main, ["undo", str(done.event_id), "--apply"], env=cli_env(settings, tmp_path))
    assert result.exit_code == 1 and "undo never puts files into another table" in result.stdout
    assert table.children() == children


def _ledger_destinations(settings: Settings, done: CleanupDone) -> list[str]:
    from acidclean.consumers.ledger import assemble
    from acidclean.shared.storage import open_location

    [chunks] = select_cleanups(read_ledger_log(settings), str(done.event_id), None, None)
    ledger = assemble(chunks, open_location(chunks[0].location).path)
    return [item.went.removeprefix("trash:") for item in ledger.files]


def test_a_namenode_without_trash_makes_the_cleanup_delete_whatever_the_client_says(tmp_path: Path) -> None:
    """hdfs-native's trash() asks the NameNode for its fs.trash.interval; at 0 it refuses (even with
    fs.trash.interval set on the client), and the files are deleted, as Hive's moveToTrash does then."""
    process, namenode = start_hdfs(tmp_path / "no-trash", trash_interval_min=0)
    try:
        location = open_location(
            f"{namenode}/warehouse/no_trash/t", {"ACIDCLEAN_HDFS_CONFIG": "fs.trash.interval=1440"}
        )
        directory = location.child("delta_0000001_0000001_0000")
        location.fs.make_dirs(directory)
        with location.fs.arrow.open_output_stream(f"{directory}/bucket_00000") as out:
            out.write(b"rows")
        files = location.fs.list_files(directory)
        disposal = disposal_for(location.fs, TrashPolicy(), {}, datetime.now(timezone.utc), versioned=False)
        assert isinstance(disposal, HdfsTrash)
        assert disposal.dispose(directory, files) == ["gone"]
        assert location.fs.list_files(directory) == []
        assert not location.fs.exists("/user")  # no trash directory was made for anyone
    finally:
        stop_process(process.pid, process.name)
