"""The probe endpoints' rules without a cleaner: a fake clock for liveness, checks as plain callables,
and the HTTP server on a loopback port the kernel picks."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from acidclean.consumers.metrics import CleanerMetrics, Probes, serve_http


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_loop_that_stops_stepping_fails_liveness_after_the_limit() -> None:
    clock = Clock()
    probes = Probes(stale_after_s=60, clock=clock)
    clock.now += 59
    assert probes.health().ok
    clock.now += 2
    assert probes.health().reasons == ("the cleaner loop has not stepped for 61 s (limit 60 s)",)
    probes.stepped()
    assert probes.health().ok


def test_readiness_names_every_failing_check_and_a_check_that_raises() -> None:
    probes = Probes(stale_after_s=60)
    probes.add_check(lambda: None)
    probes.add_check(lambda: "metastore unreachable: thrift://h:9083 (Connection refused after 0.0 s)")

    def broken() -> str | None:
        raise RuntimeError("consumer closed")

    probes.add_check(broken)
    result = probes.readiness()
    assert not result.ok
    assert result.body().decode().splitlines() == [
        "metastore unreachable: thrift://h:9083 (Connection refused after 0.0 s)",
        "RuntimeError: consumer closed",
    ]


@pytest.fixture
def server() -> Iterator[tuple[int, Probes, Clock]]:
    clock = Clock()
    probes = Probes(stale_after_s=60, clock=clock)
    http = serve_http(CleanerMetrics().registry, 0, "127.0.0.1", probes)
    try:
        yield http.server_address[1], probes, clock
    finally:
        http.shutdown()
        http.server_close()


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_the_server_answers_metrics_and_both_probes(server: tuple[int, Probes, Clock]) -> None:
    port, probes, clock = server
    assert get(port, "/healthz") == (200, "ok\n")
    assert get(port, "/readyz") == (200, "ok\n")
    status, body = get(port, "/metrics")
    assert status == 200 and "acidclean_cleaner_stuck_events" in body
    probes.add_check(lambda: "not in consumer group g.t yet: no partition assignment received")
    assert get(port, "/readyz") == (503, "not in consumer group g.t yet: no partition assignment received\n")
    clock.now += 120
    assert get(port, "/healthz")[0] == 503
    assert get(port, "/other")[0] == 404
