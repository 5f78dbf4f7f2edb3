"""Two tenants on one broker with SASL/SCRAM and ACLs: tenant A's credentials work on A's topics and
group and on nothing of tenant B's, each refusal is one line naming the topic or group and the ACL to
grant, and A keeps working after being refused.

The broker is this module's own (``start_kafka(..., sasl_users=...)``: a SASL_PLAINTEXT listener,
SCRAM-SHA-512 users created when its storage is formatted, the StandardAuthorizer, ``super.users``
admin), started and stopped here by its pid. The ACLs are created as admin with prefixed resource
patterns, as a platform team provisions a tenant: Create, Read and Write on topics ``a.*`` and Read on
groups ``a-*`` for User:tenant-a, the same with ``b`` for User:tenant-b. The metastore and the tables
are the session's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cleaner_support import Table, cleaner_settings, create_table, running_cleaner, settings_environment
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from acidclean.cli import EXIT_FAILED
from acidclean.deploy.local.kafka import admin_client_settings, start_kafka
from acidclean.deploy.local.process import stop_process
from acidclean.shared.bus.kafka_errors import KafkaAccessDeniedError
from acidclean.shared.bus.producer import KafkaEventBus
from acidclean.shared.bus.reader import LogReader
from acidclean.shared.bus.topics import ensure_topics
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.settings import Settings

pytestmark = pytest.mark.integration

USERS = {"admin": "admin-secret", "tenant-a": "a-secret", "tenant-b": "b-secret"}


def credentials(bootstrap: str, user: str) -> dict[str, str]:
    """A tenant's Kafka settings; its audit reads under groups ``x-reader-*`` (its prefix ``x-``)."""
    return {
        "group.id": f"{user.removeprefix('tenant-')}-reader",
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": USERS[user],
    }


def tenant_acls(user: str, prefix: str) -> list[AclBinding]:
    """What a platform team grants a tenant: its topics (prefix ``x.``) and its groups (prefix ``x-``)."""
    principal = f"User:{user}"
    topic_ops = (AclOperation.CREATE, AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE)
    bindings = [
        AclBinding(
            ResourceType.TOPIC,
            f"{prefix}.",
            ResourcePatternType.PREFIXED,
            principal,
            "*",
            operation,
            AclPermissionType.ALLOW,
        )
        for operation in topic_ops
    ]
    bindings.append(
        AclBinding(
            ResourceType.GROUP,
            f"{prefix}-",
            ResourcePatternType.PREFIXED,
            principal,
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        )
    )
    return bindings


@pytest.fixture(scope="module")
def secured_kafka() -> Iterator[str]:
    state_dir = Path(tempfile.mkdtemp(prefix="acidclean-sasl-kafka-"))
    process, bootstrap = start_kafka(state_dir, sasl_users=USERS)
    try:
        admin = AdminClient(admin_client_settings(bootstrap, USERS))
        bindings = tenant_acls("tenant-a", "a") + tenant_acls("tenant-b", "b")
        for future in admin.create_acls(bindings).values():
            future.result(30)
        time.sleep(1)  # the authorizer applies ACLs from the metadata log, a moment after they are created
        yield bootstrap
    finally:
        stop_process(process.pid, process.name)
        shutil.rmtree(state_dir, ignore_errors=True)


def tenant_settings(
    bootstrap: str, metastore_uri: str, root: Path, user: str, prefix: str, *, group_prefix: str | None = None
) -> Settings:
    """A tenant's cleaner settings: topics ``prefix.*``, group ``group_prefix-cleaner.acme``, ``user``'s
    credentials in the pass-through Kafka settings."""
    base = cleaner_settings(bootstrap, metastore_uri, root, prefix, partitions=1)
    return base.model_copy(
        update={"kafka": credentials(bootstrap, user), "group_id": f"{group_prefix or prefix}-cleaner"}
    )


