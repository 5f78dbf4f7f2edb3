"""S3 storage for table locations at ``s3://``, ``s3a://`` and ``s3n://``: pyarrow's native S3 client,
with deletes done in pages of S3 DeleteObjects that are retried and never reported done when they
are not.

An object store has no directories. A "directory" here is a key prefix ending in ``/``: it exists
when some key starts with it, or when an empty marker object ``dir/`` exists (pyarrow and Hadoop's
S3A both create such markers for an empty directory; S3A deletes them again once a file is written
below). ``list_dir`` reports common prefixes as directories, ``tree_size`` counts real objects only
(markers are not files), and there is no rename: S3 cannot move a directory atomically, only copy
each object and delete the original, which a reader could observe half done. :meth:`S3FileSystem.rename`
therefore refuses, and the vacuum commits differently on S3.

Settings come from the environment, which Spark executors inherit. Each ``ACIDCLEAN_S3_*`` variable
wins over the standard AWS one it stands for:

``ACIDCLEAN_S3_ENDPOINT``
    The S3 API endpoint, e.g. ``http://127.0.0.1:9000`` for a local server; ``http://`` selects
    plain HTTP, ``https://`` or no scheme HTTPS. Else ``AWS_ENDPOINT_URL_S3``, else
    ``AWS_ENDPOINT_URL``, else AWS itself.
``ACIDCLEAN_S3_REGION``
    The region to sign requests for. Else ``AWS_REGION``, else ``AWS_DEFAULT_REGION``, else the
    SDKs' own resolution (profile, instance metadata, ``us-east-1``).
``ACIDCLEAN_S3_PATH_STYLE``
    ``true`` addresses buckets as ``endpoint/bucket/key`` (what local servers and most S3-compatible
    stores need, like S3A's ``fs.s3a.path.style.access``), ``false`` as ``bucket.endpoint/key``
    (virtual-hosted). Default: path style, as pyarrow does.
``ACIDCLEAN_S3_ACCESS_KEY`` and ``ACIDCLEAN_S3_SECRET_KEY``
    Static credentials, both or neither. Else ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and
    the optional ``AWS_SESSION_TOKEN``. Else the AWS default chain, which reads ``AWS_PROFILE`` (a
    profile of ``~/.aws/config``), web identity and instance metadata; both clients below use it.
``ACIDCLEAN_S3_DELETE_PAGE_SIZE``
    Keys per DeleteObjects request, 1 to 1000 (the S3 limit); default 250, as Hadoop S3A's
    ``fs.s3a.bulk.delete.page.size`` since HADOOP-16823: a large page is one big write against the
    bucket's request-rate budget, is throttled as a whole, and retrying it repeats all of it.
``ACIDCLEAN_S3_DELETE_ATTEMPTS``
    Attempts per page before the delete fails, default 7, with exponential backoff and full jitter
    from 0.1 s up to 5 s between attempts (about 6 s in all).

Which client deletes. pyarrow has no DeleteObjects call of its own; its ``delete_dir`` batches keys
internally by 1000 with no page size, and it gives up on a throttled page after its SDK's few retries
with per-key failures only in an error message. The cleaner needs a page size (a busy bucket answers
1000-key pages with 503 SlowDown), a retry policy of its own, and an exact account of what failed.
So :meth:`S3FileSystem.delete_dir` lists and deletes with boto3 (a main dependency: about 35 MB
installed with botocore, s3transfer and jmespath), configured from the very same :class:`S3Options`
as the pyarrow client, with botocore's own retries off so that one policy, ours, decides. Reading,
writing and listing stay with pyarrow; one extra dependency is the price of a delete that is paced,
retried and exact about what it left.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs
from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from acidclean.shared.errors import ConfigurationError
from acidclean.shared.storage.arrow import ArrowFileSystem
from acidclean.shared.storage.interface import Entry, ListedFile, StorageError, TreeSize

S3_SCHEMES = ("s3", "s3a", "s3n")
DEFAULT_DELETE_PAGE_SIZE = 250
MAX_DELETE_PAGE_SIZE = 1000  # S3's limit on the keys of one DeleteObjects request
DEFAULT_DELETE_ATTEMPTS = 7
VERSIONING_REUSE_S = 600.0  # how long a bucket's versioning status is taken as known (the trash's choice)
LISTING_REUSE_S = 30.0  # how long a directory's listing answers sizes and deletes of its children
BACKOFF_FIRST_S = 0.1
BACKOFF_MAX_S = 5.0

# Error codes that say "try again later"; anything else (AccessDenied, NoSuchBucket...) will not pass
# on a retry, so it fails at once with the code in the message.
RETRYABLE_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "InternalError",
        "ServiceUnavailable",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "OperationAborted",
        "500",
        "502",
        "503",
        "504",
    }
)

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})


@dataclass(frozen=True)
class S3Options:
    """How to reach S3, from the environment (see the module docstring). Equal options share a client."""

    endpoint_override: str | None = None  # host[:port], no scheme
    scheme: str = "https"
    region: str | None = None
    path_style: bool = True
    access_key: str | None = None
    secret_key: str | None = None
    session_token: str | None = None
    profile: str | None = None
    delete_page_size: int = DEFAULT_DELETE_PAGE_SIZE
    delete_attempts: int = DEFAULT_DELETE_ATTEMPTS

    @property
    def endpoint_url(self) -> str | None:
        return f"{self.scheme}://{self.endpoint_override}" if self.endpoint_override else None

    def __repr__(self) -> str:  # never print a secret into a log line
        secret = "***" if self.secret_key else None
        return (
            f"S3Options(endpoint_url={self.endpoint_url!r}, region={self.region!r}, path_style={self.path_style}, "
            f"access_key={self.access_key!r}, secret_key={secret!r}, profile={self.profile!r}, "
            f"delete_page_size={self.delete_page_size}, delete_attempts={self.delete_attempts})"
        )


def _first(environ: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            return value
    return None


def _flag(environ: Mapping[str, str], name: str, default: bool) -> bool:
    value = _first(environ, name)
    if value is None:
        return default
    if value.lower() in TRUE_WORDS:
        return True
    if value.lower() in FALSE_WORDS:
        return False
    raise ConfigurationError(f"{name}={value!r} is not a boolean: use true or false")


def _count(environ: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    value = _first(environ, name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        number = low - 1
    if not low <= number <= high:
        raise ConfigurationError(f"{name}={value!r} must be a whole number from {low} to {high}")
    return number


def parse_endpoint(endpoint: str) -> tuple[str, str]:
    """``(scheme, host[:port])`` of an endpoint URL; no scheme means HTTPS."""
    scheme, separator, rest = endpoint.partition("://")
    if not separator:
        scheme, rest = "https", endpoint
    scheme = scheme.lower()
    host = rest.rstrip("/")
    if scheme not in ("http", "https") or not host or "/" in host or "?" in host or "@" in host:
        raise ConfigurationError(
            f"S3 endpoint {endpoint!r} is not of the form http(s)://host[:port] (no path, no credentials)"
        )
    return scheme, host


def s3_options(environ: Mapping[str, str]) -> S3Options:
    """The S3 settings in ``environ`` (normally ``os.environ``)."""
    endpoint = _first(environ, "ACIDCLEAN_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
    scheme, endpoint_override = parse_endpoint(endpoint) if endpoint else ("https", None)
    access_key = _first(environ, "ACIDCLEAN_S3_ACCESS_KEY")
    secret_key = _first(environ, "ACIDCLEAN_S3_SECRET_KEY")
    session_token = None
    if (access_key is None) != (secret_key is None):
        raise ConfigurationError(
            "set both ACIDCLEAN_S3_ACCESS_KEY and ACIDCLEAN_S3_SECRET_KEY, or neither (then the AWS_* "
            "variables or the AWS default credential chain apply)"
        )
    if access_key is None:
        access_key = _first(environ, "AWS_ACCESS_KEY_ID")
        secret_key = _first(environ, "AWS_SECRET_ACCESS_KEY")
        if (access_key is None) != (secret_key is None):
            raise ConfigurationError("set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or neither")
        session_token = _first(environ, "AWS_SESSION_TOKEN") if access_key else None
    return S3Options(
        endpoint_override=endpoint_override,
        scheme=scheme,
        region=_first(environ, "ACIDCLEAN_S3_REGION", "AWS_REGION", "AWS_DEFAULT_REGION"),
        path_style=_flag(environ, "ACIDCLEAN_S3_PATH_STYLE", default=True),
        access_key=access_key,
        secret_key=secret_key,
        session_token=session_token,
        profile=_first(environ, "AWS_PROFILE") if access_key is None else None,
        delete_page_size=_count(
            environ, "ACIDCLEAN_S3_DELETE_PAGE_SIZE", DEFAULT_DELETE_PAGE_SIZE, 1, MAX_DELETE_PAGE_SIZE
        ),
        delete_attempts=_count(environ, "ACIDCLEAN_S3_DELETE_ATTEMPTS", DEFAULT_DELETE_ATTEMPTS, 1, 100),
    )


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``(bucket, key)`` of ``s3a://bucket/key``, the key without a trailing ``/``.

    The key is taken literally, not percent-decoded: Hive writes Hadoop ``Path`` strings, and S3A
    stores the partition directory ``city=St. John%27s`` under exactly that key.
    """
    scheme, separator, rest = uri.partition("://")
    if scheme.lower() not in S3_SCHEMES or not separator:
        raise StorageError(f"{uri!r} is not an S3 location: expected s3://, s3a:// or s3n://bucket/key")
    bucket, _, key = rest.partition("/")
    if not bucket or "@" in bucket or ":" in bucket:
        raise StorageError(f"{uri!r} names no bucket (or puts credentials or a port in it): expected s3a://bucket/key")
    return bucket, key.rstrip("/")


