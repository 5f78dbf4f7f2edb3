"""A real S3 API server on 127.0.0.1 for the local stack: moto in server mode, as a local process.

moto (``python -m moto.server``) answers the S3 REST API over HTTP with path-style addressing and
accepts any credentials. The bucket is created once the server answers. Every request is recorded
by moto's own recorder (``MOTO_ENABLE_RECORDING``) as one JSON object per request, headers included,
in ``logs/s3-requests.jsonl``: :func:`s3_requests` turns that file into counts per S3 operation, so a
test or the demo can say how many requests a cleanup made and that nothing was ever copied (S3 has
no rename; a ``CopyObject`` would mean a directory was being moved). The recorder keeps request
bodies too, so the file grows with what is written: fine for tests and the demo, not for benchmarks
of large tables.

The Hive Metastore reaches the same server through Hadoop's S3A connector: :func:`s3a_jars` resolves
``hadoop-aws`` and the few AWS SDK v1 modules it calls (``deploy/local/s3a/pom.xml``), and
:func:`s3a_metastore_settings` gives the ``fs.s3a.*`` settings for the metastore's site files.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from acidclean.deploy.local.jars import cached_jars
from acidclean.deploy.local.process import (
    StartedProcess,
    ensure_port_free,
    free_port,
    start_service,
    stop_process,
)
from acidclean.shared.errors import StackError

HERE = Path(__file__).resolve().parent
REQUEST_LOG = "s3-requests.jsonl"
# moto accepts any credentials; these only have to be the same everywhere.
ACCESS_KEY = "acidclean"
SECRET_KEY = "acidclean-local-secret"
REGION = "us-east-1"  # the one region where CreateBucket needs no LocationConstraint

# Requests with no proxy, whatever HTTP(S)_PROXY says: the server is on 127.0.0.1.
_direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class S3Endpoint:
    """Where the local S3 server answers, and the bucket and credentials to use there."""

    endpoint_url: str
    bucket: str
    access_key: str
    secret_key: str
    region: str

    def environment(self) -> dict[str, str]:
        """Variables that point :mod:`acidclean.shared.storage.s3` (and Spark executors, which
        inherit them, and any AWS SDK) at this server. No ``AWS_ENDPOINT_URL``: only S3 is local."""
        return {
            "ACIDCLEAN_S3_ENDPOINT": self.endpoint_url,
            "ACIDCLEAN_S3_REGION": self.region,
            "ACIDCLEAN_S3_PATH_STYLE": "true",
            "ACIDCLEAN_S3_ACCESS_KEY": self.access_key,
            "ACIDCLEAN_S3_SECRET_KEY": self.secret_key,
            "AWS_ENDPOINT_URL_S3": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
        }

    def uri(self, key: str = "") -> str:
        """``s3a://bucket/key``, the spelling Hive uses for table locations."""
        return f"s3a://{self.bucket}/{key.lstrip('/')}"


def _status(method: str, url: str, timeout_s: float = 2.0) -> int | None:
    """The HTTP status of one unsigned request, or None when nothing answers."""
    request = urllib.request.Request(url, method=method)
    try:
        with _direct.open(request, timeout=timeout_s) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except (urllib.error.URLError, OSError):
        return None


def _answers(endpoint_url: str) -> bool:
    """True when the server answers ListBuckets."""
    return _status("GET", f"{endpoint_url}/") == 200


def s3_ready(endpoint: S3Endpoint) -> bool:
    """True when the server answers and the bucket exists (HeadBucket)."""
    return _status("HEAD", f"{endpoint.endpoint_url}/{endpoint.bucket}") == 200


def s3_request_log(state_dir: Path) -> Path:
    """The file where the server of ``state_dir`` records its requests (see :func:`s3_requests`)."""
    return state_dir / "logs" / REQUEST_LOG


def start_s3(
    state_dir: Path, port: int | None = None, bucket: str = "acidclean", timeout_s: float = 60
) -> tuple[StartedProcess, S3Endpoint]:
    """Start moto on 127.0.0.1 (log ``state_dir/logs/s3.log``, requests in :func:`s3_request_log`)
    and create ``bucket``; returns the process and the endpoint."""
    if port is not None:
        ensure_port_free(port, "S3 (moto)")
    port = port or free_port()
    log_dir = state_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    endpoint = S3Endpoint(f"http://127.0.0.1:{port}", bucket, ACCESS_KEY, SECRET_KEY, REGION)
    environment = {
        **_clean_environment(),
        "MOTO_ENABLE_RECORDING": "true",
        "MOTO_RECORDER_FILEPATH": str(s3_request_log(state_dir).resolve()),
        "MOTO_PORT": str(port),
    }
    process = start_service(
        "S3 (moto)",
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        log_dir / "s3.log",
        ready=lambda: _answers(endpoint.endpoint_url),
        timeout_s=timeout_s,
        env=environment,
    )
    status = _status("PUT", f"{endpoint.endpoint_url}/{bucket}")
    if status != 200 or not s3_ready(endpoint):
        stop_process(process.pid, process.name)
        raise StackError(
            f"S3 (moto) started on port {port} but creating the bucket {bucket!r} answered {status}; "
            f"see {process.log_file}. Bucket names are 3-63 lowercase letters, digits, dots and hyphens."
        )
    return process, endpoint


