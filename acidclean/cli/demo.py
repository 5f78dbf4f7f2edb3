"""``acidclean demo``: the main job on the local stack, narrated as it happens.

It starts (or reuses) the local stack and shows each real service at work: a read lock taken in a
transaction appears in the metastore's lock list and goes away at commit; an event travels through
Kafka with its key and headers.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import click

from acidclean.cli.stack import state_dir_option
from acidclean.deploy.local.stack import stack_up
from acidclean.shared.metastore import HiveMetastore, LockRequestComponent


def _step(text: str) -> None:
    click.echo(click.style("==> ", fg="cyan", bold=True) + text)


def _event_round_trip(bootstrap: str) -> tuple[str, dict[str, str], float]:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    topic = f"acidclean.demo.{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    started = time.monotonic()
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    errors: list[object] = []
    producer.produce(
        topic, key=b"default/demo.events", value=json.dumps({"hello": "acidclean"}).encode(),
        headers=[("ce_type", b"io.acidclean.demo")], on_delivery=lambda err, _msg: errors.append(err),
    )
    producer.flush(30)
    if errors != [None]:
        raise click.ClickException(f"the broker did not acknowledge the demo event: {errors}")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                raw_headers: list[tuple[str, bytes]] = message.headers() or []  # type: ignore[assignment]
                headers = {name: value.decode() for name, value in raw_headers}
                return bytes(message.key() or b"").decode(), headers, time.monotonic() - started
    finally:
        consumer.close()
    raise click.ClickException(f"the demo event did not come back from topic {topic} within 30 s")


@click.command()
@state_dir_option
@click.option("--metastore", "flavour", type=click.Choice(["hive2", "hive3"]), default="hive2", show_default=True)
def demo(state_dir: Path, flavour: str) -> None:
    """Run the main job on the local stack and narrate it."""
    _step("starting the local stack (Kafka broker + Hive Metastore) ...")
    info, started = stack_up(state_dir, flavour)
    click.echo(f"    kafka {info.kafka_bootstrap}, metastore {info.metastore_uri}" + ("" if started else " (reused)"))

    with HiveMetastore(info.metastore_uri) as metastore:
        _step(f"metastore: {metastore.describe()}")
        metastore.create_database("demo")
        table = f"events_{uuid.uuid4().hex[:6]}"
        metastore.create_transactional_table("demo", table, [("id", "int"), ("v", "string")], buckets=2)
        click.echo(f"    created transactional table demo.{table}")
        txn = metastore.open_txn()
        lock = metastore.lock([LockRequestComponent("demo", table)], txn_id=txn)
        held = metastore.show_locks("demo", table)
        _step(f"a reader took a SHARED_READ lock in transaction {txn}: lock {lock.lock_id} is {lock.state}")
        for entry in held:
            click.echo(
                f"    show_locks: lock {entry.lock_id} {entry.lock_type} {entry.state} by {entry.user}@{entry.host}"
            )
        metastore.commit_txn(txn)
        _step(f"the reader committed: show_locks now lists {len(metastore.show_locks('demo', table))} locks")

    key, headers, seconds = _event_round_trip(info.kafka_bootstrap)
    _step(f"an event went through Kafka and back in {seconds * 1000:.0f} ms: key {key!r}, headers {headers}")
    _step(f"done. The stack keeps running; stop it with: acidclean stack down --state-dir {state_dir}")
