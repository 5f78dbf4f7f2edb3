"""TLS settings pass through to the Kafka client: a broker with an SSL listener whose certificate is
signed by a CA this test makes, and acidclean's topic creation, publisher and reader with
``security.protocol=SSL`` and ``ssl.ca.location`` publish and read back an event. Without the CA the
client cannot verify the broker, and says which broker did not answer instead of a traceback.

The broker is this module's own (``start_kafka(..., tls=BrokerTls(...))``), stopped by its pid.
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from acidclean.deploy.local.kafka import BrokerTls, start_kafka
from acidclean.deploy.local.process import stop_process
from acidclean.schemas.common import utc_now
from acidclean.schemas.events import VacuumCommitted
from acidclean.shared.bus.kafka_errors import ServiceUnavailableError
from acidclean.shared.bus.producer import KafkaEventBus
from acidclean.shared.bus.reader import LogReader
from acidclean.shared.bus.topics import ensure_topics
from acidclean.shared.settings import Settings

pytestmark = pytest.mark.integration


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_certificates(directory: Path) -> BrokerTls:
    """A self-signed CA and a broker certificate for 127.0.0.1 and localhost, signed by it (PEM)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("acidclean test CA"))
        .issuer_name(_name("acidclean test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    broker_key = ec.generate_private_key(ec.SECP256R1())
    broker = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(broker_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    ca_file = directory / "ca.pem"
    ca_file.write_bytes(ca.public_bytes(pem))
    keystore = directory / "broker.pem"  # Kafka's PEM keystore: the private key (PKCS#8), then the chain
    keystore.write_bytes(
        broker_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        + broker.public_bytes(pem)
        + ca.public_bytes(pem)
    )
    return BrokerTls(keystore=keystore, ca=ca_file)


@pytest.fixture(scope="module")
def tls_kafka() -> Iterator[tuple[str, BrokerTls]]:
    state_dir = Path(tempfile.mkdtemp(prefix="acidclean-tls-kafka-"))
    tls = make_certificates(state_dir)
    process, bootstrap = start_kafka(state_dir, tls=tls)
    try:
        yield bootstrap, tls
    finally:
        stop_process(process.pid, process.name)
        shutil.rmtree(state_dir, ignore_errors=True)


def a_vacuum() -> VacuumCommitted:
    return VacuumCommitted(
        event_id=uuid.uuid4(),
        tenant="default",
        table="sales.orders",
        occurred_at=utc_now(),
        location="file:/tmp/warehouse/sales.db/orders",
        compaction_type="MINOR",
        new_directories=["delta_0000001_0000002"],
        obsolete_directories=["delta_0000001_0000001_0000", "delta_0000002_0000002_0000"],
        highest_write_id=2,
        lock_snapshot=[],
        locks_observed=0,
        next_txn_id=3,
        vacuum_job_id="tls-test",
    )


def test_acidclean_creates_publishes_and_reads_over_tls_with_the_settings_given(
    tls_kafka: tuple[str, BrokerTls],
) -> None:
    bootstrap, tls = tls_kafka
    settings = Settings(
        kafka={"bootstrap.servers": bootstrap, "security.protocol": "SSL", "ssl.ca.location": str(tls.ca)},
        topic_prefix="tls.",
        topic_partitions=1,
    )
    report = ensure_topics(settings, ["vacuum_committed"])
    assert report.created == ["tls.acid.vacuum.committed"]
    event = a_vacuum()
    with KafkaEventBus(settings.kafka) as bus:
        delivery = bus.publish(settings.topic("vacuum_committed"), event)
    assert delivery.topic == "tls.acid.vacuum.committed"
    records = list(LogReader(settings.kafka, [settings.topic("vacuum_committed")]))
    assert [dict(record.headers() or [])["ce_id"] for record in records] == [str(event.event_id).encode()]


def test_without_the_ca_the_client_cannot_verify_the_broker_and_says_which_broker(
    tls_kafka: tuple[str, BrokerTls],
) -> None:
    bootstrap, _ = tls_kafka
    settings = Settings(kafka={"bootstrap.servers": bootstrap, "security.protocol": "SSL"}, topic_prefix="tls.")
    with pytest.raises(ServiceUnavailableError) as error:
        ensure_topics(settings, ["vacuum_committed"], timeout_s=5)
    assert str(error.value).startswith(f"no Kafka broker at {bootstrap} answered (")
    assert "\n" not in str(error.value)
