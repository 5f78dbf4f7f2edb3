"""Which backend serves a location: a table of URI schemes, and :func:`open_location`.

Table locations come from the metastore as URIs (``file:/warehouse/db.db/t``, ``hdfs://nn/...``,
``s3a://bucket/...``). :func:`open_location` turns one into a :class:`StorageLocation`: a file system
plus a path, with the handful of operations acidclean performs on table directories. A new backend is
one module with an opener (``uri, environ -> (file system, path)``) and one line in :data:`BACKENDS`
(or one :func:`register_backend` call); a scheme no backend registers goes to pyarrow's own file
systems, as ``file:`` URIs do.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from acidclean.shared.storage.arrow import ArrowFileSystem, open_arrow_uri, open_local
from acidclean.shared.storage.hdfs import open_hdfs
from acidclean.shared.storage.s3 import open_s3

Opener = Callable[[str, Mapping[str, str] | None], tuple[ArrowFileSystem, str]]

# Scheme (lower case) -> opener. "file" also serves plain paths; s3a and s3n are Hadoop's names for s3.
BACKENDS: dict[str, Opener] = {
    "file": open_local,
    "hdfs": open_hdfs,
    "s3": open_s3,
    "s3a": open_s3,
    "s3n": open_s3,
}

# Environment variables that configure storage clients (endpoints, credentials, Kerberos). A vacuum
# copies them into its Spark tasks: executors on a cluster do not inherit the driver's environment.
STORAGE_ENV_PREFIXES = ("ACIDCLEAN_S3_", "ACIDCLEAN_HDFS_", "AWS_")


@dataclass(frozen=True)
class StorageLocation:
    """A table or partition directory: the file system it lives on and its path there."""

    fs: ArrowFileSystem
    path: str
    uri: str

    def child(self, name: str) -> str:
        return f"{self.path.rstrip('/')}/{name}"


def register_backend(scheme: str, opener: Opener) -> None:
    """Serve the locations of ``scheme`` (``scheme://...``) with ``opener`` from now on."""
    BACKENDS[scheme.lower()] = opener


def location_scheme(uri: str) -> str:
    """``file``, ``hdfs`` or ``s3`` (``s3a`` and ``s3n`` are Hadoop's names for ``s3``) of a location."""
    scheme = _scheme(uri)
    return "s3" if scheme in ("s3a", "s3n") else scheme


def _scheme(uri: str) -> str:
    """The URI's scheme in lower case; ``file`` for a plain path."""
    if "://" not in uri and not uri.startswith("file:"):
        return "file"
    return uri.partition(":")[0].lower()


def storage_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The storage client settings of ``environ`` (default: this process's environment)."""
    source = os.environ if environ is None else environ
    return {name: value for name, value in source.items() if name.startswith(STORAGE_ENV_PREFIXES)}


def open_location(uri: str, environ: Mapping[str, str] | None = None) -> StorageLocation:
    """The file system and path of a location URI or plain local path, by the backend of its scheme.

    The backends read their settings from ``environ``, by default this process's environment
    (``ACIDCLEAN_S3_*`` and the standard ``AWS_*`` variables for S3; ``ACIDCLEAN_HDFS_*`` for HDFS).
    """
    opener = BACKENDS.get(_scheme(uri), open_arrow_uri)
    fs, path = opener(uri, environ)
    return StorageLocation(fs, path, uri)
