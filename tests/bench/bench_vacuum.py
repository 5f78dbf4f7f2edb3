"""Benchmark of the vacuum job: its scaling from ``local[1]`` to ``local[2]``, and its throughput
against a plain pyarrow read-and-write of the same files.

A table with 100 deltas and 2,000,000 rows in 4 buckets (columns id bigint, v string, amount double,
ZLIB) is written by the ingest writer. Then three rounds, each measuring, one right after the other
(so that load from other processes weighs on all of them alike; the order flips every round):

* the whole vacuum job (``run_vacuum``, MAJOR: metastore look-ups, listing, planning, one Spark task
  per bucket reading with pyarrow and writing the bucket's ACID file with Hive's metadata, commit,
  lock snapshot, publish) on ``local[1]`` and on ``local[2]``, each on a fresh SparkSession after two
  untimed warm-up vacuums (imports, Python workers, page cache, the JVM's JIT: :data:`WARM_UPS`);
* the reference: every input file read with pyarrow and each bucket's rows written as one ORC file
  (same codec), the least any compaction must do, by one worker process (all 4 buckets) right after
  the ``local[1]`` vacuum and by two worker processes at once (2 buckets each) right after the
  ``local[2]`` one. Its two-process speed-up is what this machine's two cores gave a perfectly
  parallel job at those moments: the ceiling for ``local[2]`` over ``local[1]``.

Throughput is input MB per second. The new base is removed after each vacuum, which returns the
table to its state before it (a vacuum only adds a directory), so every run does the same work.
Reported: per round and as the median of the rounds, local[1]/local[2] time (target at least 1.6),
the reference's ceiling and the vacuum's scaling over it, the part of local[1]'s time spent outside
the bucket tasks (driver, Spark scheduling, the gaps between tasks) with the speed-up two cores allow
while that part stays serial (Amdahl), the vacuum's throughput against the one-process reference
(target at least 0.7), and the load average of the machine around each round (other processes on the
same cores make every ratio smaller). Only generous floors are asserted, never absolute times; the
scaling floor only when the ceiling shows that the machine had a second core to give. Select with
``-m bench``; needs the stack.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from producers_support import make_settings

from acidclean.producers.ingest import IngestRequest, create_table, ingest
from acidclean.producers.plan import CompactionType
from acidclean.producers.publish import Publisher
from acidclean.producers.vacuum import VacuumRequest, outbox_for, run_vacuum
from acidclean.shared.acid.names import parse_bucket_file
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.settings import Settings
from acidclean.shared.storage import open_location

pytestmark = pytest.mark.bench

DELTAS = 100
ROWS = 2_000_000
BUCKETS = 4
ROUNDS = 3
MASTERS = ("local[1]", "local[2]")
MB = 1024 * 1024
SECOND_CORE = 1.3  # a two-process ceiling below this: the machine had no second core to give
# Untimed vacuums on each new session. The first brings up the Python workers, imports and page cache;
# the second lets the Spark JVM's JIT settle: during the vacuum after just one, its C2 compiler took
# 0.28 s of CPU (0.05 s from the next on), which local[1] hides on its idle second core and local[2]
# pays in its tasks. A vacuum service's long-lived session is past both.
WARM_UPS = 2

# A reference worker: reads one JSON line per job ([[output, [inputs...]], ...]), compacts each bucket
# with pyarrow alone, answers one line. It stays up between jobs, so no start-up cost is timed.
_REFERENCE_WORKER = """
import json, sys
import pyarrow as pa, pyarrow.orc as pa_orc
for line in sys.stdin:
    for out, paths in json.loads(line):
        rows = pa.concat_tables([pa_orc.ORCFile(p).read() for p in paths])
        pa_orc.write_table(rows, out, compression="zlib")
    sys.stdout.write("done\\n")
    sys.stdout.flush()
