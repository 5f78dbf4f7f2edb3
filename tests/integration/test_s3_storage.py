"""S3 storage against a real S3 API server (moto, started here on 127.0.0.1): what the cleaner does to
a table directory on S3, the number of requests a delete costs, and that a throttled delete is
retried, then reported as failed, never as done.

Faults come from a small HTTP proxy between the client and moto that answers DeleteObjects with
503 SlowDown, per-key SlowDown errors or 403 AccessDenied, as a busy or misconfigured bucket does.
"""

from __future__ import annotations

import http.client
import math
import os
import threading
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
import pyarrow as pa
import pyarrow.orc as orc
import pytest
from storage_support import StorageStack

from acidclean.deploy.local.s3 import S3Endpoint, s3_ready, s3_requests
from acidclean.shared.storage import StorageError, StorageLocation, TreeSize, open_location
from acidclean.shared.storage.s3 import s3_options

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class S3Server:
    endpoint: S3Endpoint
    request_log: Path

    def requests(self) -> Any:
        return s3_requests(self.request_log)


@pytest.fixture(scope="module")
def s3(s3_stack: StorageStack) -> Iterator[S3Server]:
    """The session's S3 server (one per test session, started by the ``s3_stack`` fixture, which points
    this process's environment at it), with the client's tuning variables unset."""
    assert s3_stack.s3_endpoint is not None and s3_stack.request_log is not None
    environment = pytest.MonkeyPatch()
    try:
        for name in (
            "ACIDCLEAN_S3_DELETE_PAGE_SIZE",
            "ACIDCLEAN_S3_DELETE_ATTEMPTS",
            "AWS_PROFILE",
            "AWS_SESSION_TOKEN",
            "AWS_ENDPOINT_URL",
        ):
            environment.delenv(name, raising=False)
        environment.setenv("NO_PROXY", "127.0.0.1")
        yield S3Server(s3_stack.s3_endpoint, s3_stack.request_log)
    finally:
        environment.undo()


@pytest.fixture
def table(s3: S3Server, request: pytest.FixtureRequest) -> StorageLocation:
    """A table directory of its own under the bucket's warehouse."""
    return open_location(s3.endpoint.uri(f"warehouse/s3_it.db/{request.node.name}"))


def boto3_client(endpoint: S3Endpoint) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint.endpoint_url,
        region_name=endpoint.region,
        aws_access_key_id=endpoint.access_key,
        aws_secret_access_key=endpoint.secret_key,
    )


def put_objects(endpoint: S3Endpoint, location: StorageLocation, names: list[str]) -> None:
    """One PutObject each (pyarrow's writer would spend three requests on a multipart upload)."""
    client = boto3_client(endpoint)
    key_prefix = location.path.partition("/")[2]
    for name in names:
        client.put_object(Bucket=endpoint.bucket, Key=f"{key_prefix}/{name}", Body=name.encode())


def write(location: StorageLocation, name: str, data: bytes) -> None:
    with location.fs.arrow.open_output_stream(location.child(name)) as stream:
        stream.write(data)


def test_the_server_is_ready_with_its_bucket(s3: S3Server) -> None:
    assert s3_ready(s3.endpoint)
    assert not s3_ready(S3Endpoint(s3.endpoint.endpoint_url, "no-such-bucket", "a", "b", "us-east-1"))


def test_key_prefixes_list_as_directories_and_objects_as_files(table: StorageLocation) -> None:
    write(table, "delta_0000001_0000001_0000/bucket_00000", b"abc")  # a directory with no marker object
    table.fs.make_dirs(table.child("base_0000001"))  # an empty directory: only a marker object
    write(table, "_orc_acid_version", b"2")

    entries = {entry.name: entry for entry in table.fs.list_dir(table.path)}

    assert sorted(entries) == ["_orc_acid_version", "base_0000001", "delta_0000001_0000001_0000"]
    assert entries["delta_0000001_0000001_0000"].is_dir and entries["base_0000001"].is_dir
    assert not entries["_orc_acid_version"].is_dir and entries["_orc_acid_version"].size == 1
    assert not any(entry.is_symlink for entry in entries.values())
    assert table.fs.exists(table.child("base_0000001")) and table.fs.exists(table.child("delta_0000001_0000001_0000"))
    assert not table.fs.exists(table.child("delta_0000002_0000002_0000"))
    assert table.fs.real_path(table.path) == table.path


def test_listing_a_missing_directory_is_a_storage_error(table: StorageLocation) -> None:
    with pytest.raises(StorageError, match="does not exist"):
        table.fs.list_dir(table.child("nothing_here"))


