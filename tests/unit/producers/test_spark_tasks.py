"""What an operator sees when a Spark task fails: the Python error, not the JVM's stack traces."""

from __future__ import annotations

import importlib
import subprocess
import sys
import threading
import zipfile
import zipimport
from pathlib import Path

import pytest

from acidclean.producers.spark_tasks import (
    _Counters,
    _spark_progress,
    refresh_zip_importers_only_when_changed,
    task_error_message,
)

SPARK_FAILURE = """An error occurred while calling o12.collect.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 0.0 failed 1 times
org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/x/reader.py", line 1, in _open
    orc = pa_orc.ORCFile(source)
OSError: Not an ORC file

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/x/worker.py", line 1, in main
    raise UnreadableFileError(message)
acidclean.shared.errors.UnreadableFileError: cannot read ORC file /t/delta_1_1/bucket_00000: not ORC

\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:581)
"""


def test_a_failed_task_is_reported_by_its_python_error() -> None:
    assert task_error_message(Exception(SPARK_FAILURE)) == (
        "UnreadableFileError: cannot read ORC file /t/delta_1_1/bucket_00000: not ORC"
    )


def test_other_errors_are_reported_by_their_first_line() -> None:
    assert task_error_message(ValueError("bad value\nmore detail")) == "bad value"
    assert task_error_message(RuntimeError()) == "RuntimeError"


def _write_zip(path: Path, modules: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name, source in modules.items():
            archive.writestr(f"{name}.py", source)


@pytest.mark.skipif(sys.version_info >= (3, 13), reason="Python 3.13 re-reads zip archives lazily by itself")
def test_zip_importers_reread_their_archive_only_when_it_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worker-wide change is undone after the test.
    monkeypatch.setattr(zipimport.zipimporter, "invalidate_caches", zipimport.zipimporter.invalidate_caches)
    archive = tmp_path / "shipped.zip"
    _write_zip(archive, {"acidclean_zip_probe_a": "VALUE = 1\n"})
    monkeypatch.syspath_prepend(str(archive))
    importlib.invalidate_caches()
    assert importlib.import_module("acidclean_zip_probe_a").VALUE == 1
    importer = sys.path_importer_cache[str(archive)]
    assert isinstance(importer, zipimport.zipimporter)

    refresh_zip_importers_only_when_changed()
    refresh_zip_importers_only_when_changed()  # idempotent: not wrapped twice
    files = importer._files  # type: ignore[attr-defined]
    importlib.invalidate_caches()
    assert importer._files is files  # type: ignore[attr-defined]  # unchanged archive: not re-read

    _write_zip(archive, {"acidclean_zip_probe_a": "VALUE = 1\n", "acidclean_zip_probe_b": "VALUE = 2\n"})
    importlib.invalidate_caches()
    assert importer._files is not files  # type: ignore[attr-defined]
    assert importlib.import_module("acidclean_zip_probe_b").VALUE == 2
    for name in ("acidclean_zip_probe_a", "acidclean_zip_probe_b"):
        sys.modules.pop(name, None)


@pytest.mark.skipif(sys.version_info >= (3, 13), reason="Python 3.13 re-reads zip archives lazily by itself")
def test_the_daemon_makes_the_zip_reread_cheap_before_it_forks_any_worker() -> None:
    # The daemon's manager is replaced by a probe of what a forked worker would inherit.
    probe = (
        "import runpy, zipimport, pyspark.daemon\n"
        "cheap = lambda: getattr(zipimport.zipimporter.invalidate_caches, '_acidclean', False)\n"
        "pyspark.daemon.manager = lambda: print(cheap())\n"
        "runpy.run_module('acidclean.producers.spark_daemon', run_name='__main__')\n"
    )
    answer = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert answer.stdout.strip() == "True"


class _Accumulator:
    def __init__(self, value: int) -> None:
        self.value = value


class _StageInfo:
    def __init__(self, completed: int) -> None:
        self.numCompletedTasks = completed


class _JobInfo:
    stageIds = (0,)


class _Tracker:
    """A status tracker whose job has completed ``completed`` of its tasks when sampled."""

    def __init__(self, completed: int) -> None:
        self.completed = completed

    def getJobIdsForGroup(self, group: str) -> list[int]:
        return [0]

    def getJobInfo(self, job_id: int) -> _JobInfo:
        return _JobInfo()

    def getStageInfo(self, stage_id: int) -> _StageInfo:
        return _StageInfo(self.completed)


class _Spark:
    def __init__(self, tracker: _Tracker) -> None:
        self.sparkContext = self
        self._tracker = tracker

    def statusTracker(self) -> _Tracker:
        return self._tracker


def _progress_lines(succeeded: bool) -> list[str]:
    """Sample once at 0 of 2 buckets, then the job ends before the next sample."""
    lines: list[str] = []
    done, success = threading.Event(), threading.Event()

    def progress(line: str) -> None:
        lines.append(line)
        if succeeded:
            success.set()
        done.set()

    counters = _Counters(_Accumulator(819), _Accumulator(8600))
    _spark_progress(_Spark(_Tracker(0)), "g", 2, counters, progress, done, success)  # type: ignore[arg-type]
    return lines


def test_a_job_ending_between_two_progress_samples_ends_on_its_final_count() -> None:
    lines = _progress_lines(succeeded=True)
    assert lines == [
        "  buckets compacted: 0/2, 819 events, 8.4 KB written",
        "  buckets compacted: 2/2, 819 events, 8.4 KB written",
    ]


def test_a_failed_job_is_not_reported_as_compacted() -> None:
    assert _progress_lines(succeeded=False) == ["  buckets compacted: 0/2, 819 events, 8.4 KB written"]
