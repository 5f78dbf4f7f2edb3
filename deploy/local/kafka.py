"""One Apache Kafka 4.1 broker in KRaft combined broker+controller mode on 127.0.0.1.

The storage is formatted with ``kafka.tools.StorageTool`` under a fresh cluster id, then
``kafka.Kafka`` runs with every replication factor at 1 and no initial rebalance delay, so a test's
first consumer group joins at once. Ready means an admin metadata call answers.

By default the one client listener is PLAINTEXT with no authorizer. Two secured variants, for the
tests of secured clusters: ``sasl_users`` makes it a SASL_PLAINTEXT listener with SCRAM-SHA-512 (the
users are created when the storage is formatted, ``kafka-storage format --add-scram``), the
``StandardAuthorizer`` and ``super.users=User:admin``; ``tls`` makes it an SSL listener with a PEM
keystore. The controller listener stays PLAINTEXT on 127.0.0.1 in every variant.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from acidclean.deploy.local.jars import kafka_libs
from acidclean.deploy.local.process import (
    QUICK_JIT,
    StartedProcess,
    ensure_port_free,
    free_ports,
    java_executable,
    port_accepts,
    run_to_completion,
    start_service,
)

LOG4J2_PROPERTIES = """\
status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = STDOUT
logger.srv.name = kafka.server.KafkaRaftServer
logger.srv.level = INFO
"""


@dataclass(frozen=True)
class KafkaPorts:
    broker: int
    controller: int


@dataclass(frozen=True)
class BrokerTls:
    """The broker's TLS material as PEM files: its private key followed by its certificate chain
    (``keystore``), and the CA certificates it trusts (``ca``, for its own inter-broker connections)."""

    keystore: Path
    ca: Path


SCRAM_MECHANISM = "SCRAM-SHA-512"
SUPER_USER = "admin"
# The controller listener is PLAINTEXT, so the broker's requests to its controller come from
# User:ANONYMOUS: the authorizer must let them through. Only 127.0.0.1 can reach that listener.
CONTROLLER_PRINCIPAL = "User:ANONYMOUS"


def _jaas_value(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _security_properties(ports: KafkaPorts, sasl_users: Mapping[str, str] | None, tls: BrokerTls | None) -> str:
    """The client listener's lines: PLAINTEXT, SASL_PLAINTEXT with SCRAM and ACLs, or SSL."""
    if sasl_users is not None:
        if SUPER_USER not in sasl_users:
            raise ValueError(f"sasl_users needs the super user {SUPER_USER!r} (the broker's own login)")
        password = _jaas_value(sasl_users[SUPER_USER])
        return f"""\
listeners=SASL_PLAINTEXT://127.0.0.1:{ports.broker},CONTROLLER://127.0.0.1:{ports.controller}
advertised.listeners=SASL_PLAINTEXT://127.0.0.1:{ports.broker}
inter.broker.listener.name=SASL_PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
sasl.enabled.mechanisms={SCRAM_MECHANISM}
sasl.mechanism.inter.broker.protocol={SCRAM_MECHANISM}
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule \
required username="{SUPER_USER}" password="{password}";
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:{SUPER_USER};{CONTROLLER_PRINCIPAL}
allow.everyone.if.no.acl.found=false
"""
    if tls is not None:
        return f"""\
listeners=SSL://127.0.0.1:{ports.broker},CONTROLLER://127.0.0.1:{ports.controller}
advertised.listeners=SSL://127.0.0.1:{ports.broker}
inter.broker.listener.name=SSL
listener.security.protocol.map=CONTROLLER:PLAINTEXT,SSL:SSL
ssl.keystore.type=PEM
ssl.keystore.location={tls.keystore}
ssl.truststore.type=PEM
ssl.truststore.location={tls.ca}
ssl.client.auth=none
"""
    return f"""\
listeners=PLAINTEXT://127.0.0.1:{ports.broker},CONTROLLER://127.0.0.1:{ports.controller}
advertised.listeners=PLAINTEXT://127.0.0.1:{ports.broker}
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
"""


