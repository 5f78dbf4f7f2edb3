"""Helpers for the producer tests that run against the real stack (metastore, Kafka, Spark).

Each test uses its own database, table and topic prefix (from ``unique_name``), so tests never see
each other's tables or events.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from acidclean.producers.ingest import CommitResult, IngestRequest, create_table, ingest
from acidclean.producers.plan import CompactionType
from acidclean.producers.publish import Publisher
from acidclean.producers.vacuum import VacuumRequest, VacuumResult, outbox_for, run_vacuum
from acidclean.schemas.events import VacuumCommitted
from acidclean.shared.acid.id_lists import reader_ids
from acidclean.shared.acid.write_ids import ValidTxnList
from acidclean.shared.bus.codec import decode
from acidclean.shared.bus.reader import LogReader
from acidclean.shared.bus.records import raw_record
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.orc.reader import read_snapshot
from acidclean.shared.settings import Settings, load_settings
from acidclean.shared.storage import open_location

DB = "producers_it"
IDENTITY_ORDER = [("originalTransaction", "ascending"), ("bucket", "ascending"), ("rowId", "ascending")]


def make_settings(metastore_uri: str, kafka_bootstrap: str, prefix: str, state_dir: Path, **extra: Any) -> Settings:
    return load_settings(
        environ={},
        overrides={
            "metastore_uris": metastore_uri,
            "kafka": {"bootstrap.servers": kafka_bootstrap},
            "topic_prefix": f"{prefix}.",
            "topic_partitions": 1,
            "state_dir": str(state_dir),
            **extra,
        },
    )


def new_table(
    metastore: HiveMetastore,
    name: str,
    *,
    buckets: int = 2,
    columns: Sequence[tuple[str, str]] = (("id", "int"), ("v", "string")),
    partitioned_by: Sequence[tuple[str, str]] = (),
) -> str:
    create_table(metastore, DB, name, columns, buckets=buckets, partitioned_by=partitioned_by)
    return f"{DB}.{name}"


def write(
    metastore: HiveMetastore,
    name: str,
    *,
    rows: int = 50,
    commits: int = 1,
    delete_fraction: float = 0.0,
    partition: str | None = None,
) -> list[CommitResult]:
    return ingest(metastore, IngestRequest(DB, name, rows, commits, delete_fraction, partition))


def snapshot(metastore: HiveMetastore, name: str, partition: str | None = None) -> pa.Table:
    """Every visible row with its identity, in identity order, as a reader sees it now."""
    info = metastore.get_table(DB, name, partition)
    location = open_location(info.location)
    ids = reader_ids(metastore.valid_write_ids(DB, name), metastore.kind)
    txns = ValidTxnList.from_string(metastore.valid_txn_list())
    rows = read_snapshot(location.fs.arrow, location.path, ids, with_row_id=True, valid_txns=txns)
    return rows.sort_by(IDENTITY_ORDER)


def directories(metastore: HiveMetastore, name: str, partition: str | None = None) -> list[str]:
    location = open_location(metastore.get_table(DB, name, partition).location)
    return sorted(entry.name for entry in location.fs.list_dir(location.path))


def vacuum(
    metastore: HiveMetastore,
    settings: Settings,
    spark: Any,
    name: str,
    *,
    full: bool = False,
    partition: str | None = None,
    dry_run: bool = False,
    publisher: Publisher | None = None,
    allow_uncleaned: bool = False,
) -> VacuumResult:
    compaction = CompactionType.MAJOR if full else CompactionType.MINOR
    request = VacuumRequest(f"{DB}.{name}", partition, compaction, dry_run, allow_uncleaned)
    return run_vacuum(
        request,
        settings=settings,
        metastore=metastore,
        spark=lambda: spark,
        publisher=publisher or Publisher(settings, timeout_s=20.0),
        outbox=outbox_for(settings),
    )


def vacuum_events(settings: Settings) -> list[VacuumCommitted]:
    """Every VacuumCommitted on the settings' topic, read from the broker."""
    topic = settings.topic("vacuum_committed")
    events = []
    for message in LogReader(settings.kafka, [topic], stall_timeout_s=20.0):
        event = decode(raw_record(message), rejected_by="producer-tests", tenant=settings.tenant)
        assert isinstance(event, VacuumCommitted), event
        events.append(event)
    return events


def process_env(settings: Settings, state_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of an ``acidclean`` subprocess pointed at the test's metastore, broker and topics
    (``state_dir`` keeps any local stack from being picked up); ``extra`` adds ACIDCLEAN_* variables."""
    return {
        **os.environ,
        "ACIDCLEAN_STATE_DIR": str(state_dir),
        "ACIDCLEAN_METASTORE_URIS": settings.metastore_uris,
        "ACIDCLEAN_KAFKA_BOOTSTRAP": settings.kafka["bootstrap.servers"],
        "ACIDCLEAN_TOPIC_PREFIX": settings.topic_prefix,
        "ACIDCLEAN_TOPIC_PARTITIONS": str(settings.topic_partitions),
        **extra,
    }
