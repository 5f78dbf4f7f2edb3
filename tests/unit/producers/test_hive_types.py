"""Column definitions, Hive's bucket hash and generated rows of the ingest writer."""

from __future__ import annotations

import pyarrow as pa
import pytest

from acidclean.producers.hive_types import arrow_type, bucket_ids, generate_rows, parse_columns
from acidclean.shared.errors import ConfigurationError


def test_columns_parse_with_types_checked_and_decimals_kept_whole() -> None:
    assert parse_columns("id int, v string") == [("id", "int"), ("v", "string")]
    assert parse_columns("Amount decimal(10,2), c varchar(5)") == [("amount", "decimal(10,2)"), ("c", "varchar(5)")]
    assert arrow_type("decimal(10,2)") == pa.decimal128(10, 2)
    assert arrow_type("bigint") == pa.int64()
    with pytest.raises(ConfigurationError, match="unsupported column type 'map<int,int>'"):
        parse_columns("m map<int,int>")
    with pytest.raises(ConfigurationError, match="'name type'"):
        parse_columns("id")
    with pytest.raises(ConfigurationError, match="repeat"):
        parse_columns("id int, id string")


def test_bucket_of_a_value_is_the_one_hive_picks() -> None:
    assert bucket_ids(pa.array([0, 5, -1, 7], pa.int32()), 4).tolist() == [0, 1, 3, 3]
    assert bucket_ids(pa.array([2**32 + 1], pa.int64()), 4).tolist() == [0]  # (int)(v ^ v >>> 32)
    assert bucket_ids(pa.array(["a", "ab"]), 4).tolist() == [0, 2]  # Text hash 128 and 4066
    assert bucket_ids(pa.array([5, 6], pa.int32()), 1).tolist() == [0, 0]


def test_generated_rows_count_up_in_the_first_column_and_fill_every_type() -> None:
    columns = parse_columns("id int, v string, d double, b boolean, day date, t timestamp, m decimal(8,2)")
    rows = generate_rows(columns, 5, first_id=100, seed=1)
    assert rows.column("id").to_pylist() == [100, 101, 102, 103, 104]
    assert rows.schema.field("m").type == pa.decimal128(8, 2)
    assert all(value.startswith("v") for value in rows.column("v").to_pylist())
    assert generate_rows(columns, 5, first_id=100, seed=1).equals(rows)