def new_cluster_id() -> str:
    """A random KRaft cluster id. One starting with ``-`` would be read by StorageTool's argument
    parser as an option (about one start in 64 failed that way), so draw again, as Kafka's own
    ``Uuid.randomUuid`` does."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def server_properties(
    ports: KafkaPorts,
    data_dir: Path,
    sasl_users: Mapping[str, str] | None = None,
    tls: BrokerTls | None = None,
) -> str:
    return f"""\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{ports.controller}
{_security_properties(ports, sasl_users, tls)}controller.listener.names=CONTROLLER
log.dirs={data_dir}
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.segment.bytes=16777216
"""


def kafka_ready(bootstrap: str, client: Mapping[str, str] | None = None) -> bool:
    """True when the broker answers an admin metadata call (``client``: security settings to use)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    host, _, port = bootstrap.rpartition(":")
    if not port_accepts(int(port), host):
        return False
    admin = AdminClient({**(client or {}), "bootstrap.servers": bootstrap, "socket.timeout.ms": 2000, "log_level": 0})
    try:
        metadata = admin.list_topics(timeout=2)
    except KafkaException:
        return False
    return bool(metadata.brokers)


def admin_client_settings(
    bootstrap: str, sasl_users: Mapping[str, str] | None = None, tls: BrokerTls | None = None
) -> dict[str, str]:
    """confluent-kafka settings of a client with every right on a broker started with these options."""
    settings = {"bootstrap.servers": bootstrap}
    if sasl_users is not None:
        settings.update(
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": SCRAM_MECHANISM,
                "sasl.username": SUPER_USER,
                "sasl.password": sasl_users[SUPER_USER],
            }
        )
    elif tls is not None:
        settings.update({"security.protocol": "SSL", "ssl.ca.location": str(tls.ca)})
    return settings


def start_kafka(
    state_dir: Path,
    broker_port: int | None = None,
    timeout_s: float = 90,
    *,
    sasl_users: Mapping[str, str] | None = None,
    tls: BrokerTls | None = None,
) -> tuple[StartedProcess, str]:
    """Format and start a broker under ``state_dir/kafka``; returns the process and the bootstrap address.

    ``sasl_users`` (name to password, ``admin`` among them) secures it with SASL/SCRAM-SHA-512 and
    ACLs, ``tls`` with an SSL listener (see the module's docstring); :func:`admin_client_settings`
    gives a client's settings for either.
    """
    if sasl_users is not None and tls is not None:
        raise ValueError("start_kafka takes sasl_users or tls, not both")
    if broker_port is not None:
        ensure_port_free(broker_port, "Kafka")
        ports = KafkaPorts(broker=broker_port, controller=free_ports(1, taken=[broker_port])[0])
    else:
        broker, controller = free_ports(2)
        ports = KafkaPorts(broker=broker, controller=controller)
    home = state_dir / "kafka"
    data_dir = home / "data"
    log_dir = state_dir / "logs"
    data_dir.mkdir(parents=True, exist_ok=True)
    libs = kafka_libs(log_dir)
    props = home / "server.properties"
    props.write_text(server_properties(ports, data_dir, sasl_users, tls), encoding="utf-8")
    log4j = home / "log4j2.properties"
    log4j.write_text(LOG4J2_PROPERTIES, encoding="utf-8")
    java = java_executable()
    common = [f"-Dlog4j2.configurationFile={log4j}", f"-Dkafka.logs.dir={log_dir}", "-cp", f"{libs}/*"]
    cluster_id = new_cluster_id()
    scram = [
        argument
        for name, password in (sasl_users or {}).items()
        for argument in ("--add-scram", f"{SCRAM_MECHANISM}=[name={name},password={password}]")
    ]
    run_to_completion(
        "Kafka storage format",
        [
            java,
            "-Xmx256m",
            *common,
            "kafka.tools.StorageTool",
            "format",
            "-t",
            cluster_id,
            "-c",
            str(props),
            "--ignore-formatted",
            *scram,
        ],
        log_dir / "kafka-format.log",
        timeout_s=60,
    )
    bootstrap = f"127.0.0.1:{ports.broker}"
    process = start_service(
        "Kafka",
        [
            java,
            "-Xms256m",
            "-Xmx512m",
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            *QUICK_JIT,
            *common,
            "kafka.Kafka",
            str(props),
        ],
        log_dir / "kafka.log",
        ready=lambda: kafka_ready(bootstrap, admin_client_settings(bootstrap, sasl_users, tls)),
        timeout_s=timeout_s,
    )
    return process, bootstrap
