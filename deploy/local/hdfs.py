"""A real HDFS on 127.0.0.1: one NameNode and one DataNode of Hadoop 3.3.6 in one JVM (MiniDFSCluster).

``hdfs/MiniHdfs.java`` beside this file is run by Java's single-file source launcher (no build step)
on the jars of ``hdfs/pom.xml``. Replication is 1, permissions are off (any local user may write, as
there is no Kerberos here), and every port but the NameNode's RPC port is chosen by the kernel on
127.0.0.1. The namespace and blocks live in ``state_dir/hdfs`` and survive a restart. Ready means the
launcher saw the DataNode register and a client call (hdfs-native listing ``/``) answers; then
``/warehouse`` is created, writable by all. The NameNode's audit log (one line per call: ``cmd=rename``,
``cmd=delete``...) goes to ``logs/hdfs-audit.log``, so a test can see which calls a client made.
The trash is on (``fs.trash.interval``, :data:`DEFAULT_TRASH_INTERVAL_MIN` minutes unless told), as
on a real cluster, so cleanups move files to the owner's ``.Trash`` the way Hive's cleaner does.
"""

from __future__ import annotations

from pathlib import Path

from acidclean.deploy.local.jars import cached_jars
from acidclean.deploy.local.process import (
    StartedProcess,
    ensure_port_free,
    free_port,
    java_executable,
    port_accepts,
    start_service,
    stop_process,
)
from acidclean.shared.errors import StackError

HERE = Path(__file__).resolve().parent
LAUNCHER = HERE / "hdfs" / "MiniHdfs.java"
WAREHOUSE = "/warehouse"
DEFAULT_TRASH_INTERVAL_MIN = 1440  # Hadoop's fs.trash.interval as clusters commonly set it (one day)

LOG4J_PROPERTIES = """\
log4j.rootLogger=WARN, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=%d{{ISO8601}} %p %c{{2}}: %m%n
log4j.logger.org.apache.hadoop.hdfs.MiniDFSCluster=INFO
log4j.logger.org.apache.hadoop.hdfs.server.namenode.FSNamesystem.audit=INFO, audit
log4j.additivity.org.apache.hadoop.hdfs.server.namenode.FSNamesystem.audit=false
log4j.appender.audit=org.apache.log4j.FileAppender
log4j.appender.audit.File={audit_log}
log4j.appender.audit.layout=org.apache.log4j.PatternLayout
log4j.appender.audit.layout.ConversionPattern=%d{{ISO8601}} %m%n
"""

# A probe must not wait out Hadoop's retry policy (15 attempts, about three minutes) on a NameNode
# that is still starting; it is asked again a quarter second later anyway.
PROBE_CONFIG = {"dfs.client.failover.max.attempts": "0", "dfs.client.socket-timeout": "5000"}


def hdfs_libs(log_dir: Path) -> Path:
    """The folder of MiniDFSCluster jars, downloading them on first use (about 87 MB)."""
    return cached_jars("hdfs", HERE / "hdfs" / "pom.xml", "hadoop-client-minicluster-*.jar", log_dir)


def _namenode_address(uri: str) -> tuple[str, int]:
    authority = uri.partition("://")[2].partition("/")[0]
    host, _, port = authority.rpartition(":")
    if not host or not port.isdigit():
        raise StackError(f"{uri!r} names no NameNode host and port: expected hdfs://HOST:PORT")
    return host, int(port)


def _probe_client(uri: str) -> object:
    from hdfs_native import Client

    return Client(uri, PROBE_CONFIG)


def hdfs_ready(uri: str) -> bool:
    """True when the NameNode at ``uri`` (``hdfs://HOST:PORT``) answers a listing of ``/``."""
    host, port = _namenode_address(uri)
    if not port_accepts(port, host):
        return False
    try:
        list(_probe_client(uri).list_status("/", False))  # type: ignore[attr-defined]
    except (OSError, RuntimeError):
        return False
    return True


def _make_warehouse(uri: str) -> None:
    client = _probe_client(uri)
    try:
        client.mkdirs(WAREHOUSE, 0o777, True)  # type: ignore[attr-defined]
        client.set_permission(WAREHOUSE, 0o777)  # type: ignore[attr-defined]
    except (OSError, RuntimeError) as error:
        raise StackError(f"HDFS at {uri} started but {WAREHOUSE} could not be created: {error}") from error


def start_hdfs(
    state_dir: Path,
    port: int | None = None,
    timeout_s: float = 120,
    trash_interval_min: int = DEFAULT_TRASH_INTERVAL_MIN,
) -> tuple[StartedProcess, str]:
    """Start HDFS with its data under ``state_dir/hdfs`` and the NameNode's ``fs.trash.interval`` (minutes;
    0 turns the trash off); returns the process and ``hdfs://127.0.0.1:PORT``."""
    if trash_interval_min < 0:
        raise StackError(f"trash interval {trash_interval_min}: give minutes, 0 or more (0 turns the trash off)")
    if port is not None:
        ensure_port_free(port, "HDFS NameNode")
    port = port or free_port()
    home = (state_dir / "hdfs").resolve()
    log_dir = (state_dir / "logs").resolve()
    conf = home / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    libs = hdfs_libs(log_dir)
    log4j = conf / "log4j.properties"
    log4j.write_text(LOG4J_PROPERTIES.format(audit_log=log_dir / "hdfs-audit.log"), encoding="utf-8")
    ready_file = home / "ready"
    ready_file.unlink(missing_ok=True)
    uri = f"hdfs://127.0.0.1:{port}"
    command = [
        java_executable(),
        "-Xms128m",
        "-Xmx512m",
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        f"-Dlog4j.configuration={log4j.as_uri()}",
        f"-Dhadoop.log.dir={log_dir}",
        "-cp",
        f"{libs}/*",
        str(LAUNCHER),
        "--port",
        str(port),
        "--base-dir",
        str(home),
        "--trash-interval",
        str(trash_interval_min),
    ]
    process = start_service(
        "HDFS (MiniDFSCluster)",
        command,
        log_dir / "hdfs.log",
        ready=lambda: ready_file.exists() and hdfs_ready(uri),
        timeout_s=timeout_s,
    )
    try:
        _make_warehouse(uri)
    except StackError:
        stop_process(process.pid, process.name)
        raise
    return process, uri
