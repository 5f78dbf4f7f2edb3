"""A real Hive Metastore on 127.0.0.1 with embedded Derby, as a local JVM process.

Two flavours:

* ``hive2`` (default): Hive 2.3.10 from the jars inside the pyspark wheel. Transaction ids name the
  deltas; the transaction and lock tables are created by the ``hive.in.test`` switch.
* ``hive3``: Hive 3.1.3 standalone metastore from Maven Central, with per-table write ids (what Hive
  3 clusters and openLooKeng use). Its Derby schema is created once by ``MetastoreSchemaTool`` from the
  distribution's own scripts and copied for each new metastore. The distribution lacks a few jars a
  Hadoop install would provide, and the Hive jars that let the metastore accept transactional ORC
  tables; ``deploy/local/hive3/pom.xml`` adds them.
* ``hive4``: Hive 4.0.1 standalone metastore server from Maven Central (the newest published there),
  started the same way from ``deploy/local/hive4/pom.xml``, with its own schema tool. Hive 4 removed
  the old ``get_table`` call; the adapter asks with ``get_table_req``.

Hive's own compactor (Initiator, Cleaner, workers) is off in every flavour: acidclean is the only
compactor of the local stack, unless a test turns Hive's on through ``extra_settings``.

Ready means a Thrift ``get_all_databases`` call answers.

With ``kerberos`` (:class:`MetastoreKerberos`) the metastore requires Kerberos as production ones do
(``hive.metastore.sasl.enabled=true``, its service principal and keytab, and
``hadoop.security.authentication=kerberos`` in its Hadoop configuration), against the KDC of
``deploy/local/kdc.py``; ready then means it answers a SASL negotiation, which needs no credentials.
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from acidclean.deploy.local.jars import cached_jars, hive3_home, hive4_home, pyspark_jars
from acidclean.deploy.local.process import (
    QUICK_JIT,
    StartedProcess,
    ensure_port_free,
    free_port,
    java_executable,
    port_accepts,
    run_to_completion,
    start_service,
)
from acidclean.deploy.local.warehouse import local_warehouse
from acidclean.shared.errors import StackError

FLAVOURS = ("hive2", "hive3", "hive4")

# Hive 3 predates Java 17's strong encapsulation; these are the opens Hive's own scripts pass.
JAVA17_OPENS = [
    f"--add-opens=java.base/{package}=ALL-UNNAMED"
    for package in (
        "java.nio",
        "java.net",
        "java.lang",
        "java.util",
        "java.util.concurrent",
        "java.util.concurrent.atomic",
        "java.util.regex",
        "java.lang.reflect",
        "java.io",
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
    "hive.compactor.cleaner.on": "false",
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
    # The standalone metastore's own defaults; Hive's built-in ones name classes of hive-exec.
    "metastore.expression.proxy": "org.apache.hadoop.hive.metastore.DefaultPartitionExpressionProxy",
    "metastore.task.threads.always": "org.apache.hadoop.hive.metastore.events.EventCleanerTask",
    # Else get_table refuses clients that do not declare the insert-only-table capability.
    "metastore.client.capability.check": "false",
    "javax.jdo.option.ConnectionUserName": "APP",
    "javax.jdo.option.ConnectionPassword": "mine",
}

# Hive 4 without its "translation layer" (MetastoreDefaultTransformer), which clusters run: it refuses a
# managed table outside the warehouse, and the tests put each tenant's tables under their own roots. Its
# other effects on acidclean (create_table of an ACID table only with capabilities, which the adapter
# declares) are checked by tests/integration/test_hive4_translation_layer.py with it on.
HIVE4_SETTINGS = {**HIVE3_SETTINGS, "metastore.metadata.transformer.class": " "}

SCHEMA_TOOLS = {
    "hive3": "org.apache.hadoop.hive.metastore.tools.MetastoreSchemaTool",
    "hive4": "org.apache.hadoop.hive.metastore.tools.schematool.MetastoreSchemaTool",
}


@dataclass(frozen=True)
class MetastoreKerberos:
    """What a metastore needs to require Kerberos: its principal, that principal's keytab, the realm."""

    principal: str
    keytab: Path
    krb5_conf: Path

    def settings(self) -> dict[str, str]:
        return {
            "hive.metastore.sasl.enabled": "true",
            "metastore.sasl.enabled": "true",
            "hive.metastore.kerberos.principal": self.principal,
            "metastore.kerberos.principal": self.principal,
            "hive.metastore.kerberos.keytab.file": str(self.keytab),
            "metastore.kerberos.keytab.file": str(self.keytab),
            "hadoop.security.authentication": "kerberos",
        }


def kerberos_jars(log_dir: Path) -> Path:
    """The jars a Hive 3.1.3 metastore lacks to require Kerberos (``deploy/local/kerberos/pom.xml``)."""
    return cached_jars("kerberos", Path(__file__).parent / "kerberos" / "pom.xml", "commons-codec-*.jar", log_dir)


