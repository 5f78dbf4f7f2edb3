"""HDFS storage against a real NameNode and DataNode (MiniDFSCluster, started here on 127.0.0.1): what
the cleaner and the vacuum do to a table directory on HDFS through ``open_location``, that pyarrow
reads and writes ORC through it, and that a directory rename is the NameNode's one atomic rename,
as its audit log shows.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.orc as orc
import pytest
from storage_support import StorageStack

from acidclean.deploy.local.hdfs import hdfs_ready
from acidclean.deploy.local.process import free_port
from acidclean.shared.storage import Entry, StorageError, StorageLocation, TreeSize, open_location
from acidclean.shared.storage.hdfs import open_hdfs

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Hdfs:
    uri: str  # hdfs://127.0.0.1:PORT
    audit_log: Path

    def audit_lines(self) -> list[str]:
        return self.audit_log.read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def hdfs(hdfs_stack: StorageStack) -> Hdfs:
    """The session's HDFS (one per test session, started by the ``hdfs_stack`` fixture)."""
    assert hdfs_stack.namenode is not None and hdfs_stack.request_log is not None
    return Hdfs(hdfs_stack.namenode, hdfs_stack.request_log)


@pytest.fixture
def table(hdfs: Hdfs, request: pytest.FixtureRequest) -> StorageLocation:
    """A table directory of its own under /warehouse."""
    location = open_location(f"{hdfs.uri}/warehouse/hdfs_it.db/{request.node.name}")
    location.fs.make_dirs(location.path)
    return location


def write(location: StorageLocation, path: str, data: bytes) -> None:
    with location.fs.arrow.open_output_stream(path) as out:
        out.write(data)


def test_paths_are_the_uri_path_and_one_client_serves_a_namenode(hdfs: Hdfs) -> None:
    first = open_location(f"{hdfs.uri}/warehouse/db.db/t/")
    second = open_location(f"{hdfs.uri}/warehouse/other.db/u")
    assert first.path == "/warehouse/db.db/t"
    assert first.fs is second.fs
    assert first.fs.real_path(first.path) == first.path


def test_list_exists_tree_size_and_read_file(table: StorageLocation) -> None:
    write(table, table.child("delta_0000001_0000001_0000/bucket_00000"), b"12345")
    write(table, table.child("delta_0000001_0000001_0000/_orc_acid_version"), b"2")
    write(table, table.child("base_0000001/bucket_00000"), b"1234567890")
    write(table, table.child("_vacuum_marker"), b"{}")

    assert sorted(table.fs.list_dir(table.path), key=lambda entry: entry.name) == [
        Entry("_vacuum_marker", is_dir=False, size=2),
        Entry("base_0000001", is_dir=True, size=0),
        Entry("delta_0000001_0000001_0000", is_dir=True, size=0),
    ]
    assert table.fs.exists(table.child("base_0000001"))
    assert not table.fs.exists(table.child("base_0000002"))
    assert table.fs.tree_size(table.path) == TreeSize(files=4, bytes=18)
    assert table.fs.tree_size(table.child("delta_0000001_0000001_0000")) == TreeSize(files=2, bytes=6)
    assert table.fs.tree_size(table.child("missing")) == TreeSize(0, 0)
    assert table.fs.read_file(table.child("_vacuum_marker")) == b"{}"
    assert table.fs.read_file(table.child("no_marker")) is None


def test_list_dir_of_a_missing_directory_or_a_file_is_a_storage_error(table: StorageLocation) -> None:
    write(table, table.child("file"), b"x")
    with pytest.raises(StorageError, match="does not exist"):
        table.fs.list_dir(table.child("missing"))
    with pytest.raises(StorageError, match="cannot list"):
        table.fs.list_dir(table.child("file"))


def test_delete_dir_removes_the_tree_and_a_second_delete_is_a_no_op(table: StorageLocation) -> None:
    obsolete = table.child("delta_0000002_0000002_0000")
    write(table, f"{obsolete}/bucket_00000", b"rows")
    write(table, f"{obsolete}/sub/bucket_00001", b"more rows")
    table.fs.delete_dir(obsolete)
    assert not table.fs.exists(obsolete)
    assert table.fs.list_dir(table.path) == []
    table.fs.delete_dir(obsolete)


def test_orc_written_and_read_by_pyarrow(table: StorageLocation) -> None:
    rows = pa.table({"id": pa.array(range(5000), pa.int64()), "city": ["St. John's"] * 5000})
    path = table.child("base_0000005/bucket_00000")
    table.fs.make_dirs(table.child("base_0000005"))
    with table.fs.arrow.open_output_stream(path) as out:
        orc.write_table(rows, out)
    assert orc.read_table(table.fs.arrow.open_input_file(path)).equals(rows)
    assert orc.ORCFile(table.fs.arrow.open_input_file(path)).nrows == 5000


