"""S3 settings from the environment, S3 location URIs, delete paging and request naming: pure, no I/O."""

from __future__ import annotations

import json

import pytest

from acidclean.deploy.local.s3 import S3Endpoint, _records, s3_operation
from acidclean.shared.errors import ConfigurationError
from acidclean.shared.storage import StorageError
from acidclean.shared.storage.s3 import (
    DEFAULT_DELETE_PAGE_SIZE,
    S3Options,
    delete_pages,
    parse_endpoint,
    s3_options,
    split_s3_uri,
)


def test_nothing_set_means_aws_itself_with_the_default_chain() -> None:
    assert s3_options({}) == S3Options()
    assert S3Options().endpoint_url is None and S3Options().delete_page_size == 250 == DEFAULT_DELETE_PAGE_SIZE


def test_an_http_endpoint_selects_plain_http() -> None:
    options = s3_options({"ACIDCLEAN_S3_ENDPOINT": "http://127.0.0.1:9000/"})
    assert (options.scheme, options.endpoint_override) == ("http", "127.0.0.1:9000")
    assert options.endpoint_url == "http://127.0.0.1:9000"


def test_an_endpoint_without_scheme_is_https() -> None:
    assert parse_endpoint("s3.eu-west-1.amazonaws.com") == ("https", "s3.eu-west-1.amazonaws.com")


@pytest.mark.parametrize("endpoint", ["ftp://host", "http://", "http://host/path", "http://user:pw@host"])
def test_an_endpoint_with_a_path_credentials_or_odd_scheme_is_refused(endpoint: str) -> None:
    with pytest.raises(ConfigurationError, match="http\\(s\\)://host"):
        parse_endpoint(endpoint)


def test_acidclean_endpoint_wins_over_the_s3_one_which_wins_over_the_generic_one() -> None:
    environ = {"AWS_ENDPOINT_URL": "http://generic:1", "AWS_ENDPOINT_URL_S3": "http://s3only:2"}
    assert s3_options(environ).endpoint_override == "s3only:2"
    assert s3_options({"AWS_ENDPOINT_URL": "http://generic:1"}).endpoint_override == "generic:1"
    assert s3_options({**environ, "ACIDCLEAN_S3_ENDPOINT": "http://ours:3"}).endpoint_override == "ours:3"


def test_region_from_ours_then_aws_region_then_aws_default_region() -> None:
    assert s3_options({"AWS_DEFAULT_REGION": "eu-west-1"}).region == "eu-west-1"
    assert s3_options({"AWS_DEFAULT_REGION": "eu-west-1", "AWS_REGION": "eu-west-2"}).region == "eu-west-2"
    assert s3_options({"AWS_REGION": "eu-west-2", "ACIDCLEAN_S3_REGION": "us-east-1"}).region == "us-east-1"


@pytest.mark.parametrize(("value", "path_style"), [("true", True), ("1", True), ("FALSE", False), ("no", False)])
def test_path_style_flag(value: str, path_style: bool) -> None:
    assert s3_options({"ACIDCLEAN_S3_PATH_STYLE": value}).path_style is path_style


def test_a_path_style_value_that_is_no_boolean_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="ACIDCLEAN_S3_PATH_STYLE='maybe' is not a boolean"):
        s3_options({"ACIDCLEAN_S3_PATH_STYLE": "maybe"})


def test_our_keys_win_and_the_aws_session_token_does_not_go_with_them() -> None:
    environ = {
        "AWS_ACCESS_KEY_ID": "aws",
        "AWS_SECRET_ACCESS_KEY": "aws-secret",
        "AWS_SESSION_TOKEN": "token",
        "ACIDCLEAN_S3_ACCESS_KEY": "ours",
        "ACIDCLEAN_S3_SECRET_KEY": "our-secret",
    }
    options = s3_options(environ)
    assert (options.access_key, options.secret_key, options.session_token) == ("ours", "our-secret", None)