# Hive's own compactor threads in a Hive 4 metastore (its Worker serves only the default pool there), for
# the tests of acidclean beside it; they need hive4_compactor_jars() on the class path.
HIVE4_COMPACTOR_SETTINGS = {
    **{
        f"{prefix}.compactor.{key}": value
        for prefix in ("hive", "metastore")
        for key, value in (("initiator.on", "true"), ("cleaner.on", "true"), ("worker.threads", "1"))
    },
    "hive.metastore.runworker.in": "metastore",
}


def hive4_compactor_jars(log_dir: Path) -> Path:
    """What a Hive 4.0.1 metastore lacks to run Hive's Worker (``deploy/local/hive4-compactor/pom.xml``)."""
    pom = Path(__file__).parent / "hive4-compactor" / "pom.xml"
    return cached_jars("hive4-compactor", pom, "hive-metastore-*.jar", log_dir)


def site_xml(settings: dict[str, str]) -> str:
    properties = "\n".join(
        f"  <property><name>{escape(key)}</name><value>{escape(value)}</value></property>"
        for key, value in settings.items()
    )
    return f'<?xml version="1.0"?>\n<configuration>\n{properties}\n</configuration>\n'


def metastore_ready(port: int, transactions: bool = False) -> bool:
    """True when the metastore answers ``get_all_databases`` (and with ``transactions``,
    ``get_open_txns``).

    A Hive 2.3 metastore with ``hive.in.test`` creates its transaction and lock tables at the first
    transaction call of each connection, and a second connection meanwhile takes the tables for made
    ("already exists") while the last of them are not: the first ``lock`` of a fresh metastore then
    failed now and then with "Table/View 'AUX_TABLE' does not exist". One transaction call before
    the metastore is called ready creates them all first."""
    from hmsclient import hmsclient
    from thrift.Thrift import TException

    if not port_accepts(port):
        return False
    client = hmsclient.HMSClient(host="127.0.0.1", port=port)
    try:
        client.open()
        try:
            client.get_all_databases()
            if transactions:
                client.get_open_txns()
        finally:
            client.close()
    except (TException, OSError):
        return False
    return True


def sasl_metastore_ready(port: int) -> bool:
    """True when a metastore requiring SASL answers a negotiation: a START with a mechanism no server
    offers gets a BAD or ERROR back, with no credentials needed."""
    if not port_accepts(port):
        return False
    mechanism = b"ACIDCLEAN-READINESS-PROBE"
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as probe:
            probe.sendall(struct.pack(">BI", 1, len(mechanism)) + mechanism)
            answer = probe.recv(1)
    except OSError:
        return False
    return answer in (b"\x03", b"\x04")


def _layout(
    state_dir: Path, port: int, settings: dict[str, str], warehouse_uri: str | None = None
) -> tuple[Path, Path]:
    home = state_dir / "metastore"
    conf = home / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    if warehouse_uri is None:
        warehouse = local_warehouse(state_dir)
        warehouse.mkdir(parents=True, exist_ok=True)
        warehouse_uri = warehouse.as_uri()
    derby = (home / "metastore_db").resolve()
    values = {
        "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={derby};create=true",
        "javax.jdo.option.ConnectionDriverName": "org.apache.derby.jdbc.EmbeddedDriver",
        "hive.metastore.warehouse.dir": warehouse_uri,
        "metastore.warehouse.dir": warehouse_uri,
        "metastore.thrift.port": str(port),
        **COMMON_SETTINGS,
        **settings,
    }
    for name in ("hive-site.xml", "metastore-site.xml"):
        (conf / name).write_text(site_xml(values), encoding="utf-8")
    if "hadoop.security.authentication" in settings:  # Hadoop's UserGroupInformation reads only core-site.xml
        core = {"hadoop.security.authentication": settings["hadoop.security.authentication"]}
        (conf / "core-site.xml").write_text(site_xml(core), encoding="utf-8")
    return home, conf