def _clean_environment() -> dict[str, str]:
    """This process's environment without settings that would change what moto serves."""
    import os

    return {name: value for name, value in os.environ.items() if not name.startswith("MOTO_")}


# --- Counting requests -------------------------------------------------------------------------


def _records(text: str) -> Iterator[Mapping[str, object]]:
    """The JSON objects of a recording. moto appends each object and its newline in separate writes
    from concurrent request threads, so objects may share a line; decode them one after another."""
    decoder = json.JSONDecoder()
    position = 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position >= len(text):
            return
        try:
            record, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            return  # a record being written right now: counted next time
        if isinstance(record, dict):
            yield record


def s3_operation(method: str, url: str, headers: Mapping[str, str]) -> str | None:
    """The S3 operation name (``PutObject``, ``DeleteObjects``...) of a path-style request, or None
    for moto's own API. Pure; the rules are those of the S3 REST API."""
    parts = urlsplit(url)
    if parts.path.startswith("/moto-api"):
        return None
    query = parse_qs(parts.query, keep_blank_values=True)
    bucket, _, key = unquote(parts.path).lstrip("/").partition("/")
    lowered = {name.lower(): value for name, value in headers.items()}
    method = method.upper()
    if not bucket:
        return "ListBuckets" if method == "GET" else f"{method} /"
    if not key:
        if method == "GET":
            for parameter, name in (
                ("list-type", "ListObjectsV2"),
                ("location", "GetBucketLocation"),
                ("uploads", "ListMultipartUploads"),
                ("versions", "ListObjectVersions"),
            ):
                if parameter in query:
                    return name
            return "ListObjects"
        if method == "POST" and "delete" in query:
            return "DeleteObjects"
        return {"PUT": "CreateBucket", "HEAD": "HeadBucket", "DELETE": "DeleteBucket"}.get(method, f"{method} bucket")
    if method == "PUT":
        if "x-amz-copy-source" in lowered:
            return "UploadPartCopy" if "uploadId" in query else "CopyObject"
        return "UploadPart" if "uploadId" in query else "PutObject"
    if method == "POST":
        if "uploads" in query:
            return "CreateMultipartUpload"
        if "uploadId" in query:
            return "CompleteMultipartUpload"
        return "POST object"
    if method == "DELETE":
        return "AbortMultipartUpload" if "uploadId" in query else "DeleteObject"
    if method == "GET":
        return "ListParts" if "uploadId" in query else "GetObject"
    return {"HEAD": "HeadObject"}.get(method, f"{method} object")


def s3_requests(request_log: Path) -> Counter[str]:
    """Requests the server received so far, by S3 operation (``{"PutObject": 12, "DeleteObjects": 3}``).
    The requests of one step are the difference of two counts: ``after - before``."""
    try:
        text = request_log.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return Counter()
    counts: Counter[str] = Counter()
    for record in _records(text):
        headers = record.get("headers")
        operation = s3_operation(
            str(record.get("method", "")), str(record.get("url", "")), headers if isinstance(headers, dict) else {}
        )
        if operation is not None:
            counts[operation] += 1
    return counts


# --- S3A for the Hive Metastore ----------------------------------------------------------------


def s3a_jars(log_dir: Path) -> Path:
    """The folder of S3A jars for the Hive Metastore 3.1.3 classpath, downloading them on first use."""
    return cached_jars("s3a", HERE / "s3a" / "pom.xml", "hadoop-aws-*.jar", log_dir)


def s3a_metastore_settings(endpoint: S3Endpoint) -> dict[str, str]:
    """Hadoop settings that let the metastore create table directories at ``s3a://bucket/...`` on
    ``endpoint``."""
    return {
        "fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "fs.s3a.endpoint": endpoint.endpoint_url,
        "fs.s3a.endpoint.region": endpoint.region,
        "fs.s3a.path.style.access": "true",
        "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.access.key": endpoint.access_key,
        "fs.s3a.secret.key": endpoint.secret_key,
        "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    }
