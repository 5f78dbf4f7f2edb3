"""PySpark's Python daemon for the vacuum's executors, with the vacuum's modules imported before it
forks a worker.

PySpark forks every Python worker from one daemon process and keeps an idle worker for a minute
only. A fresh worker then imports pyarrow and the ACID reader and writer before its first task:
about 0.5 to 1 s of CPU each (measured on the development machine), paid again by every worker of
every vacuum that comes more than a minute after the last one, as in a long-running vacuum service.
Imported here, once per SparkContext, the forked workers inherit them. Enable it with
``spark.python.daemon.module=acidclean.producers.spark_daemon`` (:data:`DAEMON_CONF`; the vacuum's own
local sessions set it); executors must have acidclean installed, as the vacuum's tasks need anyway.
"""

from __future__ import annotations

import acidclean.producers.compact  # noqa: F401  pyarrow, numpy, the ACID reader and writer

DAEMON_MODULE = "acidclean.producers.spark_daemon"
DAEMON_CONF = {"spark.python.daemon.module": DAEMON_MODULE}

if __name__ == "__main__":
    from pyspark import daemon

    from acidclean.producers.spark_tasks import refresh_zip_importers_only_when_changed

    # Before the first fork, so a new worker's first task skips the zip re-read as its later tasks do.
    refresh_zip_importers_only_when_changed()
    daemon.manager()  # type: ignore[no-untyped-call]
