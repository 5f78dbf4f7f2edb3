"""The lock-holding reader on the real metastore: it locks first and lists second (docs/design.md section 7, rule 2)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from producers_support import DB, new_table, write

from acidclean.cli import main as cli
from acidclean.producers.acid_files import write_acid_events
from acidclean.producers.hive_types import generate_rows
from acidclean.producers.locks import acquire_lock
from acidclean.producers.reader import LockedRead, locked_read
from acidclean.shared.acid.names import delta_name
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.metastore import LockRequestComponent, LockType, Operation
from acidclean.shared.orc.writer import insert_events, write_acid_version_file
from acidclean.shared.storage import open_location

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", autouse=True)
def database(metastore: HiveMetastore) -> None:
    metastore.create_database(DB)


def test_the_reader_holds_a_shared_read_lock_in_its_transaction_until_it_ends(
    metastore: HiveMetastore, unique_name: str
) -> None:
    new_table(metastore, unique_name)
    write(metastore, unique_name, rows=25, commits=2)
    with locked_read(metastore, DB, unique_name, with_row_id=True) as read:
        (lock,) = metastore.show_locks(DB, unique_name)
        assert (lock.lock_id, lock.txn_id, lock.lock_type, lock.state) == (
            read.lock_id,
            read.txn_id,
            "SHARED_READ",
            "ACQUIRED",
        )
        assert read.rows.num_rows == 50 and read.rows.column_names[:3] == ["originalTransaction", "bucket", "rowId"]
        assert read.rows.column_names[4:] == ["id", "v"]  # named as the metastore names the columns
    assert metastore.show_locks(DB, unique_name) == []


def test_a_reader_waiting_for_its_lock_lists_only_once_it_has_it_and_so_sees_what_was_committed_meanwhile(
    metastore: HiveMetastore, unique_name: str
) -> None:
    new_table(metastore, unique_name, buckets=1)
    write(metastore, unique_name, rows=10)
    location = open_location(metastore.get_table(DB, unique_name).location)
    # A writer holds an exclusive lock: the reader's SHARED_READ request has to wait for it.
    writer = metastore.open_txn()
    write_id = metastore.allocate_write_id(writer, DB, unique_name)
    exclusive = LockRequestComponent(DB, unique_name, lock_type=LockType.EXCLUSIVE, operation=Operation.UPDATE)
    acquire_lock(metastore, [exclusive], writer)

    seen: list[LockedRead] = []

    def read() -> None:
        with locked_read(metastore, DB, unique_name) as snapshot:
            seen.append(snapshot)

    reader = threading.Thread(target=read)
    reader.start()
    reader.join(2.0)
    assert reader.is_alive() and not seen  # still waiting for its lock, so it has not listed yet

    directory = location.child(delta_name(write_id, write_id, 0))
    rows = generate_rows([("id", "int"), ("v", "string")], 7, first_id=0, seed=0)
    write_acid_events(location.fs.arrow, f"{directory}/bucket_00000", insert_events(rows, write_id))
    write_acid_version_file(location.fs.arrow, directory)
    metastore.commit_txn(writer)  # releases the exclusive lock
    reader.join(30.0)
    (snapshot,) = seen
    assert snapshot.rows.num_rows == 17
    assert delta_name(write_id, write_id, 0) in snapshot.directories


def test_the_read_cli_counts_rows_and_releases_its_lock(
    metastore: HiveMetastore, metastore_uri: str, unique_name: str, tmp_path: Path
) -> None:
    new_table(metastore, unique_name)
    write(metastore, unique_name, rows=12, commits=2)
    env = {"ACIDCLEAN_METASTORE_URIS": metastore_uri}
    result = CliRunner().invoke(cli, ["read", f"{DB}.{unique_name}", "--count", "--hold", "0.5"], env=env)
    assert result.exit_code == 0, result.output
    assert "24" in result.output.splitlines()
    assert metastore.show_locks(DB, unique_name) == []
    rows = CliRunner().invoke(cli, ["read", f"{DB}.{unique_name}"], env=env)
    assert rows.exit_code == 0 and sum(line.startswith('{"id": ') for line in rows.output.splitlines()) == 24


@pytest.mark.rule2
@pytest.mark.metastore  # CI runs these on Hive 3 and 4 too
def test_a_partitioned_table_read_whole_locks_it_and_every_partition_before_listing_them(
    metastore: HiveMetastore, metastore_uri: str, unique_name: str
) -> None:
    new_table(metastore, unique_name, partitioned_by=[("ds", "string")])
    env = {"ACIDCLEAN_METASTORE_URIS": metastore_uri}
    empty = CliRunner().invoke(cli, ["read", f"{DB}.{unique_name}", "--count"], env=env)
    assert empty.exit_code == 0 and empty.stdout.splitlines() == ["0"], empty.output
    days = ("ds=2026-01-01", "ds=2026-01-02")
    for day, rows in zip(days, (10, 15), strict=True):
        write(metastore, unique_name, rows=rows, partition=day)
    with locked_read(metastore, DB, unique_name) as read:
        locks = metastore.show_locks(DB, unique_name)
        assert {lock.lock_id for lock in locks} == {read.lock_id}
        assert sorted((lock.partition or "") for lock in locks) == ["", *days]  # the table and each partition
        assert all(lock.lock_type == "SHARED_READ" and lock.state == "ACQUIRED" for lock in locks)
        assert read.rows.num_rows == 25
        assert read.rows.column_names[-1] == "ds"
        assert sorted(set(read.rows.column("ds").to_pylist())) == ["2026-01-01", "2026-01-02"]
        assert [name.split("/")[0] for name in read.directories] == list(days)
        assert read.location == metastore.get_table(DB, unique_name).location
    assert metastore.show_locks(DB, unique_name) == []
    counted = CliRunner().invoke(cli, ["read", f"{DB}.{unique_name}", "--count"], env=env)
    assert counted.exit_code == 0 and counted.stdout.splitlines() == ["25"], counted.output
    one = CliRunner().invoke(cli, ["read", f"{DB}.{unique_name}", "--partition", days[1], "--count"], env=env)
    assert one.exit_code == 0 and one.stdout.splitlines() == ["15"], one.output