"""


def _session(master: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master(master)
        .appName(f"acidclean-bench-{master}")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
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


class _ReferenceWorkers:
    """Two long-lived worker processes running :data:`_REFERENCE_WORKER`; stopped by pid."""

    def __init__(self, location: Path, out: Path) -> None:
        self.out = out
        self.jobs = [
            [str(out / f"bucket_{bucket:05d}"), [str(p) for p in paths]]
            for bucket, paths in sorted(_input_files(location).items())
        ]
        self.processes = [
            subprocess.Popen(
                [sys.executable, "-c", _REFERENCE_WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
            for _ in range(2)
        ]

    def _run(self, shares: list[list[list[Any]]]) -> float:
        shutil.rmtree(self.out, ignore_errors=True)
        self.out.mkdir(parents=True)
        start = time.perf_counter()
        for process, share in zip(self.processes, shares, strict=False):
            stdin: IO[str] = process.stdin  # type: ignore[assignment]
            stdin.write(json.dumps(share) + "\n")
            stdin.flush()
        for process, _ in zip(self.processes, shares, strict=False):
            stdout: IO[str] = process.stdout  # type: ignore[assignment]
            assert stdout.readline().strip() == "done", "a reference worker died"
        return time.perf_counter() - start

    def one_process(self) -> float:
        return self._run([self.jobs])

    def two_processes(self) -> float:
        return self._run([self.jobs[0::2], self.jobs[1::2]])

    def stop(self) -> None:
        for process in self.processes:
            if process.stdin:
                process.stdin.close()
        for process in self.processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, 9)
                process.wait()


def _vacuum(metastore: HiveMetastore, settings: Settings, name: str, location: Path, spark: Any) -> tuple[float, float]:
    """One vacuum, timed: its wall time and its bucket tasks' own time (summed); the table is returned
    to its state before it."""
    start = time.perf_counter()
    result = run_vacuum(
        VacuumRequest(f"bench.{name}", None, CompactionType.MAJOR),
        settings=settings,
        metastore=metastore,
        spark=lambda: spark,
        publisher=Publisher(settings),
        outbox=outbox_for(settings),
    )
    seconds = time.perf_counter() - start
    assert result.status == "committed" and result.rows_written == ROWS
    assert result.publish is not None and result.publish.published
    for directory in result.new_directories:  # back to the state before the vacuum
        shutil.rmtree(location / directory)
    return seconds, result.task_seconds


def amdahl_bound(serial_fraction: float, cores: int = 2) -> float:
    """The most ``cores`` can speed up a job whose part ``serial_fraction`` runs on one core only."""
    return 1 / (serial_fraction + (1 - serial_fraction) / cores)


def test_vacuum_local2_against_local1_and_against_a_pyarrow_reference(
    table: tuple[HiveMetastore, Settings, str, Path],
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    metastore, settings, name, location = table
    input_bytes = sum(path.stat().st_size for paths in _input_files(location).values() for path in paths)
    assert len(list(location.glob("delta_*"))) == DELTAS
    reference = _ReferenceWorkers(location, tmp_path / "reference")
    rounds: list[dict[str, float]] = []
    lines = [f"input: {DELTAS} deltas, {ROWS} rows, {BUCKETS} buckets, {input_bytes / MB:.1f} MB"]
    try:
        reference.one_process()
        reference.two_processes()  # warm-up: imports, page cache
        for number in range(ROUNDS):
            load_before = os.getloadavg()[0]
            timings: dict[str, float] = {}
            order = MASTERS if number % 2 == 0 else tuple(reversed(MASTERS))
            for master in order:
                spark = _session(master)
                try:
                    for _ in range(WARM_UPS):
                        _vacuum(metastore, settings, name, location, spark)
                    timings[master], timings[f"{master} tasks"] = _vacuum(metastore, settings, name, location, spark)
                    # The reference with as many processes as the vacuum had cores, right after it: the
                    # ceiling then meets the load each vacuum met, which drifts within a round.
                    key = "reference x1" if master == "local[1]" else "reference x2"
                    timings[key] = reference.one_process() if master == "local[1]" else reference.two_processes()
                finally:
                    spark.stop()
            timings["load"] = max(load_before, os.getloadavg()[0])
            # Everything of local[1]'s time that is not a task's own (driver, Spark, gaps between tasks).
            timings["serial"] = 1 - timings["local[1] tasks"] / timings["local[1]"]
            rounds.append(timings)
            lines.append(
                f"round {number + 1} (load average {timings['load']:.1f}): "
                f"vacuum local[1] {timings['local[1]']:.2f} s, local[2] {timings['local[2]']:.2f} s "
                f"-> {timings['local[1]'] / timings['local[2]']:.2f}x; reference 1 process "
                f"{timings['reference x1']:.2f} s, 2 processes {timings['reference x2']:.2f} s "
                f"-> {timings['reference x1'] / timings['reference x2']:.2f}x; local[1] tasks "
                f"{timings['local[1] tasks']:.2f} s, the rest {timings['local[1]'] - timings['local[1] tasks']:.2f} s "
                f"(bound {amdahl_bound(timings['serial']):.2f}x); local[2] tasks {timings['local[2] tasks']:.2f} s"
            )
    finally:
        reference.stop()

    def median(key: str) -> float:
        return statistics.median(r[key] for r in rounds)

    scaling = statistics.median(r["local[1]"] / r["local[2]"] for r in rounds)
    ceiling = statistics.median(r["reference x1"] / r["reference x2"] for r in rounds)
    against_reference = statistics.median(r["reference x1"] / r["local[2]"] for r in rounds)
    of_ceiling = statistics.median(
        (r["local[1]"] / r["local[2]"]) / (r["reference x1"] / r["reference x2"]) for r in rounds
    )
    for master in MASTERS:
        lines.append(f"vacuum {master}: median {median(master):.2f} s, {input_bytes / MB / median(master):.1f} MB/s")
        record_property(f"vacuum_{master}_seconds", round(median(master), 3))
    lines.append(
        f"single-process pyarrow read+write: median {median('reference x1'):.2f} s, "
        f"{input_bytes / MB / median('reference x1'):.1f} MB/s"
    )
    lines.append(f"local[2] vs local[1]: {scaling:.2f}x faster (median of {ROUNDS} rounds; target 1.6)")
    lines.append(f"two-process ceiling of this machine now (reference x1 / x2): {ceiling:.2f}x")
    lines.append(
        f"local[2] vs local[1] over the ceiling beside it: {of_ceiling:.2f} (1.0: as parallel as pyarrow alone)"
    )
    serial = median("serial")
    lines.append(
        f"local[1] time outside the bucket tasks: {serial:.0%} (driver, Spark scheduling, gaps between tasks): "
        f"with it serial, two cores give at most {amdahl_bound(serial):.2f}x"
    )
    lines.append(f"vacuum local[2] throughput against the single-process reference: {against_reference:.2f}")
    if max(r["load"] for r in rounds) > 1.5:
        lines.append("the machine was loaded by other processes: every ratio above is lower than on an idle one")
    record_property("local2_over_local1", round(scaling, 3))
    record_property("two_process_ceiling", round(ceiling, 3))
    record_property("local1_outside_tasks", round(serial, 3))
    record_property("scaling_over_ceiling", round(of_ceiling, 3))
    record_property("vacuum_local2_over_reference", round(against_reference, 3))
    print("\n" + "\n".join(lines))

    assert against_reference >= 0.3  # generous floors; targets are reported
    if ceiling >= SECOND_CORE:
        assert scaling >= 0.8
    else:  # other processes held the second core: nothing can scale, so there is no floor to check
        print(f"scaling floor not checked: the two-process ceiling was {ceiling:.2f}x, below {SECOND_CORE}x")
