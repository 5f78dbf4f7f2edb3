"""``acidclean hive-queue`` as the chart runs it: a process with ``--metrics-port``, on the real stack with
a Hive 4 metastore (ACIDCLEAN_TEST_METASTORE=hive4). Its rounds show in ``/metrics``, ``/healthz`` and
``/readyz`` answer 200 while it reaches the metastore and the broker, and SIGTERM stops it cleanly."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from producers_support import make_settings, process_env

from acidclean.deploy.local.process import free_port
from acidclean.shared.bus.topics import ensure_topics
from acidclean.shared.hive_metastore import HiveMetastore

pytestmark = [pytest.mark.integration, pytest.mark.metastore]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_the_process_serves_its_rounds_as_metrics_and_its_probes_and_stops_on_sigterm(
    metastore: HiveMetastore, metastore_uri: str, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    if metastore.major_version < 4:
        pytest.skip("Hive's worker calls are Hive 4's: run with ACIDCLEAN_TEST_METASTORE=hive4")
    settings = make_settings(metastore_uri, kafka_bootstrap, unique_name, tmp_path, hive_queue_pool=unique_name)
    ensure_topics(settings)
    port = free_port()
    env = process_env(settings, tmp_path)
    command = [sys.executable, "-m", "acidclean", "hive-queue", "--pool", unique_name, "--interval", "0.5"]
    with (tmp_path / "hive-queue.log").open("wb") as log:
        process = subprocess.Popen(
            [*command, "--metrics-port", str(port), "--name", unique_name],
            env=env,
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            rounds = 0.0
            deadline = time.monotonic() + 60
            while rounds < 2 and time.monotonic() < deadline:
                assert process.poll() is None, (tmp_path / "hive-queue.log").read_text()
                try:
                    status, text = get(f"http://127.0.0.1:{port}/metrics")
                except OSError:
                    time.sleep(0.2)
                    continue
                found = re.search(r'^acidclean_hive_queue_rounds_total\{outcome="ok"\} (\S+)$', text, re.M)
                rounds = float(found.group(1)) if found else 0.0
                time.sleep(0.2)
            assert rounds >= 2, (tmp_path / "hive-queue.log").read_text()
            assert get(f"http://127.0.0.1:{port}/healthz")[0] == 200
            status, reasons = get(f"http://127.0.0.1:{port}/readyz")
            assert status == 200, reasons
            _, text = get(f"http://127.0.0.1:{port}/metrics")
            assert 'acidclean_hive_queue_rounds_total{outcome="failed"}' not in text
            os.kill(process.pid, signal.SIGTERM)
            assert process.wait(timeout=30) == 0, (tmp_path / "hive-queue.log").read_text()
        finally:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=15)
