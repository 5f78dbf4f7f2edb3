"""The cleanup ledger (consumers/ledger.py): exact, compressed, cut in chunks that each fit one Kafka
message, and read back to the same files; a 100,000-file cleanup is measured in bytes on the log."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest
from events.factories import done as done_of
from events.factories import undone, vacuum

from acidclean.consumers.audit import fold
from acidclean.consumers.ledger import IncompleteLedgerError, assemble, ledger_records
from acidclean.consumers.remover import RemovedFile
from acidclean.consumers.undo_log import LedgerLog, UndoRefusedError, ledger_log_of, select_cleanups, with_undos
from acidclean.schemas.events import CleanupDone
from acidclean.schemas.ledger import MAX_LEDGER_DATA, CleanupLedger
from acidclean.shared.bus.codec import decode, encode
from acidclean.shared.bus.records import RawRecord
from acidclean.shared.metastore import TableIdentity

LOCATION = "hdfs://nn:8020/warehouse/sales.db/orders"
PATH = "/warehouse/sales.db/orders"
KAFKA_MESSAGE_MAX = 1_048_588  # the broker's default message.max.bytes
NOW = datetime(2026, 12, 2, 6, 30, tzinfo=timezone.utc)


def done() -> CleanupDone:
    vacuum_id = uuid.uuid4()
    return CleanupDone(
        tenant="acme",
        table="sales.orders",
        occurred_at=NOW,
        correlation_id=vacuum_id,
        causation_id=vacuum_id,
        directories_removed=[],
        time_waited_ms=0,
        attempts=1,
        cleaner_id="cleaner-1",
    )


def hdfs_files(count: int, per_directory: int = 1000) -> list[RemovedFile]:
    files = []
    for index in range(count):
        directory = f"delta_{index // per_directory + 1:07d}_{index // per_directory + 1:07d}_0000"
        path = f"bucket_{index % per_directory:05d}"
        went = f"trash:/user/hive/.Trash/Current{PATH}/{directory}/{path}"
        identity = f"mtime_ns={1796192150879000000 + index}"
        files.append(RemovedFile(directory, path, 1_000_000 + index * 7, identity, went))
    return files


def on_log(records: list[CleanupLedger]) -> int:
    total = 0
    for record in records:
        outgoing = encode(record)
        total += len(outgoing.key) + len(outgoing.value) + sum(len(n) + len(v) for n, v in outgoing.headers)
    return total


def test_a_ledger_reads_back_exactly_the_files_and_destinations() -> None:
    files = [
        *hdfs_files(3),
        RemovedFile("delta_0000009_0000009_0000", "bucket_00000", 10, "mtime_ns=1", "gone"),
        RemovedFile("delta_0000009_0000009_0000", "bucket_00001", 11, "etag=a,version=v1", "version:v1"),
        RemovedFile("delta_0000009_0000009_0000", "x", 1, "mtime_ns=2", f"trash:/user/hive/.Trash/Current{PATH}/d/x17"),
    ]
    identity = TableIdentity(7, 1000, LOCATION)
    records = ledger_records(done(), LOCATION, PATH, identity, files)
    assert len(records) == 1 and records[0].files == 6
    # Through the wire and back, as undo reads it from the ledger topic.
    wire = [encode(record) for record in records]
    read = [
        decode(
            RawRecord("acme.acid.cleanup.ledger", 0, i, w.key, w.value, w.headers),
            rejected_by="test",
            tenant="acme",
            expected=(CleanupLedger,),
        )
        for i, w in enumerate(wire)
    ]
    assert all(isinstance(r, CleanupLedger) for r in read), read
    ledger = assemble([r for r in read if isinstance(r, CleanupLedger)], PATH)
    assert list(ledger.files) == files
    assert ledger.identity == identity and ledger.location == LOCATION


def test_a_missing_chunk_is_named_not_skipped() -> None:
    records = ledger_records(done(), LOCATION, PATH, None, hdfs_files(45_000))
    assert len(records) == 3
    with pytest.raises(IncompleteLedgerError, match=r"chunks \[1\] of 3"):
        assemble([records[0], records[2]], PATH)


def test_the_ledger_of_a_100000_file_cleanup_is_bounded_on_the_log(capsys: pytest.CaptureFixture[str]) -> None:
    files = hdfs_files(100_000)
    records = ledger_records(done(), LOCATION, PATH, TableIdentity(None, 1000, LOCATION), files)
    size = on_log(records)
    with capsys.disabled():
        per_file = size / 100_000
        print(f"\nledger of 100,000 files: {len(records)} records, {size:,} bytes on the log ({per_file:.1f} B/file)")
    assert all(len(encode(record).value) < KAFKA_MESSAGE_MAX for record in records)
    assert all(len(record.data) <= MAX_LEDGER_DATA for record in records)
    assert sum(record.files for record in records) == 100_000
    assert size < 100_000 * 16  # a few bytes a file: paths and trash paths are written once per chunk as templates
    assert list(assemble(records, PATH).files) == files


def test_audit_rows_of_undone_cleanups_say_so() -> None:
    v = vacuum()
    record = encode(undone(v, restored_files=4, refused_files=1))
    raw = RawRecord("acme.acid.cleanup.ledger", 0, 0, record.key, record.value, record.headers)
    undos = ledger_log_of([raw], "acme").undone_vacuums()
    rows = with_undos(fold([v, done_of(v)]), undos)
    [row] = rows
    assert row.state == "cleaned"
    assert row.reason is not None and "by ops@host: 4 file(s) put back, 1 refused" in row.reason
    assert with_undos(fold([v, done_of(v)]), {}) == fold([v, done_of(v)])


def test_undo_selects_a_cleanup_by_its_id_or_its_vacuum_or_a_table_since_a_time() -> None:
    log = LedgerLog()
    first, second = done(), done()
    second = second.model_copy(update={"occurred_at": NOW + timedelta(hours=2), "table": "sales.other"})
    for cleanup in (first, second):
        for record in ledger_records(cleanup, LOCATION, PATH, None, hdfs_files(2)):
            log.add(record)
    assert [c[0].cleanup_id for c in select_cleanups(log, str(first.event_id), None, None)] == [first.event_id]
    assert [c[0].cleanup_id for c in select_cleanups(log, str(second.correlation_id), None, None)] == [second.event_id]
    assert [c[0].table for c in select_cleanups(log, None, "sales.orders", None)] == ["sales.orders"]
    assert select_cleanups(log, None, None, NOW + timedelta(hours=1))[0][0].cleanup_id == second.event_id
    with pytest.raises(UndoRefusedError, match="no ledger of cleanup"):
        select_cleanups(log, "00000000-0000-0000-0000-000000000000", None, None)