def _schema_template(flavour: str, dist: Path, log_dir: Path, java: str, env: dict[str, str]) -> Path:
    """A Derby database initialised once by MetastoreSchemaTool, copied for every new metastore.

    Nothing in it depends on where it lives (the catalog location is filled in at first start), and
    copying 6 MB takes milliseconds where the schema tool takes seconds.
    """
    template = dist.parent / f"{flavour}-derby-template"
    database = template / "metastore_db"
    if (template / "complete").exists():
        return database
    shutil.rmtree(template, ignore_errors=True)
    conf = template / "conf"
    conf.mkdir(parents=True)
    settings = {
        "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={database};create=true",
        "javax.jdo.option.ConnectionDriverName": "org.apache.derby.jdbc.EmbeddedDriver",
        **(HIVE4_SETTINGS if flavour == "hive4" else HIVE3_SETTINGS),
    }
    (conf / "metastore-site.xml").write_text(site_xml(settings), encoding="utf-8")
    run_to_completion(
        f"Hive Metastore ({flavour}) schema init",
        [
            java,
            "-Xmx512m",
            *JAVA17_OPENS,
            f"-Dderby.stream.error.file={log_dir / 'derby.log'}",
            "-cp",
            f"{conf}:{dist}/lib/*:{dist}/extra/*",
            SCHEMA_TOOLS[flavour],
            "-dbType",
            "derby",
            "-initSchema",
        ],
        log_dir / "metastore-schematool.log",
        timeout_s=180,
        env={**env, "METASTORE_HOME": str(dist)},
    )
    for lock_file in ("db.lck", "dbex.lck"):
        (database / lock_file).unlink(missing_ok=True)
    (template / "complete").write_text("initialised by MetastoreSchemaTool\n", encoding="utf-8")
    return database


def start_metastore(
    state_dir: Path,
    flavour: str = "hive2",
    port: int | None = None,
    timeout_s: float = 120,
    *,
    warehouse_uri: str | None = None,
    extra_settings: dict[str, str] | None = None,
    extra_classpath: tuple[Path, ...] = (),
    kerberos: MetastoreKerberos | None = None,
) -> tuple[StartedProcess, str]:
    """Start a metastore under ``state_dir/metastore``; returns the process and its thrift URI.

    ``warehouse_uri`` (default: a folder on the local disk that Hive 4 reads,
    :func:`~acidclean.deploy.local.warehouse.local_warehouse`) may be an ``hdfs://`` or
    ``s3a://`` URI; ``extra_settings`` go into its site files and ``extra_classpath`` folders of jars
    (e.g. Hadoop's S3A client) onto its class path; with ``kerberos`` it requires Kerberos."""
    if flavour not in FLAVOURS:
        raise StackError(f"unknown metastore flavour {flavour!r}: choose one of {', '.join(FLAVOURS)}")
    if port is not None:
        ensure_port_free(port, "Hive Metastore")
    port = port or free_port()
    log_dir = state_dir / "logs"
    java = java_executable()
    memory = ["-Xms128m", "-Xmx768m", "-XX:+UseG1GC", "-Djava.awt.headless=true", *QUICK_JIT]
    env = dict(os.environ)
    env.pop("HADOOP_CONF_DIR", None)
    logs = [
        f"-Dderby.stream.error.file={log_dir / 'derby.log'}",
        f"-Dhive.log.dir={log_dir}",
        f"-Dmetastore.log.dir={log_dir}",
    ]
    ready = lambda: metastore_ready(port, transactions=flavour == "hive2")  # noqa: E731
    if kerberos is not None:
        if flavour == "hive3":
            extra_classpath = (*extra_classpath, kerberos_jars(log_dir))
        extra_settings = {**(extra_settings or {}), **kerberos.settings()}
        logs.append(f"-Djava.security.krb5.conf={kerberos.krb5_conf}")
        ready = lambda: sasl_metastore_ready(port)  # noqa: E731
    extra = "".join(f":{folder}/*" for folder in extra_classpath)
    if flavour == "hive2":
        home, conf = _layout(state_dir, port, {**HIVE2_SETTINGS, **(extra_settings or {})}, warehouse_uri)
        classpath = f"{conf}:{pyspark_jars()}/*{extra}"
        command = [java, *memory, *JAVA17_OPENS, *logs, "-cp", classpath]
    else:
        dist = hive4_home(log_dir) if flavour == "hive4" else hive3_home(log_dir)
        settings = HIVE4_SETTINGS if flavour == "hive4" else HIVE3_SETTINGS
        home, conf = _layout(state_dir, port, {**settings, **(extra_settings or {})}, warehouse_uri)
        if flavour == "hive4":  # its log4j2 file is not on the class path: log to stderr, the service log
            logs += [
                f"-Dlog4j2.configurationFile={dist}/conf/metastore-log4j2.properties",
                "-Dmetastore.root.logger=console",
                "-Dmetastore.log.level=WARN",
            ]
        classpath = f"{conf}:{dist}/lib/*:{dist}/extra/*{extra}:{dist}/fallback/*"
        command = [java, *memory, *JAVA17_OPENS, *logs, "-cp", classpath]
        env["METASTORE_HOME"] = str(dist)
        if not (home / "metastore_db").exists():
            shutil.copytree(_schema_template(flavour, dist, log_dir, java, env), home / "metastore_db")
    process = start_service(
        f"Hive Metastore ({flavour})",
        [*command, "org.apache.hadoop.hive.metastore.HiveMetaStore", "-p", str(port)],
        log_dir / "metastore.log",
        ready=ready,
        timeout_s=timeout_s,
        env=env,
    )
    return process, f"thrift://127.0.0.1:{port}"