def test_aws_keys_carry_their_session_token_and_make_the_profile_irrelevant() -> None:
    options = s3_options(
        {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "s", "AWS_SESSION_TOKEN": "t", "AWS_PROFILE": "dev"}
    )
    assert (options.access_key, options.secret_key, options.session_token, options.profile) == ("a", "s", "t", None)


def test_without_keys_the_profile_is_used() -> None:
    assert s3_options({"AWS_PROFILE": "dev"}).profile == "dev"


@pytest.mark.parametrize(
    "environ",
    [
        {"ACIDCLEAN_S3_ACCESS_KEY": "only-the-key"},
        {"ACIDCLEAN_S3_SECRET_KEY": "only-the-secret"},
        {"AWS_ACCESS_KEY_ID": "only-the-key"},
    ],
)
def test_half_a_key_pair_is_refused(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError, match="both"):
        s3_options(environ)


def test_the_secret_never_shows_in_the_options_repr() -> None:
    options = s3_options({"ACIDCLEAN_S3_ACCESS_KEY": "key", "ACIDCLEAN_S3_SECRET_KEY": "very-secret"})
    assert "very-secret" not in repr(options) and "***" in repr(options)


@pytest.mark.parametrize(("value", "size"), [("1", 1), ("250", 250), ("1000", 1000), (" 500 ", 500)])
def test_delete_page_size(value: str, size: int) -> None:
    assert s3_options({"ACIDCLEAN_S3_DELETE_PAGE_SIZE": value}).delete_page_size == size


@pytest.mark.parametrize("value", ["0", "1001", "-5", "ten", "2.5"])
def test_a_delete_page_size_outside_1_to_1000_is_refused(value: str) -> None:
    with pytest.raises(ConfigurationError, match="from 1 to 1000"):
        s3_options({"ACIDCLEAN_S3_DELETE_PAGE_SIZE": value})


def test_delete_attempts() -> None:
    assert s3_options({"ACIDCLEAN_S3_DELETE_ATTEMPTS": "3"}).delete_attempts == 3
    with pytest.raises(ConfigurationError):
        s3_options({"ACIDCLEAN_S3_DELETE_ATTEMPTS": "0"})


def test_equal_environments_give_equal_options_so_one_cached_file_system() -> None:
    environ = {"ACIDCLEAN_S3_ENDPOINT": "http://127.0.0.1:9000", "AWS_REGION": "us-east-1"}
    assert s3_options(environ) == s3_options(dict(environ))
    assert hash(s3_options(environ)) == hash(s3_options(dict(environ)))


@pytest.mark.parametrize(
    ("uri", "bucket", "key"),
    [
        ("s3a://bucket/warehouse/db.db/t", "bucket", "warehouse/db.db/t"),
        ("s3://bucket/warehouse/db.db/t/", "bucket", "warehouse/db.db/t"),
        ("S3N://bucket/t", "bucket", "t"),
        ("s3a://bucket", "bucket", ""),
        # Hive's partition directory names are literal keys: never percent-decoded.
        ("s3a://bucket/t/city=St. John%27s%232", "bucket", "t/city=St. John%27s%232"),
    ],
)
def test_s3_uris_split_into_bucket_and_literal_key(uri: str, bucket: str, key: str) -> None:
    assert split_s3_uri(uri) == (bucket, key)


@pytest.mark.parametrize("uri", ["s3a:///key", "s3a://user:secret@bucket/key", "hdfs://nn/t", "s3a:bucket/key"])
def test_uris_without_a_plain_bucket_are_refused(uri: str) -> None:
    with pytest.raises(StorageError):
        split_s3_uri(uri)


def test_delete_pages_of_600_keys_are_250_250_100() -> None:
    keys = [f"k{i}" for i in range(600)]
    pages = list(delete_pages(keys, 250))
    assert [len(page) for page in pages] == [250, 250, 100]
    assert [key for page in pages for key in page] == keys
    assert list(delete_pages([], 250)) == []