def test_tree_size_counts_objects_and_bytes_but_not_directory_markers(table: StorageLocation) -> None:
    table.fs.make_dirs(table.child("delta_1_1/empty"))
    write(table, "delta_1_1/bucket_00000", b"x" * 100)
    write(table, "delta_1_1/sub/bucket_00001", b"y" * 23)
    write(table, "delta_1_1/empty_file", b"")

    assert table.fs.tree_size(table.child("delta_1_1")) == TreeSize(files=3, bytes=123)
    assert table.fs.tree_size(table.child("missing")) == TreeSize(0, 0)


def test_read_file_returns_the_bytes_or_none(table: StorageLocation) -> None:
    write(table, "_acidclean_marker.json", b'{"job": 1}')

    assert table.fs.read_file(table.child("_acidclean_marker.json")) == b'{"job": 1}'
    assert table.fs.read_file(table.child("missing.json")) is None


def test_orc_written_and_read_through_the_location(table: StorageLocation) -> None:
    rows = pa.table({"id": pa.array(range(1000), pa.int32()), "v": [f"row {i}" for i in range(1000)]})
    path = table.child("base_0000005/bucket_00000")
    with table.fs.arrow.open_output_stream(path) as stream:
        orc.write_table(rows, stream)

    with table.fs.arrow.open_input_file(path) as source:
        assert orc.read_table(source).equals(rows)
    assert table.fs.tree_size(table.child("base_0000005")).files == 1


def test_a_small_file_is_written_with_one_put_object(s3: S3Server, table: StorageLocation) -> None:
    before = s3.requests()

    write(table, "_acidclean_vacuum.json", b"{}")

    assert s3.requests() - before == {"PutObject": 1}


def test_rename_refuses_and_copies_nothing(s3: S3Server, table: StorageLocation) -> None:
    write(table, "_tmp_vacuum/base_0000002/bucket_00000", b"data")
    before = s3.requests()

    with pytest.raises(StorageError, match="no atomic directory rename"):
        table.fs.rename(table.child("_tmp_vacuum/base_0000002"), table.child("base_0000002"))

    made = s3.requests() - before
    assert made["CopyObject"] == 0 and made["DeleteObject"] == 0 and made["DeleteObjects"] == 0
    assert table.fs.read_file(table.child("_tmp_vacuum/base_0000002/bucket_00000")) == b"data"
    assert not table.fs.exists(table.child("base_0000002"))


def test_delete_dir_of_600_objects_sends_one_listing_and_three_pages_of_250(
    s3: S3Server, table: StorageLocation
) -> None:
    names = [f"delta_0000001_0000009/bucket_{i:05d}" for i in range(599)]
    put_objects(s3.endpoint, table, names)
    table.fs.make_dirs(table.child("delta_0000001_0000009"))  # the marker object makes 600 keys
    write(table, "base_0000009/bucket_00000", b"keep")
    before = s3.requests()

    table.fs.delete_dir(table.child("delta_0000001_0000009"))

    made = s3.requests() - before
    assert made == {"ListObjectsV2": 1, "DeleteObjects": math.ceil(600 / 250)}
    assert not table.fs.exists(table.child("delta_0000001_0000009"))
    assert [entry.name for entry in table.fs.list_dir(table.path)] == ["base_0000009"]


def test_a_cleanup_lists_its_table_once_for_the_children_their_sizes_and_their_deletes(
    s3: S3Server, table: StorageLocation
) -> None:
    singles = [f"delta_000000{i}_000000{i}_0000" for i in (1, 2, 3)]
    put_objects(s3.endpoint, table, [f"{name}/{file}" for name in singles for file in ("bucket_00000", "_side")])
    write(table, "delta_0000001_0000003/bucket_00000", b"compacted")
    before = s3.requests()

    children = table.fs.list_dir(table.path)  # the cleaner's listing of one check
    sizes = {name: table.fs.tree_size(table.child(name)) for name in singles}
    for name in singles:
        table.fs.delete_dir(table.child(name))

    made = s3.requests() - before
    assert made == {"ListObjectsV2": 1, "DeleteObjects": 3}
    assert sorted(entry.name for entry in children) == sorted([*singles, "delta_0000001_0000003"])
    assert all(size.files == 2 and size.bytes > 0 for size in sizes.values())
    assert [entry.name for entry in table.fs.list_dir(table.path)] == ["delta_0000001_0000003"]


