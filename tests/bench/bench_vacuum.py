"""Benchmark of the vacuum job against a single-process pyarrow read-and-write of the same files.

A table with 100 deltas and 2,000,000 rows in 4 buckets (columns id bigint, v string, amount double,
ZLIB) is written by the ingest writer. Then, alternating so that load from other processes weighs on
both alike:

* reference: one Python process reads every input file with pyarrow and writes each bucket's rows
  as one ORC file with pyarrow (same codec): the least any compaction must do;
* measured: the whole vacuum job (``run_vacuum``, MAJOR: metastore look-ups, listing, planning,
  one Spark task per bucket reading with pyarrow, writing ACID files with Hive's metadata, commit,
  lock snapshot, publish), on ``local[1]`` and on ``local[2]``.

Throughput is input MB per second. The new base is removed after each run, which returns the table
to its state before the vacuum (a vacuum only adds a directory), so every run does the same work.
Reported: MB/s of each, the ratio vacuum/reference (target at least 0.7) and local[2]/local[1]. Only
generous floors are asserted, never absolute times. Select with ``-m bench``; needs the stack.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.orc as pa_orc
import pytest
from producers_support import make_settings

from acidclean.producers.ingest import IngestRequest, create_table, ingest
from acidclean.producers.plan import CompactionType
from acidclean.producers.publish import Publisher
from acidclean.producers.vacuum import VacuumRequest, outbox_for, run_vacuum
from acidclean.shared.acid.names import parse_bucket_file
from acidclean.shared.arrow_filesystem import open_location
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.settings import Settings

pytestmark = pytest.mark.bench

DELTAS = 100
ROWS = 2_000_000
BUCKETS = 4
RUNS = 3
MB = 1024 * 1024


def _session(master: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master(master)
        .appName(f"acidclean-bench-{master}")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


@pytest.fixture(scope="module")
def table(
    metastore_uri: str, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[HiveMetastore, Settings, str, Path]]:
    name = f"bench_{os.getpid()}_{int(time.time())}"
    state = tmp_path_factory.mktemp("bench-vacuum")
    settings = make_settings(metastore_uri, kafka_bootstrap, name, state)
    with HiveMetastore(metastore_uri) as metastore:
        columns = [("id", "bigint"), ("v", "string"), ("amount", "double")]
        create_table(metastore, "bench", name, columns, buckets=BUCKETS)
        ingest(metastore, IngestRequest("bench", name, ROWS // DELTAS, DELTAS))
        location = Path(open_location(metastore.get_table("bench", name).location).path)
        yield metastore, settings, name, location


def _input_files(location: Path) -> dict[int, list[Path]]:
    by_bucket: dict[int, list[Path]] = {}
    for path in sorted(location.glob("delta_*/bucket_*")):
        bucket = parse_bucket_file(path.name)
        assert bucket is not None
        by_bucket.setdefault(bucket, []).append(path)
    return by_bucket


def _reference(location: Path, out: Path) -> Callable[[], None]:
    """Single process: read every file of a bucket with pyarrow, write the bucket as one ORC file."""
    by_bucket = _input_files(location)

    def run() -> None:
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        for bucket, paths in by_bucket.items():
            rows = pa.concat_tables([pa_orc.ORCFile(str(path)).read() for path in paths])
            pa_orc.write_table(rows, str(out / f"bucket_{bucket:05d}"), compression="zlib")

    return run


def _vacuum(metastore: HiveMetastore, settings: Settings, name: str, location: Path, spark: Any) -> Callable[[], None]:
    publisher = Publisher(settings)

    def run() -> None:
        result = run_vacuum(
            VacuumRequest(f"bench.{name}", None, CompactionType.MAJOR),
            settings=settings,
            metastore=metastore,
            spark=lambda: spark,
            publisher=publisher,
            outbox=outbox_for(settings),
        )
        assert result.status == "committed" and result.rows_written == ROWS
        assert result.publish is not None and result.publish.published
        for directory in result.new_directories:  # back to the state before the vacuum
            shutil.rmtree(location / directory)

    return run


def _best_alternating(runs: int, first: Callable[[], None], second: Callable[[], None]) -> tuple[float, float]:
    first()
    second()  # warm-up: imports, Python workers, page cache
    best = [float("inf"), float("inf")]
    for _ in range(runs):
        for index, work in enumerate((first, second)):
            start = time.perf_counter()
            work()
            best[index] = min(best[index], time.perf_counter() - start)
    return best[0], best[1]


def test_vacuum_throughput_against_single_process_pyarrow_and_local1_against_local2(
    table: tuple[HiveMetastore, Settings, str, Path],
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    metastore, settings, name, location = table
    input_bytes = sum(path.stat().st_size for paths in _input_files(location).values() for path in paths)
    assert len(list(location.glob("delta_*"))) == DELTAS
    reference = _reference(location, tmp_path / "reference")
    results: dict[str, tuple[float, float]] = {}
    for master in ("local[1]", "local[2]"):
        spark = _session(master)
        try:
            results[master] = _best_alternating(RUNS, reference, _vacuum(metastore, settings, name, location, spark))
        finally:
            spark.stop()

    reference_s = min(r for r, _ in results.values())
    lines = [f"input: {DELTAS} deltas, {ROWS} rows, {input_bytes / MB:.1f} MB"]
    lines.append(f"single-process pyarrow read+write: {reference_s:.2f} s, {input_bytes / MB / reference_s:.1f} MB/s")
    for master, (reference_run, vacuum_s) in results.items():
        ratio = reference_run / vacuum_s  # against the reference measured alongside it
        lines.append(
            f"vacuum {master}: {vacuum_s:.2f} s, {input_bytes / MB / vacuum_s:.1f} MB/s, "
            f"{ratio:.2f} of the reference's throughput (reference in that round: {reference_run:.2f} s)"
        )
        record_property(f"vacuum_{master}_seconds", round(vacuum_s, 3))
        record_property(f"vacuum_{master}_ratio", round(ratio, 3))
    scaling = results["local[1]"][1] / results["local[2]"][1]
    lines.append(f"local[2] vs local[1]: {scaling:.2f}x faster")
    record_property("local2_over_local1", round(scaling, 3))
    print("\n" + "\n".join(lines))

    assert results["local[2]"][0] / results["local[2]"][1] >= 0.3  # generous floors; targets are reported
    assert scaling >= 0.8