@pytest.mark.parametrize(
    ("method", "url", "headers", "operation"),
    [
        ("GET", "http://h/", {}, "ListBuckets"),
        ("PUT", "http://h/b", {}, "CreateBucket"),
        ("HEAD", "http://h/b", {}, "HeadBucket"),
        ("GET", "http://h/b?list-type=2&prefix=t%2F", {}, "ListObjectsV2"),
        ("GET", "http://h/b?prefix=t%2F", {}, "ListObjects"),
        ("POST", "http://h/b?delete", {}, "DeleteObjects"),
        ("POST", "http://h/b/?delete=", {}, "DeleteObjects"),
        ("PUT", "http://h/b/t/f", {}, "PutObject"),
        ("PUT", "http://h/b/t/f", {"X-Amz-Copy-Source": "/b/t/g"}, "CopyObject"),
        ("PUT", "http://h/b/t/f?partNumber=1&uploadId=u", {"x-amz-copy-source": "/b/g"}, "UploadPartCopy"),
        ("PUT", "http://h/b/t/f?partNumber=1&uploadId=u", {}, "UploadPart"),
        ("POST", "http://h/b/t/f?uploads", {}, "CreateMultipartUpload"),
        ("POST", "http://h/b/t/f?uploadId=u", {}, "CompleteMultipartUpload"),
        ("DELETE", "http://h/b/t/f", {}, "DeleteObject"),
        ("DELETE", "http://h/b/t/f?uploadId=u", {}, "AbortMultipartUpload"),
        ("GET", "http://h/b/t/f", {}, "GetObject"),
        ("HEAD", "http://h/b/t/f", {}, "HeadObject"),
        ("GET", "http://h/moto-api/data.json", {}, None),
    ],
)
def test_requests_are_named_by_s3_operation(method: str, url: str, headers: dict[str, str], operation: str) -> None:
    assert s3_operation(method, url, headers) == operation


def test_recorded_requests_sharing_a_line_are_all_read() -> None:
    # moto writes an object and its newline separately from concurrent threads.
    first, second, third = ({"method": "GET", "url": f"http://h/b/{n}"} for n in "xyz")
    text = json.dumps(first) + json.dumps(second) + "\n\n" + json.dumps(third) + "\n" + '{"method": "PU'
    assert [record["url"] for record in _records(text)] == ["http://h/b/x", "http://h/b/y", "http://h/b/z"]


def test_the_endpoint_environment_points_our_client_at_it() -> None:
    endpoint = S3Endpoint("http://127.0.0.1:9000", "acidclean", "key", "secret", "us-east-1")
    options = s3_options(endpoint.environment())
    assert (options.endpoint_url, options.region, options.path_style) == ("http://127.0.0.1:9000", "us-east-1", True)
    assert (options.access_key, options.secret_key) == ("key", "secret")
    assert endpoint.uri("warehouse/db.db") == "s3a://acidclean/warehouse/db.db"


def test_listings_kept_for_reuse_are_forgotten_once_too_old(monkeypatch: pytest.MonkeyPatch) -> None:
    from acidclean.shared.storage import s3 as s3_storage

    fs = s3_storage.S3FileSystem.__new__(s3_storage.S3FileSystem)
    fs._listed, fs._listed_lock = {}, __import__("threading").Lock()
    now = [100.0]
    monkeypatch.setattr(s3_storage.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(fs, "_list_objects", lambda bucket, prefix: [(f"{prefix}delta_1/bucket_00000", 5)])
    fs.list_dir("bucket/warehouse/db.db/a")
    now[0] += s3_storage.LISTING_REUSE_S + 1
    fs.list_dir("bucket/warehouse/db.db/b")
    assert list(fs._listed) == ["bucket/warehouse/db.db/b"]
