"""One Apache Kafka 4.1 broker in KRaft combined broker+controller mode on 127.0.0.1.

The storage is formatted with ``kafka.tools.StorageTool`` under a fresh cluster id, then
``kafka.Kafka`` runs with every replication factor at 1 and no initial rebalance delay, so a test's
first consumer group joins at once. Ready means an admin metadata call answers.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from pathlib import Path

from acidclean.deploy.local.jars import kafka_libs
from acidclean.deploy.local.process import (
    StartedProcess,
    ensure_port_free,
    free_port,
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


def new_cluster_id() -> str:
    """A random KRaft cluster id. One starting with ``-`` would be read by StorageTool's argument
    parser as an option (about one start in 64 failed that way), so draw again, as Kafka's own
    ``Uuid.randomUuid`` does."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def server_properties(ports: KafkaPorts, data_dir: Path) -> str:
    return f"""\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{ports.controller}
listeners=PLAINTEXT://127.0.0.1:{ports.broker},CONTROLLER://127.0.0.1:{ports.controller}
advertised.listeners=PLAINTEXT://127.0.0.1:{ports.broker}
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
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


def kafka_ready(bootstrap: str) -> bool:
    """True when the broker answers an admin metadata call."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    host, _, port = bootstrap.rpartition(":")
    if not port_accepts(int(port), host):
        return False
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000, "log_level": 0})
    try:
        metadata = admin.list_topics(timeout=2)
    except KafkaException:
        return False
    return bool(metadata.brokers)


def start_kafka(state_dir: Path, broker_port: int | None = None, timeout_s: float = 90) -> tuple[StartedProcess, str]:
    """Format and start a broker under ``state_dir/kafka``; returns the process and the bootstrap address."""
    if broker_port is not None:
        ensure_port_free(broker_port, "Kafka")
    ports = KafkaPorts(broker=broker_port or free_port(), controller=free_port())
    home = state_dir / "kafka"
    data_dir = home / "data"
    log_dir = state_dir / "logs"
    data_dir.mkdir(parents=True, exist_ok=True)
    libs = kafka_libs(log_dir)
    props = home / "server.properties"
    props.write_text(server_properties(ports, data_dir), encoding="utf-8")
    log4j = home / "log4j2.properties"
    log4j.write_text(LOG4J2_PROPERTIES, encoding="utf-8")
    java = java_executable()
    common = [f"-Dlog4j2.configurationFile={log4j}", f"-Dkafka.logs.dir={log_dir}", "-cp", f"{libs}/*"]
    cluster_id = new_cluster_id()
    run_to_completion(
        "Kafka storage format",
        [java, "-Xmx256m", *common, "kafka.tools.StorageTool", "format", "-t", cluster_id,
         "-c", str(props), "--ignore-formatted"],
        log_dir / "kafka-format.log",
        timeout_s=60,
    )
    bootstrap = f"127.0.0.1:{ports.broker}"
    process = start_service(
        "Kafka",
        [java, "-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
         *common, "kafka.Kafka", str(props)],
        log_dir / "kafka.log",
        ready=lambda: kafka_ready(bootstrap),
        timeout_s=timeout_s,
    )
    return process, bootstrap
