"""Where the local stack keeps its tables: the local disk, a real HDFS, or a real S3 API server.

``local`` (the default) needs nothing. ``hdfs`` starts a NameNode and DataNode in one JVM
(:mod:`.hdfs`) and puts the warehouse at ``hdfs://127.0.0.1:PORT/warehouse``. ``s3`` starts an S3 API
server (:mod:`.s3`), creates a bucket and puts the warehouse at ``s3a://BUCKET/warehouse``; the
metastore then needs Hadoop's S3A client on its class path and the server's endpoint and credentials
in its site file, and every acidclean process needs the server's address in its environment
(``environment``: the stack prints it as ``export`` lines).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from acidclean.deploy.local.process import StartedProcess
from acidclean.shared.errors import StackError

STORAGES = ("local", "hdfs", "s3")


@dataclass(frozen=True)
class StorageService:
    """A started storage service (or the local disk) and what the metastore and clients need of it."""

    kind: str
    warehouse_uri: str | None  # None: the metastore's default, local_warehouse(state_dir) on the local disk
    address: str = ""
    process: StartedProcess | None = None
    environment: dict[str, str] = field(default_factory=dict)
    metastore_settings: dict[str, str] = field(default_factory=dict)
    metastore_classpath: tuple[Path, ...] = ()


def check_storage(storage: str, metastore_flavour: str) -> None:
    if storage not in STORAGES:
        raise StackError(f"unknown storage {storage!r}: choose one of {', '.join(STORAGES)}")
    if storage == "s3" and metastore_flavour == "hive2":
        raise StackError(
            "--storage s3 needs --metastore hive3 or hive4: a vacuum on an object store commits through a "
            "metastore transaction (base_N_vT), which needs per-table write ids, and the Hive 2.3 metastore of the "
            "pyspark wheel has no S3A client that fits its Hadoop"
        )


def start_storage(
    state_dir: Path, storage: str, metastore_flavour: str, hdfs_trash_interval_min: int | None = None
) -> StorageService:
    """Start the storage service of ``storage`` (nothing for ``local``); HDFS with the NameNode's
    ``fs.trash.interval`` of ``hdfs_trash_interval_min`` (default: one day; 0: no trash)."""
    check_storage(storage, metastore_flavour)
    if storage == "local":
        return StorageService("local", None)
    if storage == "hdfs":
        from acidclean.deploy.local.hdfs import DEFAULT_TRASH_INTERVAL_MIN, start_hdfs

        interval = DEFAULT_TRASH_INTERVAL_MIN if hdfs_trash_interval_min is None else hdfs_trash_interval_min
        process, namenode = start_hdfs(state_dir, trash_interval_min=interval)
        return StorageService("hdfs", f"{namenode}/warehouse", namenode, process)
    from acidclean.deploy.local.s3 import s3a_jars, s3a_metastore_settings, start_s3

    jars = s3a_jars(state_dir / "logs")
    process, endpoint = start_s3(state_dir)
    return StorageService(
        "s3",
        endpoint.uri("warehouse"),
        endpoint.endpoint_url,
        process,
        environment=endpoint.environment(),
        metastore_settings=s3a_metastore_settings(endpoint),
        metastore_classpath=(jars,),
    )
