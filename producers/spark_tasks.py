"""Running a vacuum's bucket tasks on Spark.

One Spark task per bucket (:func:`acidclean.producers.compact.compact_bucket`), all in one job, so
the compaction spreads over the executors. While the job runs, the driver reports every second how
many buckets are done and how many events and bytes the finished ones wrote (Spark accumulators).
"""

from __future__ import annotations

import os
import re
import sys
import threading
import uuid
import zipimport
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from acidclean.producers.compact import BucketResult, BucketTask, compact_bucket
from acidclean.producers.plan import format_bytes

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Progress = Callable[[str], None]


def quiet(_: str) -> None:
    """A progress callback that reports nothing."""


_PYTHON_ERROR = re.compile(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception)): (.+)$", re.MULTILINE)


def task_error_message(error: BaseException, limit: int = 1000) -> str:
    """The Python error a failed task raised, without the JVM stack traces Spark wraps it in."""
    text = str(error)
    if "Traceback (most recent call last)" in text:
        # The first Python traceback, up to the JVM frames that follow it; its last error line is
        # the exception the task raised (causes of a chained exception are printed before it).
        traceback = text.split("Traceback (most recent call last)", 1)[1].split("\n\tat ", 1)[0]
        found = list(_PYTHON_ERROR.finditer(traceback))
        if found:
            return f"{found[-1].group(1)}: {found[-1].group(2)}"[:limit]
    return text.strip().splitlines()[0][:limit] if text.strip() else type(error).__name__


def refresh_zip_importers_only_when_changed() -> None:
    """Make ``importlib.invalidate_caches()`` cheap in this (worker) process.

    PySpark's worker calls it before every task, to see files added with ``addPyFile``. Before
    Python 3.13 every zip importer on ``sys.path_importer_cache`` then re-reads its archive's whole
    directory: the worker imports pyspark and py4j from zip archives, one importer per package
    imported from them (16 here, 25,000 entries each), about 0.1 s of CPU per task measured, which
    on one core is time every task waits. An archive that has not changed needs no re-read, so the
    importer re-reads only when the archive's size or modification time differs from when it last
    read it. Idempotent; does nothing on Python 3.13 and later, where the re-read is lazy."""
    if sys.version_info >= (3, 13) or getattr(zipimport.zipimporter.invalidate_caches, "_acidclean", False):
        return
    reread = zipimport.zipimporter.invalidate_caches

    def stamp(importer: zipimport.zipimporter) -> tuple[int, int] | None:
        try:
            status = os.stat(importer.archive)
        except OSError:
            return None
        return status.st_size, status.st_mtime_ns

    def invalidate_caches(importer: zipimport.zipimporter) -> None:
        current = stamp(importer)
        if current is None or importer.__dict__.get("_acidclean_stamp") != current:
            reread(importer)
            importer.__dict__["_acidclean_stamp"] = current

    for importer in list(sys.path_importer_cache.values()):
        if isinstance(importer, zipimport.zipimporter):
            importer.__dict__["_acidclean_stamp"] = stamp(importer)  # read just before this task
    invalidate_caches._acidclean = True  # type: ignore[attr-defined]
    zipimport.zipimporter.invalidate_caches = invalidate_caches  # type: ignore[method-assign,assignment]


@dataclass
class _Counters:
    """Spark accumulators the tasks add to as they finish; the driver reads them while the job runs."""

    events: Any
    bytes: Any

    def line(self, completed: int, total: int) -> str:
        return (
            f"  buckets compacted: {completed}/{total}, {self.events.value} events, "
            f"{format_bytes(self.bytes.value)} written"
        )


def _spark_progress(
    spark: SparkSession,
    group: str,
    total: int,
    counters: _Counters,
    progress: Progress,
    done: threading.Event,
    succeeded: threading.Event,
) -> None:
    """Report every second while the job runs; once it is done, a line that was reported is brought
    up to date (a job finishing between two samples would otherwise end on "0/2")."""
    tracker = spark.sparkContext.statusTracker()
    reported = -1
    while not done.wait(1.0):
        completed = 0
        for job_id in tracker.getJobIdsForGroup(group):
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job else []:
                stage = tracker.getStageInfo(stage_id)
                completed += stage.numCompletedTasks if stage else 0
        if completed != reported:
            progress(counters.line(completed, total))
            reported = completed
    if succeeded.is_set() and reported not in (-1, total):
        progress(counters.line(total, total))


def run_bucket_tasks(spark: SparkSession, tasks: list[BucketTask], progress: Progress = quiet) -> list[BucketResult]:
    """One Spark task per bucket, run in parallel on the executors; reports progress (buckets done,
    events and bytes written) every second while it runs."""
    context = spark.sparkContext
    group = f"acidclean-vacuum-{uuid.uuid4().hex[:8]}"
    counters = _Counters(context.accumulator(0), context.accumulator(0))
    events, written = counters.events, counters.bytes
    results: list[BucketResult] = []
    failure: list[BaseException] = []

    def counted(task: BucketTask) -> BucketResult:
        refresh_zip_importers_only_when_changed()  # for the worker's next tasks
        result = compact_bucket(task)
        events.add(result.rows_written + result.deletes_written)
        written.add(sum(f.bytes for f in result.files))
        return result

    def job() -> None:
        try:
            context.setJobGroup(group, f"acidclean vacuum: {len(tasks)} buckets")
            results.extend(context.parallelize(tasks, len(tasks)).map(counted).collect())
        except BaseException as error:  # handed to the calling thread
            failure.append(error)

    done, succeeded = threading.Event(), threading.Event()
    worker = threading.Thread(target=job, name="acidclean-vacuum-job")
    watcher = threading.Thread(
        target=_spark_progress,
        args=(spark, group, len(tasks), counters, progress, done, succeeded),
        daemon=True,
    )
    worker.start()
    watcher.start()
    worker.join()
    if not failure:
        succeeded.set()
    done.set()
    watcher.join(timeout=5.0)  # its last line; never held up by a status call to a failing JVM
    if failure:
        raise failure[0]
    return sorted(results, key=lambda r: r.bucket)
