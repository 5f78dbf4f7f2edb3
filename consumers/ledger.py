"""The cleanup ledger: each file a cleanup removed, with its size, storage identity and where it went,
as ``CleanupLedger`` records on the ledger topic (:mod:`acidclean.schemas.ledger`), and back.

Bounded: the files are written as columns (directory index, path, size, identity, destination) of
JSON, compressed with zlib, and cut into chunks of at most :data:`CHUNK_FILES` files whose compressed
data fits one Kafka message; a destination that is the file's own path under a trash root is written
once per chunk as a template, so a cleanup of 100,000 files costs a few bytes per file on the log
(tests/bench/test_ledger_size.py prints the figure). Each chunk names the ``CleanupDone`` it belongs
to and the table's identity as confirmed before the deletes.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from acidclean.consumers.remover import RemovedFile
from acidclean.schemas.common import derived_event_id
from acidclean.schemas.events import CleanupDone
from acidclean.schemas.ledger import MAX_LEDGER_DATA, CleanupLedger
from acidclean.shared.metastore import TableIdentity

CHUNK_FILES = 20_000
_HERE = "\x00"  # in a destination: the file's own path, relative to the storage root (never in a path)


@dataclass(frozen=True)
class Ledger:
    """A cleanup's whole ledger, read back from its chunks."""

    cleanup_id: str
    table: str
    partition: str | None
    correlation_id: str
    location: str
    identity: TableIdentity
    files: tuple[RemovedFile, ...]
    recorded_at: datetime


def ledger_records(
    done: CleanupDone, location: str, storage_path: str, identity: TableIdentity | None, files: Sequence[RemovedFile]
) -> list[CleanupLedger]:
    """The ``CleanupLedger`` chunks of ``files`` removed under ``storage_path`` (the location's path on
    its storage) by the cleanup that ``done`` reports; none when nothing was removed."""
    if not files:
        return []
    chunks = _chunks(list(files), storage_path)
    return [
        CleanupLedger(
            event_id=derived_event_id(done.event_id, f"ledger-{index}"),
            tenant=done.tenant,
            table=done.table,
            partition=done.partition,
            occurred_at=done.occurred_at,
            causation_id=done.event_id,
            correlation_id=done.correlation_id,
            cleanup_id=done.event_id,
            location=location,
            table_id=None if identity is None else identity.table_id,
            create_time=None if identity is None else identity.create_time,
            partition_create_time=None if identity is None else identity.partition_create_time,
            chunk=index,
            chunks=len(chunks),
            files=len(part),
            bytes=sum(item.size for item in part),
            data=data,
        )
        for index, (part, data) in enumerate(chunks)
    ]


def _chunks(files: list[RemovedFile], storage_path: str) -> list[tuple[list[RemovedFile], str]]:
    size = CHUNK_FILES
    while True:
        parts = [files[start : start + size] for start in range(0, len(files), size)]
        encoded = [encode_files(part, storage_path) for part in parts]
        if all(len(data) <= MAX_LEDGER_DATA for data in encoded) or size == 1:
            return list(zip(parts, encoded, strict=True))
        size = max(1, size // 2)  # long paths or identities: smaller chunks


def encode_files(files: Sequence[RemovedFile], storage_path: str) -> str:
    directories: dict[str, int] = {}
    columns: dict[str, list[object]] = {"dir": [], "path": [], "size": [], "identity": [], "went": []}
    root = storage_path.rstrip("/")
    for item in files:
        own = f"{root}/{item.directory}/{item.path}".lstrip("/")
        columns["dir"].append(directories.setdefault(item.directory, len(directories)))
        columns["path"].append(item.path)
        columns["size"].append(item.size)
        columns["identity"].append(item.identity)
        went = item.went
        if went.endswith(own) and _HERE not in went:
            went = went[: len(went) - len(own)] + _HERE
        columns["went"].append(went)
    body = json.dumps({"dirs": list(directories), **columns}, separators=(",", ":")).encode("utf-8")
    return base64.b64encode(zlib.compress(body, 9)).decode("ascii")


def decode_files(data: str, storage_path: str) -> list[RemovedFile]:
    body = json.loads(zlib.decompress(base64.b64decode(data)))
    root = storage_path.rstrip("/")
    files = []
    for index, path, size, identity, went in zip(
        body["dir"], body["path"], body["size"], body["identity"], body["went"], strict=True
    ):
        directory = body["dirs"][index]
        own = f"{root}/{directory}/{path}".lstrip("/")
        files.append(RemovedFile(directory, path, size, identity, went.replace(_HERE, own)))
    return files


class IncompleteLedgerError(ValueError):
    """Some chunks of a ledger are missing from the log (expired, or never published)."""


def assemble(records: Iterable[CleanupLedger], storage_path: str) -> Ledger:
    """The ledger of one cleanup from its chunks (any order, repeats allowed). Raises
    :class:`IncompleteLedgerError` when a chunk is missing."""
    by_chunk = {record.chunk: record for record in records}
    if not by_chunk:
        raise IncompleteLedgerError("no ledger records")
    first = next(iter(by_chunk.values()))
    missing = [index for index in range(first.chunks) if index not in by_chunk]
    if missing:
        raise IncompleteLedgerError(
            f"ledger chunks {missing} of {first.chunks} of cleanup {first.cleanup_id} are not on the ledger topic"
        )
    files = [item for index in range(first.chunks) for item in decode_files(by_chunk[index].data, storage_path)]
    return Ledger(
        str(first.cleanup_id),
        first.table,
        first.partition,
        str(first.correlation_id),
        first.location,
        TableIdentity(first.table_id, first.create_time, first.location, first.partition_create_time),
        tuple(files),
        first.occurred_at,
    )
