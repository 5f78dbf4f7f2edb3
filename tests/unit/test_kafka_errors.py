"""Bad Kafka settings, an unreachable broker or metastore, and a broker's refusals are one line each,
never a traceback: a setting librdkafka refuses exits 2 naming the key, a service that does not
answer exits 4 naming the address, an ACL refusal exits 1 naming the topic or group and the ACL."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import KafkaError

from acidclean.cli import EXIT_FAILED, EXIT_UNAVAILABLE, EXIT_USAGE, main
from acidclean.deploy.local.process import free_port
from acidclean.shared.bus.kafka_errors import KafkaAccessDeniedError, ServiceUnavailableError, refused
from acidclean.shared.bus.topics import check_topics, ensure_topics
from acidclean.shared.errors import ConfigurationError
from acidclean.shared.settings import Settings


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    monkeypatch.setenv("ACIDCLEAN_STATE_DIR", str(tmp_path / "no-stack"))
    yield {
        "ACIDCLEAN_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port()}",
        "ACIDCLEAN_ALLOWED_ROOTS": f'{{"default": ["{tmp_path}"]}}',
    }


def run(*args: str, env: dict[str, str]) -> Result:
    return CliRunner().invoke(main, list(args), env=env)


def one_error_line(result: Result) -> str:
    assert "Traceback" not in result.output, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.mark.parametrize(
    ("key", "value", "line"),
    [
        (
            "SECURITY_PROTOCOL",
            "TLS",
            "error: Kafka setting security.protocol=TLS is not a valid value: use one of PLAINTEXT, SSL, "
            "SASL_PLAINTEXT or SASL_SSL",
        ),
        (
            "SASL_JAAS_CONFIG",
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="a" password="b";',
            "error: Kafka setting sasl.jaas.config is the Java client's; librdkafka (acidclean's admin client) takes "
            "sasl.mechanism, sasl.username and sasl.password (or sasl.oauthbearer.*) instead: replace it",
        ),
        (
            "NO_SUCH_THING",
            "1",
            "error: Kafka setting no.such.thing is not a librdkafka property: correct its name or remove it (the "
            "properties are listed in librdkafka's CONFIGURATION.md)",
        ),
        (
            "SSL_TRUSTSTORE_LOCATION",
            "/etc/kafka/truststore.jks",
            "error: Kafka setting ssl.truststore.location is the Java client's, librdkafka has no such property: use "
            "ssl.ca.location (a PEM file of the CA certificates) instead",
        ),
    ],
    ids=["security.protocol=TLS", "sasl.jaas.config", "unknown property", "ssl.truststore.location"],
)
@pytest.mark.parametrize("command", [["cleaner"], ["cleaner", "--no-create-topics"], ["audit"]], ids=" ".join)
def test_a_setting_librdkafka_refuses_is_one_line_naming_the_key_and_exits_2(
    env: dict[str, str], command: list[str], key: str, value: str, line: str
) -> None:
    result = run(*command, env={**env, f"ACIDCLEAN_KAFKA_{key}": value})
    assert result.exit_code == EXIT_USAGE, result.output
    expected = line.replace("admin client", "reader") if command == ["audit"] else line
    assert one_error_line(result) == expected


def test_an_unreachable_broker_is_one_line_naming_the_address_and_exits_4(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bootstrap = env["ACIDCLEAN_KAFKA_BOOTSTRAP"]
    # The cleaner's check waits out its timeout (30 s): 3 s is the same story, since nothing listens there.
    monkeypatch.setitem(ensure_topics.__kwdefaults__, "timeout_s", 3.0)
    result = run("cleaner", "--no-create-topics", env=env)
    assert result.exit_code == EXIT_UNAVAILABLE, result.output
    assert one_error_line(result) == (
        f"error: no Kafka broker at {bootstrap} answered (a metadata request for topic acid.vacuum.committed: "
        "Failed to get metadata: Local: Broker transport failure): check bootstrap.servers, that the brokers run "
        "and that security.protocol matches their listener"
    )


def test_creating_topics_on_an_unreachable_broker_says_the_address() -> None:
    settings = Settings(kafka={"bootstrap.servers": f"127.0.0.1:{free_port()}"})
    with pytest.raises(ServiceUnavailableError, match=r"no Kafka broker at 127\.0\.0\.1:\d+ answered \(creating topic"):
        ensure_topics(settings, ["vacuum_committed"], timeout_s=1.0)
    with pytest.raises(ServiceUnavailableError, match=r"a metadata request for topic acid\.vacuum\.committed"):
        check_topics(settings, ["vacuum_committed"], timeout_s=1.0)


@pytest.mark.parametrize("command", [["read", "sales.orders"], ["create-table", "sales.orders", "--columns", "id int"]])
def test_an_unreachable_metastore_is_one_line_naming_the_address_and_exits_4(
    env: dict[str, str], command: list[str]
) -> None:
    port = free_port()
    with socket.socket() as closed:  # nothing listens on port: connection refused at once
        assert closed.connect_ex(("127.0.0.1", port)) != 0
    result = run(*command, env={**env, "ACIDCLEAN_METASTORE_URIS": f"thrift://127.0.0.1:{port}"})
    assert result.exit_code == EXIT_UNAVAILABLE, result.output
    line = one_error_line(result)
    assert line.startswith(f"error: cannot reach the Hive Metastore at thrift://127.0.0.1:{port} (")
    assert line.endswith("check hive.metastore.uris and that the metastore runs")


KAFKA = {"bootstrap.servers": "b1:9093", "security.protocol": "SASL_SSL", "sasl.username": "tenant-a"}


def test_a_refused_read_names_the_principal_the_topic_and_the_acl() -> None:
    error = refused(
        KAFKA,
        KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED),
        topic="b.acid.cleanup.delay",
        doing="read",
        operations="Read",
    )
    assert isinstance(error, KafkaAccessDeniedError)
    assert str(error) == (
        "the principal User:tenant-a may not read topic b.acid.cleanup.delay: grant Read on it (kafka-acls "
        "--bootstrap-server b1:9093 --add --allow-principal User:tenant-a --operation Read "
        "--topic b.acid.cleanup.delay)"
    )


def test_a_refused_group_names_the_group_and_the_acl() -> None:
    error = refused(KAFKA, KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED), group="b.cleaner", doing="join")
    assert str(error) == (
        "the principal User:tenant-a may not join consumer group b.cleaner: grant Read on it (kafka-acls "
        "--bootstrap-server b1:9093 --add --allow-principal User:tenant-a --operation Read --group b.cleaner)"
    )


def test_a_refused_create_says_grant_create_or_no_create_topics() -> None:
    error = refused(
        KAFKA, KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED), topic="a.acid.vacuum.committed", doing="create"
    )
    assert str(error) == (
        "the principal User:tenant-a may not create topic a.acid.vacuum.committed: grant Create on it (kafka-acls "
        "--bootstrap-server b1:9093 --add --allow-principal User:tenant-a --operation Create --topic "
        "a.acid.vacuum.committed), or create the topics beforehand and run with --no-create-topics "
        "(create_topics=false)"
    )


def test_refused_credentials_are_a_configuration_error() -> None:
    error = refused(KAFKA, KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED), topic="t")
    assert isinstance(error, ConfigurationError)
    assert "check sasl.mechanism, sasl.username and sasl.password" in str(error)


def test_a_refusal_exits_1() -> None:
    assert EXIT_FAILED == 1 and EXIT_UNAVAILABLE == 4
