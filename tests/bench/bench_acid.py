"""Benchmarks of the ACID rules and reader, each against a reference measured in the same run.

* ``acid_state`` over a listing of 100,000 directories, against only parsing and sorting the names
  (the least any implementation must do). Ratio = reference time / acid_state time.
* A snapshot scan of 1,000,000 rows with 10% deleted, against pyarrow reading the same ORC files
  raw. Ratio = raw time / scan time; the target is at least 0.5.

Times are the best of several runs after a warm-up. Only generous floors are asserted, never
absolute times; the ratios are printed and recorded as test properties. Not part of the default
test run: select with ``-m bench``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.orc as pa_orc
import pytest

from acidclean.shared.acid import (
    Listing,
    ParsedDirectory,
    ValidWriteIdList,
    acid_state,
    base_name,
    delta_name,
    encode_bucket_property,
    parse_directory_name,
)
from acidclean.shared.orc.reader import read_snapshot
from acidclean.shared.orc.writer import delete_events, insert_events, write_bucket_file

pytestmark = pytest.mark.bench

DIRECTORIES = 100_000
ROWS = 1_000_000
DELETED_EVERY = 10  # 10% of the rows


def best_of(runs: int, reference: Callable[[], object], measured: Callable[[], object]) -> tuple[float, float]:
    """The best time of each, over runs that alternate between the two, so that load from other
    processes weighs on both alike; one warm-up run each first (imports, page cache, allocator)."""
    reference()
    measured()
    best = [float("inf"), float("inf")]
    for _ in range(runs):
        for index, work in enumerate((reference, measured)):
            start = time.perf_counter()
            work()
            best[index] = min(best[index], time.perf_counter() - start)
    return best[0], best[1]


def report(record_property: Callable[[str, object], None], name: str, ratio: float, **seconds: float) -> None:
    details = ", ".join(f"{key} {value * 1000:.1f} ms" for key, value in seconds.items())
    print(f"\n{name}: ratio {ratio:.2f} ({details})")
    record_property(f"{name}_ratio", round(ratio, 3))
    for key, value in seconds.items():
        record_property(f"{name}_{key}_seconds", round(value, 4))


def large_listing() -> tuple[Listing, ValidWriteIdList]:
    """A partition after a long streaming history: a base, 100,000 single-transaction deltas (some
    with delete deltas and several statements), minor-compacted ranges over the first part, and
    open and aborted write ids."""
    names = [base_name(1_000), base_name(500)]
    write_id = 1_000
    while len(names) < DIRECTORIES:
        write_id += 1
        names.append(delta_name(write_id, write_id, 0))
        if write_id % 7 == 0:
            names.append(delta_name(write_id, write_id, 0, delete=True))
        if write_id % 11 == 0:
            names.append(delta_name(write_id, write_id, 1))
        if write_id % 1_000 == 0:
            names.append(delta_name(write_id - 999, write_id))
    names = names[:DIRECTORIES]
    open_ids = list(range(write_id - 50, write_id, 5))
    aborted = list(range(2_000, write_id, 997))
    return Listing(directories=tuple(names)), ValidWriteIdList.from_ids(write_id, open_ids, aborted)


def test_acid_state_over_100000_directories_against_parse_and_sort(
    record_property: Callable[[str, object], None],
) -> None:
    listing, valid_ids = large_listing()

    def parse_and_sort() -> list[ParsedDirectory]:
        parsed = [parse_directory_name(name) for name in listing.directories]
        return sorted((p for p in parsed if p is not None and not p.is_base), key=ParsedDirectory.sort_key)

    reference, measured = best_of(3, parse_and_sort, lambda: acid_state(listing, valid_ids))
    state = acid_state(listing, valid_ids)
    assert state.base is not None and state.base.write_id == 1_000
    assert len(state.obsolete) > 1_000  # the minor-compacted ranges cover their single deltas
    ratio = reference / measured
    report(record_property, "acid_state_100k_dirs", ratio, parse_and_sort=reference, acid_state=measured)
    assert ratio >= 0.15


@pytest.fixture(scope="module")
def deleted_table(tmp_path_factory: pytest.TempPathFactory) -> tuple[pafs.FileSystem, str, list[str]]:
    """One delta of 1,000,000 rows in one bucket and a delete delta removing every tenth row."""
    fs = pafs.LocalFileSystem()
    root = str(tmp_path_factory.mktemp("bench") / "t")
    ids = np.arange(ROWS, dtype=np.int64)
    rows = pa.table({"id": ids, "name": pa.array(np.char.add("n", (ids % 1000).astype(str))), "amount": ids * 0.5})
    data = write_bucket_file(fs, f"{root}/{delta_name(1, 1, 0)}", 0, insert_events(rows, 1))
    deleted = pa.table(
        {
            "originalTransaction": pa.array(np.ones(ROWS // DELETED_EVERY, dtype=np.int64)),
            "bucket": pa.array(np.full(ROWS // DELETED_EVERY, encode_bucket_property(0), dtype=np.int32)),
            "rowId": pa.array(np.arange(0, ROWS, DELETED_EVERY, dtype=np.int64)),
        }
    )
    deletes = write_bucket_file(
        fs, f"{root}/{delta_name(2, 2, 0, delete=True)}", 0, delete_events(deleted, 2, rows.schema)
    )
    return fs, root, [data, deletes]


def test_scan_of_1m_rows_with_10_percent_deleted_against_raw_pyarrow_read(
    deleted_table: tuple[pafs.FileSystem, str, list[str]],
    record_property: Callable[[str, object], None],
) -> None:
    fs, root, files = deleted_table
    valid_ids = ValidWriteIdList.from_ids(2)

    def raw_read() -> list[pa.Table]:
        return [pa_orc.ORCFile(fs.open_input_file(path)).read() for path in files]

    def scan() -> pa.Table:
        return read_snapshot(fs, root, valid_ids)

    reference, measured = best_of(7, raw_read, scan)
    result = scan()
    assert result.num_rows == ROWS - ROWS // DELETED_EVERY
    assert result.column_names == ["id", "name", "amount"]
    ratio = reference / measured
    report(record_property, "scan_1m_rows_10pct_deleted", ratio, raw_read=reference, scan=measured)
    assert ratio >= 0.25