def wait_until_cleaned(table: Table, obsolete: list[str], timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not set(obsolete) & set(table.children()):
            return
        time.sleep(0.3)
    raise AssertionError(f"{obsolete} still in {table.children()} after {timeout_s} s")


def a_cleaner_cleans(settings: Settings, metastore: HiveMetastore, root: Path) -> None:
    """One vacuum of a fresh table published with the tenant's credentials, cleaned by its cleaner."""
    table = create_table(metastore, root, f"t_{uuid.uuid4().hex[:8]}")
    obsolete = table.commit_deltas(2)
    vacuum = table.minor_vacuum()
    with running_cleaner(settings):
        with KafkaEventBus(settings.kafka) as bus:
            bus.publish(settings.topic("vacuum_committed"), vacuum)
        wait_until_cleaned(table, obsolete)
    done = list(LogReader(settings.kafka, [settings.topic("cleanup_done")]))
    assert any(str(vacuum.event_id).encode() in (message.value() or b"") for message in done)


def run_cleaner_cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACIDCLEAN_")}
    env.update(settings_environment(settings))
    env.update({f"ACIDCLEAN_KAFKA_{key.upper().replace('.', '_')}": value for key, value in settings.kafka.items()})
    env["ACIDCLEAN_STATE_DIR"] = tempfile.mkdtemp(prefix="no-stack-")
    return subprocess.run(
        [sys.executable, "-c", "from acidclean.cli import main; main()", "cleaner", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_tenant_a_cleans_its_own_tables_with_its_own_credentials(
    secured_kafka: str, metastore: HiveMetastore, metastore_uri: str, tmp_path: Path
) -> None:
    settings = tenant_settings(secured_kafka, metastore_uri, tmp_path, "tenant-a", "a")
    a_cleaner_cleans(settings, metastore, tmp_path)


def test_tenant_a_may_not_create_or_use_tenant_bs_topics(
    secured_kafka: str, metastore_uri: str, tmp_path: Path
) -> None:
    a_on_b = tenant_settings(secured_kafka, metastore_uri, tmp_path, "tenant-a", "b")
    bootstrap = secured_kafka

    created = run_cleaner_cli(a_on_b)
    assert created.returncode == EXIT_FAILED, created.stderr
    assert error_line(created) == (
        "error: the principal User:tenant-a may not create topic b.acid.vacuum.committed: grant Create on it "
        f"(kafka-acls --bootstrap-server {bootstrap} --add --allow-principal User:tenant-a --operation Create "
        "--topic b.acid.vacuum.committed), or create the topics beforehand and run with --no-create-topics "
        "(create_topics=false)"
    )

    checked = run_cleaner_cli(a_on_b, "--no-create-topics")
    assert checked.returncode == EXIT_FAILED, checked.stderr
    assert error_line(checked) == (
        "error: the principal User:tenant-a may not use topic b.acid.vacuum.committed: grant Read and Write on it "
        f"(kafka-acls --bootstrap-server {bootstrap} --add --allow-principal User:tenant-a --operation Read "
        "--operation Write --topic b.acid.vacuum.committed)"
    )


def test_tenant_a_may_not_read_tenant_bs_topics(secured_kafka: str, metastore_uri: str, tmp_path: Path) -> None:
    b = tenant_settings(secured_kafka, metastore_uri, tmp_path, "tenant-b", "b")
    ensure_topics(b)  # B's topics, created by B
    with pytest.raises(KafkaAccessDeniedError) as refused:
        list(LogReader(credentials(secured_kafka, "tenant-a"), [b.topic("cleanup_delay")], stall_timeout_s=10))
    assert str(refused.value) == (
        "the principal User:tenant-a may not read topic b.acid.cleanup.delay: grant Read on it (kafka-acls "
        f"--bootstrap-server {secured_kafka} --add --allow-principal User:tenant-a --operation Read "
        "--topic b.acid.cleanup.delay)"
    )


def test_tenant_a_may_not_write_to_tenant_bs_topics(
    secured_kafka: str, metastore: HiveMetastore, metastore_uri: str, tmp_path: Path
) -> None:
    table = create_table(metastore, tmp_path, f"t_{uuid.uuid4().hex[:8]}")
    table.commit_deltas(1)
    vacuum = table.minor_vacuum()
    bus = KafkaEventBus(credentials(secured_kafka, "tenant-a"), delivery_timeout_s=10, total_timeout_s=10)
    with bus, pytest.raises(KafkaAccessDeniedError) as refused:
        bus.publish("b.acid.vacuum.committed", vacuum)
    assert str(refused.value) == (
        "the principal User:tenant-a may not write to topic b.acid.vacuum.committed: grant Write on it (kafka-acls "
        f"--bootstrap-server {secured_kafka} --add --allow-principal User:tenant-a --operation Write "
        f"--topic b.acid.vacuum.committed); event {vacuum.event_id} (acidclean.vacuum.committed) was not published "
        "(do not commit the input offset)"
    )


def test_a_reader_without_a_group_acl_says_which_group_prefix_to_grant(secured_kafka: str) -> None:
    kafka = {**credentials(secured_kafka, "tenant-a"), "group.id": "audit"}
    ensure_topics(Settings(kafka=kafka, topic_prefix="a."), ["cleanup_done"])
    producer = Producer({key: value for key, value in kafka.items() if key != "group.id"})
    producer.produce("a.acid.cleanup.done", b"one record, so that the reader fetches")
    assert producer.flush(30) == 0
    with pytest.raises(KafkaAccessDeniedError) as refused:
        list(LogReader(kafka, ["a.acid.cleanup.done"], stall_timeout_s=10))
    assert str(refused.value) == (
        "the principal User:tenant-a may not use consumer groups audit-*, which reading the topics needs (nothing "
        f"is committed under them): grant Read on that prefix (kafka-acls --bootstrap-server {secured_kafka} --add "
        "--allow-principal User:tenant-a --operation Read --resource-pattern-type prefixed --group audit-), or set "
        "kafka.group.id to a group prefix it may use"
    )


def test_tenant_a_may_not_join_tenant_bs_group(secured_kafka: str, metastore_uri: str, tmp_path: Path) -> None:
    a_in_bs_group = tenant_settings(secured_kafka, metastore_uri, tmp_path, "tenant-a", "a", group_prefix="b")
    result = run_cleaner_cli(a_in_bs_group)
    assert result.returncode == EXIT_FAILED, result.stderr
    assert error_line(result) == (
        "error: the principal User:tenant-a may not join consumer group b-cleaner.acme: grant Read on it "
        f"(kafka-acls --bootstrap-server {secured_kafka} --add --allow-principal User:tenant-a --operation Read "
        "--group b-cleaner.acme)"
    )


def test_tenant_a_keeps_working_after_being_refused(
    secured_kafka: str, metastore: HiveMetastore, metastore_uri: str, tmp_path: Path
) -> None:
    settings = tenant_settings(secured_kafka, metastore_uri, tmp_path, "tenant-a", "a")
    with pytest.raises(KafkaAccessDeniedError):
        list(LogReader(settings.kafka, ["b.acid.cleanup.done"], stall_timeout_s=10))
    a_cleaner_cleans(settings, metastore, tmp_path)


def test_a_missing_topic_under_no_create_topics_is_one_line_naming_it(
    secured_kafka: str, metastore_uri: str, tmp_path: Path
) -> None:
    not_provisioned = tenant_settings(secured_kafka, metastore_uri, tmp_path, "tenant-a", "a.unprovisioned")
    result = run_cleaner_cli(not_provisioned, "--no-create-topics")
    assert result.returncode == EXIT_FAILED, result.stderr
    assert error_line(result) == (
        "error: topic a.unprovisioned.acid.vacuum.committed does not exist and topics are not created "
        "(--no-create-topics, create_topics=false): create it (1 partition, retention.ms=-1) or let acidclean "
        "create it"
    )
