"""The cleaner's Kubernetes probes on a real cleaner: ``/healthz`` and ``/readyz`` on the metrics port.

Ready means: in the consumer group (an assignment received), the broker answering metadata for the
vacuum topic, and a metastore of ``hive.metastore.uris`` accepting connections. A metastore that is
down must show in ``/readyz`` (503, naming the address) and not in ``/healthz``: restarting a cleaner
does not bring a metastore back.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from cleaner_support import cleaner_settings, running_cleaner

from acidclean.consumers.cleaner_process import CleanerOptions
from acidclean.deploy.local.process import free_port, free_ports

pytestmark = pytest.mark.integration


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def wait_for(port: int, path: str, status: int, timeout_s: float = 60.0) -> str:
    deadline = time.monotonic() + timeout_s
    last: tuple[int, str] | None = None
    while time.monotonic() < deadline:
        try:
            last = get(port, path)
        except OSError:  # the server is not listening yet
            last = None
        if last is not None and last[0] == status:
            return last[1]
        time.sleep(0.2)
    raise AssertionError(f"{path} did not answer {status} within {timeout_s} s; last answer {last}")


def test_a_running_cleaner_is_live_and_ready_once_assigned(
    kafka_bootstrap: str, metastore_uri: str, tmp_path: Path, unique_name: str
) -> None:
    settings = cleaner_settings(kafka_bootstrap, metastore_uri, tmp_path, unique_name)
    port = free_port()
    options = CleanerOptions(cleaner_id="probes", metrics_port=port, metrics_address="127.0.0.1")
    with running_cleaner(settings, options) as cleaner:
        assert wait_for(port, "/healthz", 200) == "ok\n"
        assert wait_for(port, "/readyz", 200) == "ok\n"
        assert cleaner.loop.states, "ready before any partition was assigned"
        status, metrics = get(port, "/metrics")
        assert status == 200 and "acidclean_cleaner_oldest_pending_seconds" in metrics
        assert get(port, "/nothing")[0] == 404


def test_a_dead_metastore_makes_the_cleaner_unready_naming_the_address_but_not_unhealthy(
    kafka_bootstrap: str, tmp_path: Path, unique_name: str
) -> None:
    dead, port = free_ports(2)  # never one port for both: the metrics server would answer the "dead" address
    settings = cleaner_settings(kafka_bootstrap, f"thrift://127.0.0.1:{dead}", tmp_path, unique_name)
    options = CleanerOptions(cleaner_id="probes-dead-hms", metrics_port=port, metrics_address="127.0.0.1")
    with running_cleaner(settings, options):
        body = wait_for(port, "/readyz", 503)
        assert f"metastore unreachable: thrift://127.0.0.1:{dead}" in body
        assert get(port, "/healthz") == (200, "ok\n")
        # Once in the group, the metastore is the only reason left.
        deadline = time.monotonic() + 60
        while "consumer group" in body and time.monotonic() < deadline:
            time.sleep(0.2)
            status, body = get(port, "/readyz")
            assert status == 503
        assert body.splitlines() == [line for line in body.splitlines() if line.startswith("metastore unreachable")]
