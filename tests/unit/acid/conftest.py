"""Helpers for the ACID reader tests: write small Hive-like tables with the project's own writer."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from acidclean.shared.acid.events import encode_bucket_property
from acidclean.shared.orc.writer import delete_events, insert_events, write_bucket_file

ROW_SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def rows(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in ids]}, schema=ROW_SCHEMA)


class TableWriter:
    """Writes base, delta and delete-delta bucket files under one table directory."""

    def __init__(self, root: Path) -> None:
        self.fs = pafs.LocalFileSystem()
        self.path = str(root)

    def insert(
        self,
        directory: str,
        write_id: int,
        ids: Sequence[int],
        *,
        bucket: int = 0,
        statement: int = 0,
        first_row_id: int = 0,
        **options: object,
    ) -> str:
        events = insert_events(
            rows(*ids), write_id, bucket_id=bucket, statement_id=statement, first_row_id=first_row_id
        )
        return write_bucket_file(self.fs, f"{self.path}/{directory}", bucket, events, **options)  # type: ignore[arg-type]

    def delete(
        self,
        directory: str,
        write_id: int,
        identities: Sequence[tuple[int, int, int]],
        *,
        bucket: int = 0,
        **options: object,
    ) -> str:
        """``identities`` are (original write id, bucket id, row id); the bucket is V1-encoded here."""
        keys = pa.table(
            {
                "originalTransaction": pa.array([i[0] for i in identities], pa.int64()),
                "bucket": pa.array([encode_bucket_property(i[1]) for i in identities], pa.int32()),
                "rowId": pa.array([i[2] for i in identities], pa.int64()),
            }
        )
        events = delete_events(keys, write_id, ROW_SCHEMA)
        return write_bucket_file(self.fs, f"{self.path}/{directory}", bucket, events, **options)  # type: ignore[arg-type]


@pytest.fixture
def table(tmp_path: Path) -> TableWriter:
    return TableWriter(tmp_path / "t")
