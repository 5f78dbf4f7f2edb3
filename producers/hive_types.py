"""Hive column types as arrow types, Hive's bucket hash, and generated rows for the ingest writer.

``--columns "id int, v string"`` is parsed into (name, Hive type) pairs; :func:`arrow_type` maps
each Hive type to the arrow type the ACID files store. :func:`bucket_ids` is Hive's bucketing
(version 1, ``ObjectInspectorUtils.getBucketNumber``) for integer and string bucket columns, so
rows land in the bucket Hive itself would choose. Pure functions.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from acidclean.shared.errors import ConfigurationError

_SIMPLE = {
    "tinyint": pa.int8(),
    "smallint": pa.int16(),
    "int": pa.int32(),
    "integer": pa.int32(),
    "bigint": pa.int64(),
    "boolean": pa.bool_(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("ns"),
    "binary": pa.binary(),
}
_DECIMAL = re.compile(r"decimal\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)")
_CHARS = re.compile(r"(?:var)?char\s*\(\s*\d+\s*\)")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def arrow_type(hive_type: str) -> pa.DataType:
    """The arrow type of a Hive primitive type (``int``, ``varchar(10)``, ``decimal(10,2)``...)."""
    text = hive_type.strip().lower()
    if text in _SIMPLE:
        return _SIMPLE[text]
    if _CHARS.fullmatch(text):
        return pa.string()
    match = _DECIMAL.fullmatch(text)
    if match:
        return pa.decimal128(int(match.group(1)), int(match.group(2)))
    raise ConfigurationError(
        f"unsupported column type {hive_type!r}: use one of {', '.join(sorted(_SIMPLE))}, char(n), varchar(n), "
        "decimal(p,s)"
    )


def _top_level_parts(text: str) -> list[str]:
    """Split on commas outside brackets: ``decimal(10,2)`` and ``map<int,int>`` hold commas."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        depth += (char in "(<") - (char in ")>")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    return [*parts, "".join(current)]


def parse_columns(text: str) -> list[tuple[str, str]]:
    """``"id int, v string"`` as ``[("id", "int"), ("v", "string")]``; types are checked."""
    columns: list[tuple[str, str]] = []
    for part in _top_level_parts(text):
        part = part.strip()
        if not part:
            continue
        name, _, hive_type = part.partition(" ")
        if not _NAME.fullmatch(name) or not hive_type.strip():
            raise ConfigurationError(f"column {part!r} must be written as 'name type', e.g. 'id int'")
        arrow_type(hive_type)
        columns.append((name.lower(), hive_type.strip().lower()))
    if not columns:
        raise ConfigurationError("no columns given: write them as 'id int, v string'")
    if len({name for name, _ in columns}) != len(columns):
        raise ConfigurationError(f"column names repeat in {text!r}")
    return columns


def _java_string_hash(value: str) -> int:
    # Hive hashes a string column as Hadoop's Text: 31 * h + byte over the UTF-8 bytes, signed.
    hashed = 1
    for byte in value.encode("utf-8"):
        hashed = (31 * hashed + (byte - 256 if byte > 127 else byte)) & 0xFFFFFFFF
    return hashed


def bucket_ids(values: pa.Array, buckets: int) -> np.ndarray:
    """Hive's bucket (version 1) of each value: ``(hash & Integer.MAX_VALUE) % buckets``."""
    if buckets <= 1:
        return np.zeros(len(values), dtype=np.int64)
    if pa.types.is_integer(values.type):
        numbers = values.fill_null(0).to_numpy().astype(np.int64)
        if values.type.bit_width == 64:
            numbers = numbers ^ (numbers.view(np.uint64) >> np.uint64(32)).astype(np.int64)
        hashes = numbers & 0xFFFFFFFF
    elif pa.types.is_string(values.type):
        hashes = np.array([_java_string_hash(v or "") for v in values.to_pylist()], dtype=np.int64)
    else:
        hashes = np.array([hash(v) & 0xFFFFFFFF for v in values.to_pylist()], dtype=np.int64)
    result: np.ndarray = (hashes & 0x7FFFFFFF) % buckets
    return result


def generate_rows(columns: list[tuple[str, str]], count: int, *, first_id: int, seed: int) -> pa.Table:
    """``count`` rows: the first integer column counts up from ``first_id``, the others hold
    seeded random values (strings look like ``v<number>``)."""
    random = np.random.default_rng(seed)
    arrays = []
    for index, (_, hive_type) in enumerate(columns):
        target = arrow_type(hive_type)
        if pa.types.is_integer(target):
            if index == 0:
                limit = np.iinfo(target.to_pandas_dtype()).max
                numbers = (np.arange(first_id, first_id + count, dtype=np.int64)) % limit
            else:
                numbers = random.integers(0, 1_000_000, count)
            arrays.append(pa.array(numbers).cast(target, safe=False))
        elif pa.types.is_string(target):
            numbers = pa.array(random.integers(0, 1_000_000_000, count))
            arrays.append(pc.binary_join_element_wise("v", pc.cast(numbers, pa.string()), ""))
        elif pa.types.is_floating(target):
            arrays.append(pa.array(random.random(count)).cast(target))
        elif pa.types.is_boolean(target):
            arrays.append(pa.array(random.random(count) < 0.5))
        elif pa.types.is_date(target):
            arrays.append(pa.array(random.integers(0, 20000, count).astype(np.int32)).cast(target))
        elif pa.types.is_timestamp(target):
            arrays.append(pa.array(random.integers(0, 1_700_000_000, count) * 1_000_000_000).cast(target))
        elif pa.types.is_decimal(target):
            arrays.append(pa.array(random.integers(0, 100_000, count)).cast(pa.decimal128(38, 0)).cast(target))
        else:
            arrays.append(pa.array(random.bytes(8 * count)[i * 8 : i * 8 + 8] for i in range(count)))
    return pa.Table.from_arrays(arrays, names=[name for name, _ in columns])