def delete_pages(keys: Sequence[str], page_size: int) -> Iterator[Sequence[str]]:
    """``keys`` in consecutive pages of at most ``page_size``."""
    for start in range(0, len(keys), page_size):
        yield keys[start : start + page_size]


class _RetryableDeleteError(Exception):
    """A page or some of its keys failed with an error worth retrying; ``remaining`` are still there."""

    def __init__(self, message: str, remaining: list[str]) -> None:
        super().__init__(message)
        self.remaining = remaining


class S3FileSystem(ArrowFileSystem):
    """:class:`ArrowFileSystem` on S3: pyarrow for everything but deletes, boto3 for paged deletes."""

    def __init__(self, arrow: pafs.S3FileSystem, options: S3Options) -> None:
        super().__init__(arrow)
        self.options = options
        self._client: Any = None
        self._client_lock = threading.Lock()
        # The keys under each child of a recently listed directory: a cleanup's sizes and deletes come
        # from the listing of its check instead of one more listing per directory each.
        self._listed: dict[str, tuple[float, dict[str, list[tuple[str, int]]]]] = {}
        self._listed_lock = threading.Lock()
        self._versioned: dict[str, tuple[float, bool]] = {}  # bucket -> (when asked, versioning Enabled)

    def _s3(self) -> Any:
        """The boto3 client, made on first use (boto3 clients are thread-safe; making one is not)."""
        with self._client_lock:
            if self._client is None:
                self._client = boto3_client(self.options)
            return self._client

    def rename(self, source: str, target: str) -> None:
        raise StorageError(
            f"cannot rename {source} to {target}: S3 has no atomic directory rename, only a copy of every "
            "object and a delete of the originals, which readers can see half done. On S3 a commit must "
            "not move directories"
        )

    def real_path(self, path: str) -> str:
        return path  # no symlinks in an object store

    def list_dir(self, path: str) -> list[Entry]:
        """The children of ``path`` from one recursive listing of every key under it (paged by 1000),
        which also answers :meth:`tree_size` and :meth:`delete_dir` of those children for
        ``LISTING_REUSE_S`` seconds: a cleanup check lists its table once. An obsolete directory is
        never written again, so the keys listed are all it holds."""
        bucket, _, prefix = path.strip("/").partition("/")
        objects = self._list_objects(bucket, prefix + "/" if prefix else "")
        children: dict[str, list[tuple[str, int]]] = {}
        files: dict[str, int] = {}
        start = len(prefix) + 1 if prefix else 0
        for key, size in objects:
            relative = key[start:]
            if not relative:
                continue  # the directory's own marker object
            name, slash, _ = relative.partition("/")
            if slash:
                children.setdefault(name, []).append((key, size))
            else:
                files[name] = size
        if not objects and prefix and not self.exists(path):
            raise StorageError(f"directory {path} does not exist")
        now = time.monotonic()
        with self._listed_lock:
            # Only recent listings are kept: a long-running cleaner lists many tables, each once a check.
            for stale in [key for key, (at, _) in self._listed.items() if now - at > LISTING_REUSE_S]:
                del self._listed[stale]
            self._listed[path.rstrip("/")] = (now, children)
        entries = [Entry(name=name, is_dir=True, size=0) for name in children if name not in files]
        return entries + [Entry(name=name, is_dir=False, size=size) for name, size in files.items()]

    def _listed_keys(self, path: str, consume: bool = False) -> list[tuple[str, int]] | None:
        """The keys under ``path`` from a listing of its parent taken within ``LISTING_REUSE_S``."""
        parent, _, name = path.rstrip("/").rpartition("/")
        with self._listed_lock:
            listed = self._listed.get(parent)
            if listed is None or time.monotonic() - listed[0] > LISTING_REUSE_S or name not in listed[1]:
                return None
            return listed[1].pop(name) if consume else listed[1][name]

    def tree_size(self, path: str) -> TreeSize:
        keys = self._listed_keys(path)
        if keys is None:
            return super().tree_size(path)
        files = [size for key, size in keys if not key.endswith("/")]  # "dir/" markers are no files
        return TreeSize(len(files), sum(files))

    def delete_dir(self, path: str) -> None:
        """Delete every object under ``path/`` (listed by a recent :meth:`list_dir` of its parent, or
        listed now), in DeleteObjects pages of ``delete_page_size`` keys, each retried until
        ``delete_attempts``. Raises :class:`StorageError` when any key is left; a missing directory is
        already deleted."""
        bucket, _, prefix = path.strip("/").partition("/")
        if not prefix:
            raise StorageError(f"refusing to delete {path}: that is a whole bucket, not a directory")
        listed = self._listed_keys(path, consume=True)
        keys = [key for key, _ in listed] if listed is not None else self._list_keys(bucket, prefix + "/")
        for page in delete_pages(keys, self.options.delete_page_size):
            self._delete_page(bucket, path, page)

    def list_files(self, path: str) -> list[ListedFile]:
        """Each object under ``path/``, listed now (never the reused listing): its ETag, last
        modification and size. The ETag alone is no identity here: the same bytes written again
        (a re-created table's writer repeats its write ids) have the same ETag, but not the same time."""
        from botocore.exceptions import BotoCoreError, ClientError

        bucket, _, prefix = path.strip("/").partition("/")
        prefix = prefix + "/" if prefix else ""
        files: list[ListedFile] = []
        try:
            for page in self._s3().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
                for item in page.get("Contents", ()):
                    key = str(item["Key"])
                    if key.endswith("/"):
                        continue  # a "directory" marker, no file
                    modified = item.get("LastModified")
                    stamp = modified.isoformat() if modified is not None else ""
                    identity = f"etag={item.get('ETag', '')},modified={stamp}"
                    files.append(ListedFile(key[len(prefix) :], int(item.get("Size", 0)), identity))
        except (BotoCoreError, ClientError) as error:
            raise StorageError(f"cannot list s3://{bucket}/{prefix}: {error}") from error
        return files

    def delete_files(self, path: str, names: list[str]) -> None:
        """DeleteObjects of exactly these keys, paged and retried as :meth:`delete_dir`."""
        bucket, _, prefix = path.strip("/").partition("/")
        keys = [f"{prefix}/{name}" if prefix else name for name in names]
        for page in delete_pages(keys, self.options.delete_page_size):
            self._delete_page(bucket, path, page)

    def delete_empty_dir(self, path: str) -> bool:
        """An S3 "directory" is its keys: gone once none is left but its "directory" markers, which
        are then deleted."""
        bucket, _, prefix = path.strip("/").partition("/")
        if not prefix:
            raise StorageError(f"refusing to delete {path}: that is a whole bucket, not a directory")
        keys = self._list_keys(bucket, prefix + "/")
        if any(not key.endswith("/") for key in keys):
            return False
        for page in delete_pages(keys, self.options.delete_page_size):
            self._delete_page(bucket, path, page)
        return True

    # --- the trash and undo (acidclean.shared.storage.trash, acidclean.consumers.undo) -------------

    def versioned(self, path: str) -> bool:
        """Whether the bucket of ``path`` keeps versions (its versioning is Enabled)."""
        from botocore.exceptions import BotoCoreError, ClientError

        bucket = path.strip("/").partition("/")[0]
        known = self._versioned.get(bucket)
        if known is not None and time.monotonic() - known[0] < VERSIONING_REUSE_S:
            return known[1]
        try:
            status = str(self._s3().get_bucket_versioning(Bucket=bucket).get("Status", ""))
        except (BotoCoreError, ClientError) as error:
            raise StorageError(f"cannot read the versioning of bucket {bucket}: {error}") from error
        enabled = status == "Enabled"
        self._versioned[bucket] = (time.monotonic(), enabled)
        return enabled

    def current_versions(self, path: str) -> dict[str, str]:
        """The version id of each object under ``path/`` now (relative name -> id), one paged listing."""
        from botocore.exceptions import BotoCoreError, ClientError

        bucket, _, prefix = path.strip("/").partition("/")
        prefix = prefix + "/" if prefix else ""
        versions: dict[str, str] = {}
        try:
            for page in self._s3().get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
                for item in page.get("Versions", ()):
                    if item.get("IsLatest") and not str(item["Key"]).endswith("/"):
                        versions[str(item["Key"])[len(prefix) :]] = str(item["VersionId"])
        except (BotoCoreError, ClientError) as error:
            raise StorageError(f"cannot list the versions under s3://{bucket}/{prefix}: {error}") from error
        return versions

    def move_file(self, source: str, target: str) -> None:
        """Copy one object to ``target`` (refused when ``target`` exists), then delete the original: a
        file is whole at its new key before it leaves its old one."""
        bucket, _, key = source.strip("/").partition("/")
        target_bucket, _, target_key = target.strip("/").partition("/")
        self._copy(bucket, key, target_bucket, target_key, None)
        self.delete_files(f"{bucket}", [key])

    def has_version(self, path: str, version_id: str) -> bool:
        """Whether version ``version_id`` of the object at ``path`` is still kept."""
        from botocore.exceptions import ClientError

        bucket, _, key = path.strip("/").partition("/")
        try:
            self._s3().head_object(Bucket=bucket, Key=key, VersionId=version_id)
        except ClientError as error:
            status = str(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
            if status in ("404", "400", "405"):
                return False
            raise StorageError(f"cannot read version {version_id} of s3://{bucket}/{key}: {error}") from error
        return True

    def restore_version(self, path: str, version_id: str) -> None:
        """Make version ``version_id`` the current object at ``path`` again (a copy of it), only when no
        object is there now."""
        bucket, _, key = path.strip("/").partition("/")
        self._copy(bucket, key, bucket, key, version_id)

    def _copy(self, bucket: str, key: str, target_bucket: str, target_key: str, version_id: str | None) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        if self.exists(f"{target_bucket}/{target_key}"):
            raise StorageError(
                f"cannot copy to s3://{target_bucket}/{target_key}: an object is there; never overwritten"
            )
        source: dict[str, str] = {"Bucket": bucket, "Key": key}
        if version_id is not None:
            source["VersionId"] = version_id
        try:
            self._s3().copy_object(Bucket=target_bucket, Key=target_key, CopySource=source)
        except (BotoCoreError, ClientError) as error:
            raise StorageError(
                f"cannot copy s3://{bucket}/{key} to s3://{target_bucket}/{target_key}: {error}"
            ) from error

    def _list_keys(self, bucket: str, prefix: str) -> list[str]:
        return [key for key, _ in self._list_objects(bucket, prefix)]

    def _list_objects(self, bucket: str, prefix: str) -> list[tuple[str, int]]:
        from botocore.exceptions import BotoCoreError, ClientError

        objects: list[tuple[str, int]] = []
        try:
            for page in self._s3().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
                objects.extend((str(item["Key"]), int(item.get("Size", 0))) for item in page.get("Contents", ()))
        except (BotoCoreError, ClientError) as error:
            raise StorageError(f"cannot list s3://{bucket}/{prefix}: {error}") from error
        return objects

    def _delete_page(self, bucket: str, path: str, page: Sequence[str]) -> None:
        remaining = list(page)
        retrying = Retrying(
            stop=stop_after_attempt(self.options.delete_attempts),
            wait=wait_random_exponential(multiplier=BACKOFF_FIRST_S, max=BACKOFF_MAX_S),
            retry=retry_if_exception_type(_RetryableDeleteError),
        )
        try:
            for attempt in retrying:
                with attempt:
                    try:
                        self._delete_once(bucket, path, remaining)
                    except _RetryableDeleteError as failure:
                        remaining = failure.remaining
                        raise
        except RetryError as error:
            raise StorageError(
                f"cannot delete {path}: {len(remaining)} of a page of {len(page)} objects still failed after "
                f"{self.options.delete_attempts} attempts ({error.last_attempt.exception()}); the directory is "
                "partly deleted and must be deleted again"
            ) from error

    def _delete_once(self, bucket: str, path: str, keys: list[str]) -> None:
        """One DeleteObjects of ``keys``. A retryable failure names the keys still there; any other
        failure is final (it would fail again)."""
        from botocore.exceptions import BotoCoreError, ClientError, ConnectionError, HTTPClientError

        try:
            response = self._s3().delete_objects(
                Bucket=bucket, Delete={"Objects": [{"Key": key} for key in keys], "Quiet": True}
            )
        except ClientError as error:
            code = str(error.response.get("Error", {}).get("Code", ""))
            status = str(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
            if code in RETRYABLE_CODES or status in RETRYABLE_CODES:
                raise _RetryableDeleteError(f"{code or status}: {error}", keys) from error
            raise StorageError(f"cannot delete {path}: S3 answered {code or status}: {error}") from error
        except (ConnectionError, HTTPClientError) as error:
            raise _RetryableDeleteError(str(error), keys) from error
        except BotoCoreError as error:
            raise StorageError(f"cannot delete {path}: {error}") from error
        errors = response.get("Errors") or []
        if not errors:
            return
        failed = [str(item.get("Key")) for item in errors]
        codes = sorted({str(item.get("Code")) for item in errors})
        if all(str(item.get("Code")) in RETRYABLE_CODES for item in errors):
            raise _RetryableDeleteError(f"{len(failed)} keys failed with {', '.join(codes)}, e.g. {failed[0]}", failed)
        raise StorageError(
            f"cannot delete {path}: {len(failed)} objects refused with {', '.join(codes)}, e.g. {failed[0]}"
        )


def boto3_client(options: S3Options) -> Any:
    """A boto3 S3 client for ``options``, with botocore's retries off (the caller retries)."""
    import boto3
    from botocore.config import Config

    session = boto3.session.Session(profile_name=options.profile) if options.profile else boto3.session.Session()
    return session.client(
        "s3",
        endpoint_url=options.endpoint_url,
        region_name=options.region,
        aws_access_key_id=options.access_key,
        aws_secret_access_key=options.secret_key,
        aws_session_token=options.session_token,
        config=Config(
            retries={"total_max_attempts": 1, "mode": "standard"},
            s3={"addressing_style": "path" if options.path_style else "virtual"},
            max_pool_connections=16,
        ),
    )


def arrow_s3(options: S3Options) -> pafs.S3FileSystem:
    """pyarrow's S3 client for ``options``."""
    return pafs.S3FileSystem(
        access_key=options.access_key,
        secret_key=options.secret_key,
        session_token=options.session_token,
        region=options.region,
        scheme=options.scheme,
        endpoint_override=options.endpoint_override,
        force_virtual_addressing=not options.path_style,
        # A small file (a vacuum marker, a bucket file of a few rows) becomes one PutObject instead of a
        # multipart upload of three requests; a failure to write is then raised at close, not at open.
        allow_delayed_open=True,
    )


_cache: dict[S3Options, S3FileSystem] = {}
_cache_lock = threading.Lock()


def open_s3(uri: str, environ: Mapping[str, str] | None = None) -> tuple[S3FileSystem, str]:
    """The file system and the ``bucket/key`` path of an S3 location URI; settings from ``environ``
    (default ``os.environ``), one cached file system per distinct settings."""
    import os

    options = s3_options(os.environ if environ is None else environ)
    bucket, key = split_s3_uri(uri)
    with _cache_lock:
        fs = _cache.get(options)
        if fs is None:
            try:
                fs = S3FileSystem(arrow_s3(options), options)
            except (OSError, ValueError) as error:
                raise StorageError(f"cannot open S3 for {uri} with {options!r}: {error}") from error
            _cache[options] = fs
    return fs, f"{bucket}/{key}" if key else bucket
