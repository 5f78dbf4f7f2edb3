"""The events of the cleanup ledger (issue 54): what each cleanup removed, file by file, and its undo.

A cleanup that removed files publishes, on the ledger topic and before its ``CleanupDone``, one or
more ``CleanupLedger`` records: the files (path, size, storage identity, and where each went: a trash
path, an S3 version, or gone), compressed and cut in chunks that each fit one Kafka message. Each
names the ``CleanupDone`` it belongs to (``cleanup_id``), and the table's identity as the cleaner
confirmed it before deleting (rule 9), which ``acidclean undo`` compares before it puts anything back.
``CleanupUndone`` reports an undo. ``CleanupDone`` itself is unchanged, so every reader of the done
topic reads it as before; the ledger is on a topic of its own.
"""

from __future__ import annotations

import uuid
from typing import Literal

from pydantic import Field

from acidclean.schemas.common import EventBase, NonEmpty, TableName

LEDGER_ENCODING: Literal["zlib-json-columns/1"] = "zlib-json-columns/1"
MAX_LEDGER_DATA = 700_000  # base64 characters: with the envelope, well inside Kafka's default 1 MB message


class CleanupLedger(EventBase):
    """One chunk of the exact record of the files a cleanup removed, and where each went."""

    event_type = "acidclean.cleanup.ledger"

    table: TableName = Field(description="The table, as db.table.")
    correlation_id: uuid.UUID = Field(description="The vacuum's event_id.")
    cleanup_id: uuid.UUID = Field(description="The event_id of the CleanupDone this ledger belongs to.")
    location: NonEmpty = Field(description="The table or partition location the files were removed from.")
    table_id: int | None = Field(default=None, description="Hive 4's table id, as confirmed before the deletes.")
    create_time: int | None = Field(default=None, description="The table's create time (s), as confirmed.")
    partition_create_time: int | None = Field(default=None, description="The partition's create time (s).")
    chunk: int = Field(ge=0, description="This chunk's index (0-based).")
    chunks: int = Field(ge=1, description="How many chunks the cleanup's ledger has.")
    files: int = Field(ge=0, description="Files recorded in this chunk.")
    bytes: int = Field(ge=0, description="Their bytes.")
    encoding: Literal["zlib-json-columns/1"] = Field(
        default=LEDGER_ENCODING, description="How data is encoded (acidclean.consumers.ledger)."
    )
    data: str = Field(min_length=1, max_length=MAX_LEDGER_DATA, description="The files, compressed, base64.")


class CleanupUndone(EventBase):
    """``acidclean undo`` put the files of a cleanup back (all of them, or those it could)."""

    event_type = "acidclean.cleanup.undone"

    table: TableName = Field(description="The table, as db.table.")
    correlation_id: uuid.UUID = Field(description="The vacuum's event_id.")
    cleanup_id: uuid.UUID = Field(description="The event_id of the CleanupDone undone.")
    restored_files: int = Field(ge=0, description="Files put back.")
    restored_bytes: int = Field(ge=0)
    refused_files: int = Field(ge=0, description="Files not put back (in the way, expired, changed).")
    undone_by: NonEmpty = Field(description="Who ran the undo (user@host).")
    note: str | None = Field(default=None, max_length=4096, description="What was refused, for an operator.")