def test_rename_of_a_directory_with_files_is_one_namenode_rename(hdfs: Hdfs, table: StorageLocation) -> None:
    staging = table.child("_tmp.base_0000007")
    final = table.child("base_0000007")
    names = [f"bucket_{bucket:05d}" for bucket in range(5)]
    for name in names:
        write(table, f"{staging}/{name}", name.encode())
    before = {info.path.rsplit("/", 1)[1]: info.mtime for info in _files(table, staging)}
    audited_before = len(hdfs.audit_lines())

    table.fs.rename(staging, final)

    calls = [line for line in hdfs.audit_lines()[audited_before:] if staging in line or final in line]
    changes = [line for line in calls if "cmd=getfileinfo" not in line]
    assert len(changes) == 1, calls
    assert "cmd=rename" in changes[0] and f"src={staging}\t" in changes[0] and f"dst={final}\t" in changes[0]
    # the files moved, not copied: each keeps its modification time
    assert {info.path.rsplit("/", 1)[1]: info.mtime for info in _files(table, final)} == before
    assert not table.fs.exists(staging)


def _files(location: StorageLocation, path: str) -> list[pa.fs.FileInfo]:
    import pyarrow.fs as pafs

    return [
        info
        for info in location.fs.arrow.get_file_info(pafs.FileSelector(path, recursive=True))
        if info.type == pafs.FileType.File
    ]


def test_rename_onto_an_existing_directory_is_refused_and_moves_nothing(table: StorageLocation) -> None:
    write(table, table.child("delta_3/bucket_00000"), b"new")
    write(table, table.child("base_3/bucket_00000"), b"old")
    with pytest.raises(StorageError, match="exists"):
        table.fs.rename(table.child("delta_3"), table.child("base_3"))
    assert table.fs.read_file(table.child("base_3/bucket_00000")) == b"old"
    assert table.fs.read_file(table.child("delta_3/bucket_00000")) == b"new"


def test_partition_directory_names_are_taken_literally(hdfs: Hdfs, table: StorageLocation) -> None:
    """Hive escapes partition values itself and writes the escaped name as the directory name."""
    partition = open_location(f"{table.uri}/city=St. John%27s%232")
    write(partition, partition.child("bucket_00000"), b"x")
    assert [entry.name for entry in table.fs.list_dir(table.path)] == ["city=St. John%27s%232"]
    assert partition.fs.tree_size(partition.path) == TreeSize(1, 1)


def test_many_threads_share_one_client(table: StorageLocation) -> None:
    failures: list[BaseException] = []

    def work(index: int) -> None:
        try:
            write(table, table.child(f"_tmp.delta_{index}/bucket_00000"), b"x" * index)
            table.fs.rename(table.child(f"_tmp.delta_{index}"), table.child(f"delta_{index}"))
            table.fs.list_dir(table.path)
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=work, args=(index,)) for index in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == []
    assert sorted(entry.name for entry in table.fs.list_dir(table.path)) == sorted(f"delta_{i}" for i in range(12))
    assert table.fs.tree_size(table.path) == TreeSize(12, sum(range(12)))


def test_namenode_refusal_is_a_storage_error_in_one_line(table: StorageLocation) -> None:
    write(table, table.child("file"), b"x")
    with pytest.raises(StorageError) as refused:
        table.fs.make_dirs(table.child("file/sub"))
    assert "ParentNotDirectoryException" in str(refused.value)
    assert "\tat org.apache" not in str(refused.value)


def test_unreachable_namenode_is_a_storage_error_that_says_what_to_check() -> None:
    closed = f"hdfs://127.0.0.1:{free_port()}/warehouse/t"
    fs, path = open_hdfs(closed, environ={"ACIDCLEAN_HDFS_CONFIG": "dfs.client.failover.max.attempts=0"})
    started = time.monotonic()
    with pytest.raises(StorageError, match=r"is the NameNode 127\.0\.0\.1:\d+ running and reachable"):
        fs.exists(path)
    with pytest.raises(StorageError, match="running and reachable"):
        fs.read_file(path)  # not "no such file": an unreachable NameNode must not look like a missing marker
    with pytest.raises(StorageError, match="running and reachable"):
        fs.list_dir(path)
    assert time.monotonic() - started < 30


def test_hdfs_ready_answers_for_a_running_namenode_only(hdfs: Hdfs) -> None:
    assert hdfs_ready(hdfs.uri)
    assert not hdfs_ready(f"hdfs://127.0.0.1:{free_port()}")


def test_the_warehouse_is_writable_by_all(hdfs: Hdfs) -> None:
    fs, path = open_hdfs(f"{hdfs.uri}/warehouse")
    assert fs.exists(path)
    native = fs.native  # type: ignore[attr-defined]
    assert native.get_file_info("/warehouse").permission == 0o777