def test_a_listing_too_old_to_reuse_is_not_used_for_a_delete(
    s3: S3Server, table: StorageLocation, monkeypatch: pytest.MonkeyPatch
) -> None:
    put_objects(s3.endpoint, table, ["delta_0000001_0000001_0000/bucket_00000"])
    table.fs.list_dir(table.path)
    put_objects(s3.endpoint, table, ["delta_0000001_0000001_0000/bucket_00001"])  # written after that listing
    monkeypatch.setattr("acidclean.shared.storage.s3.LISTING_REUSE_S", 0.0)
    before = s3.requests()

    table.fs.delete_dir(table.child("delta_0000001_0000001_0000"))

    assert s3.requests() - before == {"ListObjectsV2": 1, "DeleteObjects": 1}
    assert not table.fs.exists(table.child("delta_0000001_0000001_0000"))


def test_delete_dir_of_a_missing_directory_deletes_nothing(s3: S3Server, table: StorageLocation) -> None:
    write(table, "delta_0000001_0000001/bucket_00000", b"x")
    before = s3.requests()

    table.fs.delete_dir(table.child("delta_0000002_0000002"))

    assert s3.requests() - before == {"ListObjectsV2": 1}
    assert table.fs.exists(table.child("delta_0000001_0000001/bucket_00000"))


def test_delete_dir_does_not_touch_a_sibling_sharing_the_name_prefix(s3: S3Server, table: StorageLocation) -> None:
    # Keys are strings: "delta_1_1" is a prefix of "delta_1_1_v5"; only delta_1_1/ must go.
    put_objects(s3.endpoint, table, ["delta_1_1/bucket_00000", "delta_1_1_v5/bucket_00000", "delta_1_1.txt"])

    table.fs.delete_dir(table.child("delta_1_1"))

    assert sorted(entry.name for entry in table.fs.list_dir(table.path)) == ["delta_1_1.txt", "delta_1_1_v5"]


def test_delete_dir_refuses_a_whole_bucket(s3: S3Server) -> None:
    location = open_location(s3.endpoint.uri(""))
    with pytest.raises(StorageError, match="whole bucket"):
        location.fs.delete_dir(location.path)


def test_make_dirs_creates_an_empty_directory(table: StorageLocation) -> None:
    table.fs.make_dirs(table.child("_tmp_vacuum_7/base_0000003"))

    assert table.fs.exists(table.child("_tmp_vacuum_7/base_0000003"))
    assert table.fs.list_dir(table.child("_tmp_vacuum_7/base_0000003")) == []
    assert table.fs.tree_size(table.child("_tmp_vacuum_7")) == TreeSize(0, 0)


# --- Faults -------------------------------------------------------------------------------------

SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message><RequestId>fault</RequestId></Error>"
)
ACCESS_DENIED = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>'
    b"<Message>Access Denied</Message><RequestId>fault</RequestId></Error>"
)


class FaultyProxy:
    """An HTTP proxy in front of the S3 server that spoils DeleteObjects requests on demand.

    ``throttle`` DeleteObjects requests get 503 SlowDown (-1: all of them); ``slow_keys`` requests get
    a 200 whose first half of keys failed with SlowDown (the rest really deleted); ``deny`` answers
    403 AccessDenied. ``delete_pages`` records the number of keys of every DeleteObjects seen.
    """

    def __init__(self, upstream: S3Endpoint) -> None:
        self.upstream = urlsplit(upstream.endpoint_url)
        self.direct = boto3_client(upstream)
        self.throttle = 0
        self.slow_keys = 0
        self.deny = False
        self.delete_pages: list[int] = []
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                proxy.handle(self)

            do_PUT = do_POST = do_DELETE = do_HEAD = do_GET

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        body = request.rfile.read(int(request.headers.get("Content-Length") or 0))
        if request.command == "POST" and "delete" in urlsplit(request.path).query:
            elements = ElementTree.fromstring(body).iter()
            keys = [element.text or "" for element in elements if element.tag.endswith("Key")]
            with self.lock:
                self.delete_pages.append(len(keys))
                if self.deny:
                    return self.answer(request, 403, ACCESS_DENIED)
                if self.throttle:
                    self.throttle -= 1 if self.throttle > 0 else 0
                    return self.answer(request, 503, SLOW_DOWN)
                if self.slow_keys:
                    self.slow_keys -= 1
                    return self.answer(request, 200, self.fail_first_half(request.path, keys))
        status, headers, payload = self.forward(request.command, request.path, dict(request.headers), body)
        self.answer(request, status, payload, headers)

    def fail_first_half(self, path: str, keys: list[str]) -> bytes:
        failed, deleted = keys[: len(keys) // 2], keys[len(keys) // 2 :]
        bucket = urlsplit(path).path.strip("/")
        for key in deleted:
            self.direct.delete_object(Bucket=bucket, Key=key)
        errors = "".join(
            f"<Error><Key>{key}</Key><Code>SlowDown</Code><Message>Reduce your request rate.</Message></Error>"
            for key in failed
        )
        return (
            '<?xml version="1.0" encoding="UTF-8"?><DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"{errors}</DeleteResult>"
        ).encode()

    def forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        connection = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=30)
        try:
            connection.request(method, path, body=body or None, headers=headers)
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()

    def answer(
        self, request: BaseHTTPRequestHandler, status: int, payload: bytes, headers: dict[str, str] | None = None
    ) -> None:
        request.send_response(status)
        for name, value in (headers or {"Content-Type": "application/xml"}).items():
            if name.lower() not in ("content-length", "transfer-encoding", "connection", "server", "date"):
                request.send_header(name, value)
        request.send_header("Content-Length", str(len(payload)))
        request.end_headers()
        if request.command != "HEAD":
            request.wfile.write(payload)


