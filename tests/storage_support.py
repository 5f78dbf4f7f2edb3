"""What the storage-parameterised tests share: one storage, its metastore and its environment."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from acidclean.deploy.local.s3 import S3Endpoint
from acidclean.shared.hive_metastore import HiveMetastore


@dataclass
class StorageStack:
    """One storage for the storage-parameterised tests: a metastore that reaches it, a warehouse root
    URI there, and the environment its clients need (already applied to this process)."""

    name: str  # local, hdfs or s3
    metastore: HiveMetastore
    metastore_uri: str
    flavour: str
    warehouse: str | None  # None: the metastore's own default on the local disk
    environment: dict[str, str]
    request_log: Path | None = None  # the S3 server's request log, or the NameNode's audit log
    namenode: str | None = None  # hdfs://127.0.0.1:PORT
    s3_endpoint: S3Endpoint | None = None
