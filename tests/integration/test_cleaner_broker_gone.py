"""A cleaner asked to stop after its broker is gone stops anyway, and its log does not flood.

The final offset commit and the group leave wait for the broker without a time limit; the cleaner
gives them ``close_timeout_s`` and then stops (the records since the last commit are handled again,
which every handler allows). librdkafka retries a dead broker many times a second; the log shows a
repeated line once per 30 s. The broker is the test's own, started and stopped here by its pid.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cleaner_support import Watcher, cleaner_settings, create_table, publish, start_cleaner_process

from acidclean.deploy.local.kafka import start_kafka
from acidclean.deploy.local.process import StartedProcess, stop_process
from acidclean.shared.hive_metastore import HiveMetastore

pytestmark = pytest.mark.integration


@pytest.fixture
def own_kafka(tmp_path: Path) -> Iterator[tuple[StartedProcess, str]]:
    process, bootstrap = start_kafka(tmp_path / "kafka-state")
    try:
        yield process, bootstrap
    finally:
        stop_process(process.pid, process.name)


def test_a_cleaner_whose_broker_is_gone_stops_on_sigterm_without_flooding_its_log(
    own_kafka: tuple[StartedProcess, str],
    metastore: HiveMetastore,
    metastore_uri: str,
    tmp_path: Path,
    unique_name: str,
) -> None:
    kafka, bootstrap = own_kafka
    settings = cleaner_settings(bootstrap, metastore_uri, tmp_path / "data", unique_name, interval_ms=300)
    table = create_table(metastore, tmp_path / "data", unique_name)
    table.commit_deltas(2)
    vacuum = table.minor_vacuum()
    watcher = Watcher(settings)
    cleaner = start_cleaner_process(settings, tmp_path / "cleaner.log")
    try:
        publish(settings, vacuum)  # the cleaner has offsets to commit when it stops
        watcher.wait_for(lambda: watcher.done(vacuum), 60, "the cleanup")
        watcher.close()
        stop_process(kafka.pid, kafka.name)
        time.sleep(5)  # the broker is gone: its clients retry, many times a second
        cleaner.process.send_signal(signal.SIGTERM)
        stopped_at = time.monotonic()
        code = cleaner.process.wait(60)
        took = time.monotonic() - stopped_at
    finally:
        if cleaner.process.poll() is None:
            cleaner.process.kill()
            cleaner.process.wait(10)
    assert code == 0, cleaner.log()[-2000:]
    print(f"stopped {took:.1f} s after SIGTERM")
    assert took < 30, f"took {took:.1f} s to stop"
    log = cleaner.log()
    refused = [line for line in log.splitlines() if "Connection refused" in line]
    assert len(refused) < 20, f"{len(refused)} connection-refused lines in {took + 5:.0f} s"
