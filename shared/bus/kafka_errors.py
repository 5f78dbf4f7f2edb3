"""Kafka's refusals and librdkafka's configuration errors as one actionable line each.

A wrong setting (``security.protocol=TLS``, a Java ``sasl.jaas.config``, a misspelt property) makes
confluent-kafka raise ``KafkaException(_INVALID_ARG)`` with librdkafka's wording; a broker that
refuses an operation answers ``*_AUTHORIZATION_FAILED``; a broker that does not answer ends in
``_TRANSPORT`` or a timeout. Each becomes an :class:`AcidCleanError` naming the setting, the topic
or group, or the address, and saying what to do: a configuration error exits 2, a refusal 1, a
service that did not answer 4 (see ``acidclean/cli/__init__.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from confluent_kafka import KafkaError, KafkaException

from acidclean.shared.errors import BusError, ConfigurationError

SECURITY_PROTOCOLS = "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"

# Java client settings librdkafka does not have, and what to use instead.
JAVA_ONLY_SETTINGS = {
    "sasl.jaas.config": "sasl.mechanism, sasl.username and sasl.password (or sasl.oauthbearer.*)",
    "ssl.truststore.location": "ssl.ca.location (a PEM file of the CA certificates)",
    "ssl.truststore.password": "ssl.ca.location (a PEM file needs no password)",
    "ssl.keystore.location": "ssl.certificate.location and ssl.key.location (PEM), or ssl.keystore.location with "
    "a PKCS#12 file",
    "key.serializer": "nothing: acidclean serialises its events itself",
    "value.serializer": "nothing: acidclean serialises its events itself",
    "key.deserializer": "nothing: acidclean decodes its events itself",
    "value.deserializer": "nothing: acidclean decodes its events itself",
}

AUTHORIZATION_CODES = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    }
)
# The client gave up reaching any broker (or got no answer in time).
UNREACHABLE_CODES = frozenset(
    {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT, KafkaError._RESOLVE}
)
AUTHENTICATION_CODES = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})


class KafkaAccessDeniedError(BusError):
    """The broker's ACLs refuse this client's principal an operation on a topic, group or the cluster."""


class KafkaTopicMissingError(BusError):
    """A topic acidclean needs does not exist and it was told not to create topics."""


class ServiceUnavailableError(BusError):
    """A Kafka broker did not answer (exit code 4)."""


def principal(kafka: Mapping[str, str]) -> str:
    """The principal the broker sees for these settings, as kafka-acls spells it."""
    username = kafka.get("sasl.username")
    if username:
        return f"User:{username}"
    if kafka.get("security.protocol", "PLAINTEXT").upper() == "PLAINTEXT":
        return "User:ANONYMOUS"
    return "this client's principal"


def _acls_command(kafka: Mapping[str, str], operations: str, resource: str) -> str:
    bootstrap = kafka.get("bootstrap.servers", "BROKER:PORT")
    flags = " ".join(f"--operation {operation}" for operation in operations.split(" and "))
    who = principal(kafka)
    allow = who if who.startswith("User:") else "User:NAME"
    return f"kafka-acls --bootstrap-server {bootstrap} --add --allow-principal {allow} {flags} {resource}"


def configuration_error(error: KafkaException | KafkaError, role: str = "client") -> ConfigurationError:
    """librdkafka's refusal of a setting as one line naming the setting and what to put instead."""
    kafka_error = error.args[0] if isinstance(error, KafkaException) else error
    message = kafka_error.str() if isinstance(kafka_error, KafkaError) else str(kafka_error)
    if "JAAS" in message:
        return ConfigurationError(
            f"Kafka setting sasl.jaas.config is the Java client's; librdkafka (acidclean's {role}) takes "
            f"{JAVA_ONLY_SETTINGS['sasl.jaas.config']} instead: replace it"
        )
    if "Java TrustStores" in message:
        return ConfigurationError(
            "Kafka setting ssl.truststore.location is the Java client's, librdkafka has no such property: use "
            f"{JAVA_ONLY_SETTINGS['ssl.truststore.location']} instead"
        )
    unknown = re.search(r'No such configuration property: "([^"]+)"', message)
    if unknown:
        key = unknown.group(1)
        if key in JAVA_ONLY_SETTINGS:
            return ConfigurationError(
                f"Kafka setting {key} is the Java client's, librdkafka has no such property: use "
                f"{JAVA_ONLY_SETTINGS[key]} instead"
            )
        return ConfigurationError(
            f"Kafka setting {key} is not a librdkafka property: correct its name or remove it (the properties are "
            "listed in librdkafka's CONFIGURATION.md)"
        )
    invalid = re.search(r'Invalid value "([^"]*)" for configuration property "([^"]+)"', message)
    if invalid:
        value, key = invalid.groups()
        hint = f"use one of {SECURITY_PROTOCOLS}" if key == "security.protocol" else "see librdkafka's CONFIGURATION.md"
        return ConfigurationError(f"Kafka setting {key}={value} is not a valid value: {hint}")
    return ConfigurationError(f"invalid Kafka {role} settings: {message}; correct the kafka settings")


def unreachable(kafka: Mapping[str, str], what: str, detail: str = "") -> ServiceUnavailableError:
    """No broker answered ``what`` (e.g. "creating topic acid.vacuum.committed")."""
    bootstrap = kafka.get("bootstrap.servers", "")
    return ServiceUnavailableError(
        f"no Kafka broker at {bootstrap} answered ({what}{f': {detail}' if detail else ''}): check "
        "bootstrap.servers, that the brokers run and that security.protocol matches their listener"
    )


def refused(
    kafka: Mapping[str, str],
    error: KafkaError,
    *,
    topic: str | None = None,
    group: str | None = None,
    doing: str = "use",
    operations: str = "Read",
) -> BusError | ConfigurationError:
    """The broker's answer ``error`` to ``doing`` on ``topic`` or ``group`` as one actionable line.

    ``operations`` are the ACL operations to grant ("Read", "Write", "Read and Write"); Read and Write
    include Describe, so they also answer a refused metadata request.
    """
    code = error.code()
    who = principal(kafka)
    if code in AUTHENTICATION_CODES:
        return ConfigurationError(
            f"Kafka refused the credentials of {who} ({error.str()}): check sasl.mechanism, sasl.username and "
            "sasl.password"
        )
    if code == KafkaError.GROUP_AUTHORIZATION_FAILED or (code in AUTHORIZATION_CODES and topic is None and group):
        return KafkaAccessDeniedError(
            f"the principal {who} may not join consumer group {group}: grant Read on it "
            f"({_acls_command(kafka, 'Read', f'--group {group}')})"
        )
    if code == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
        resource = f"--topic {topic}" if topic else "--cluster"
        return KafkaAccessDeniedError(
            f"the principal {who} may not create topic {topic}: grant Create on it "
            f"({_acls_command(kafka, 'Create', resource)}), or create the topics beforehand and run with "
            "--no-create-topics (create_topics=false)"
        )
    if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
        return KafkaAccessDeniedError(
            f"the principal {who} may not {doing} topic {topic}: grant {operations} on it "
            f"({_acls_command(kafka, operations, f'--topic {topic}')})"
        )
    if code in UNREACHABLE_CODES:
        return unreachable(kafka, f"{doing} {'topic ' + topic if topic else 'group ' + str(group)}", error.str())
    target = f"topic {topic}" if topic else f"group {group}"
    return BusError(f"Kafka refused to {doing} {target}: {error.str()} [{error.name()}]")
