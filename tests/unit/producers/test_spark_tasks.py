"""What an operator sees when a Spark task fails: the Python error, not the JVM's stack traces."""

from __future__ import annotations

from acidclean.producers.spark_tasks import task_error_message

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
