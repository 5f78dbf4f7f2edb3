"""A real Hive Metastore on 127.0.0.1 with embedded Derby, as a local JVM process.

Two flavours:

* ``hive2`` (default): Hive 2.3.10 from the jars inside the pyspark wheel. Transaction ids name the
  deltas; the transaction and lock tables are created by the ``hive.in.test`` switch.
* ``hive3``: Hive 3.1.3 standalone metastore from Maven Central, with per-table write ids (what Hive
  3 clusters and openLooKeng use). Its Derby schema is created by ``MetastoreSchemaTool`` from the
  distribution's own scripts.

Ready means a Thrift ``get_all_databases`` call answers.
"""

from __future__ import annotations

import os
from pathlib import Path
from xml.sax.saxutils import escape

from acidclean.deploy.local.jars import hive3_home, pyspark_jars
from acidclean.deploy.local.process import (
    StartedProcess,
    ensure_port_free,
    free_port,
    java_executable,
    port_accepts,
    run_to_completion,
    start_service,
)
from acidclean.shared.errors import StackError

FLAVOURS = ("hive2", "hive3")

# Hive 3 predates Java 17's strong encapsulation; these are the opens Hive's own scripts pass.
JAVA17_OPENS = [
    f"--add-opens=java.base/{package}=ALL-UNNAMED"
    for package in (
        "java.nio", "java.net", "java.lang", "java.util", "java.util.concurrent",
        "java.util.concurrent.atomic", "java.util.regex", "java.lang.reflect", "java.io",
    )
]

COMMON_SETTINGS = {
    "hive.metastore.schema.verification": "false",
    "metastore.schema.verification": "false",
    "hive.support.concurrency": "true",
    "hive.txn.manager": "org.apache.hadoop.hive.ql.lockmgr.DbTxnManager",
    "hive.compactor.initiator.on": "false",
    "hive.compactor.worker.threads": "0",
    "metastore.compactor.initiator.on": "false",
    "metastore.compactor.cleaner.on": "false",
    "metastore.compactor.worker.threads": "0",
    "hive.async.log.enabled": "false",
    "metastore.async.log.enabled": "false",
    "metastore.event.db.notification.api.auth": "false",
    "hive.metastore.event.db.notification.api.auth": "false",
}

HIVE2_SETTINGS = {
    "datanucleus.schema.autoCreateAll": "true",
    "hive.in.test": "true",
    "datanucleus.connectionPoolingType": "DBCP",
}

HIVE3_SETTINGS = {
    "metastore.expression.proxy": "org.apache.hadoop.hive.metastore.DefaultPartitionExpressionProxy",
    "metastore.task.threads.always": "org.apache.hadoop.hive.metastore.events.EventCleanerTask",
}


def site_xml(settings: dict[str, str]) -> str:
    properties = "\n".join(
        f"  <property><name>{escape(key)}</name><value>{escape(value)}</value></property>"
        for key, value in settings.items()
    )
    return f'<?xml version="1.0"?>\n<configuration>\n{properties}\n</configuration>\n'


def metastore_ready(port: int) -> bool:
    """True when the metastore answers ``get_all_databases``."""
    from hmsclient import hmsclient
    from thrift.Thrift import TException

    if not port_accepts(port):
        return False
    client = hmsclient.HMSClient(host="127.0.0.1", port=port)
    try:
        client.open()
        try:
            client.get_all_databases()
        finally:
            client.close()
    except (TException, OSError):
        return False
    return True


def _layout(state_dir: Path, port: int, settings: dict[str, str]) -> tuple[Path, Path]:
    home = state_dir / "metastore"
    conf = home / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    warehouse = (state_dir / "warehouse").resolve()
    warehouse.mkdir(parents=True, exist_ok=True)
    derby = (home / "metastore_db").resolve()
    values = {
        "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={derby};create=true",
        "javax.jdo.option.ConnectionDriverName": "org.apache.derby.jdbc.EmbeddedDriver",
        "hive.metastore.warehouse.dir": warehouse.as_uri(),
        "metastore.warehouse.dir": warehouse.as_uri(),
        "metastore.thrift.port": str(port),
        **COMMON_SETTINGS,
        **settings,
    }
    for name in ("hive-site.xml", "metastore-site.xml"):
        (conf / name).write_text(site_xml(values), encoding="utf-8")
    return home, conf


def start_metastore(
    state_dir: Path, flavour: str = "hive2", port: int | None = None, timeout_s: float = 120
) -> tuple[StartedProcess, str]:
    """Start a metastore under ``state_dir/metastore``; returns the process and its thrift URI."""
    if flavour not in FLAVOURS:
        raise StackError(f"unknown metastore flavour {flavour!r}: choose one of {', '.join(FLAVOURS)}")
    if port is not None:
        ensure_port_free(port, "Hive Metastore")
    port = port or free_port()
    log_dir = state_dir / "logs"
    java = java_executable()
    memory = ["-Xms128m", "-Xmx768m", "-XX:+UseG1GC", "-Djava.awt.headless=true"]
    env = dict(os.environ)
    env.pop("HADOOP_CONF_DIR", None)
    if flavour == "hive2":
        home, conf = _layout(state_dir, port, HIVE2_SETTINGS)
        classpath = f"{conf}:{pyspark_jars()}/*"
        command = [java, *memory, *JAVA17_OPENS, f"-Dderby.system.home={home}", "-cp", classpath]
    else:
        dist = hive3_home(log_dir)
        home, conf = _layout(state_dir, port, HIVE3_SETTINGS)
        classpath = f"{conf}:{dist}/lib/*:{dist}/hadoop/*"
        command = [java, *memory, *JAVA17_OPENS, f"-Dderby.system.home={home}", "-cp", classpath]
        env["METASTORE_HOME"] = str(dist)
        if not (home / "metastore_db").exists():
            run_to_completion(
                "Hive Metastore 3.1.3 schema init",
                [*command, "org.apache.hadoop.hive.metastore.tools.MetastoreSchemaTool",
                 "-dbType", "derby", "-initSchema"],
                log_dir / "metastore-schematool.log",
                timeout_s=180,
                env=env,
            )
    process = start_service(
        f"Hive Metastore ({flavour})",
        [*command, "org.apache.hadoop.hive.metastore.HiveMetaStore", "-p", str(port)],
        log_dir / "metastore.log",
        ready=lambda: metastore_ready(port),
        timeout_s=timeout_s,
        env=env,
    )
    return process, f"thrift://127.0.0.1:{port}"