@pytest.fixture
def proxy(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultyProxy]:
    """The client talks to S3 through a :class:`FaultyProxy` for this test."""
    faulty = FaultyProxy(s3.endpoint)
    monkeypatch.setenv("ACIDCLEAN_S3_ENDPOINT", faulty.url)
    try:
        yield faulty
    finally:
        faulty.close()


def table_behind(proxy: FaultyProxy, s3: S3Server, request: pytest.FixtureRequest, names: list[str]) -> StorageLocation:
    """This test's table holding ``names`` (put straight into S3), as the client sees it through ``proxy``."""
    assert proxy.url in str(s3_options(os.environ).endpoint_url)
    location = open_location(s3.endpoint.uri(f"warehouse/s3_it.db/{request.node.name}"))
    put_objects(s3.endpoint, location, names)
    return location


def test_a_throttled_delete_page_is_retried_until_it_passes(
    s3: S3Server, proxy: FaultyProxy, request: pytest.FixtureRequest
) -> None:
    table = table_behind(proxy, s3, request, [f"delta_2_2/bucket_{i:05d}" for i in range(300)])
    proxy.throttle = 2

    table.fs.delete_dir(table.child("delta_2_2"))

    assert proxy.delete_pages == [250, 250, 250, 50]  # the first page twice throttled, then both pass
    assert not table.fs.exists(table.child("delta_2_2"))


def test_keys_that_failed_inside_a_delete_response_are_retried_alone(
    s3: S3Server, proxy: FaultyProxy, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    monkeypatch.setenv("ACIDCLEAN_S3_DELETE_PAGE_SIZE", "4")
    table = table_behind(proxy, s3, request, [f"delta_3_3/bucket_{i:05d}" for i in range(10)])
    proxy.slow_keys = 1

    table.fs.delete_dir(table.child("delta_3_3"))

    assert proxy.delete_pages == [4, 2, 4, 2]  # 2 of the first 4 keys refused, retried alone
    assert not table.fs.exists(table.child("delta_3_3"))


def test_a_delete_that_stays_throttled_fails_and_leaves_the_directory(
    s3: S3Server, proxy: FaultyProxy, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    monkeypatch.setenv("ACIDCLEAN_S3_DELETE_ATTEMPTS", "3")
    names = [f"delta_4_4/bucket_{i:05d}" for i in range(5)]
    table = table_behind(proxy, s3, request, names)
    proxy.throttle = -1

    with pytest.raises(StorageError, match=r"5 of a page of 5 objects still failed after 3 attempts.*SlowDown"):
        table.fs.delete_dir(table.child("delta_4_4"))

    assert proxy.delete_pages == [5, 5, 5]
    assert table.fs.tree_size(table.child("delta_4_4")) == TreeSize(5, sum(len(name) for name in names))


def test_access_denied_fails_at_once_without_retrying(
    s3: S3Server, proxy: FaultyProxy, request: pytest.FixtureRequest
) -> None:
    table = table_behind(proxy, s3, request, ["delta_5_5/bucket_00000"])
    proxy.deny = True

    with pytest.raises(StorageError, match="AccessDenied"):
        table.fs.delete_dir(table.child("delta_5_5"))

    assert proxy.delete_pages == [1]
    assert table.fs.exists(table.child("delta_5_5/bucket_00000"))
