"""The cleaner's Prometheus metrics, in a registry of its own (served on ``--metrics-port``).

Alert on ``acidclean_cleaner_overdue_seconds`` (a partition stalled: a record due long ago not yet
finished), ``acidclean_cleaner_oldest_pending_seconds`` and ``acidclean_cleaner_stuck_events``, not on
the consumer lag of the delay topic: that lag is naturally about one interval's worth of waiting
vacuums and says nothing about health.

The same port serves Kubernetes' probes: ``/healthz`` (liveness: the loop stepped recently) and
``/readyz`` (readiness: every check of :class:`Probes` passes; the body names the ones that fail).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENESS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
WAIT_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600, 7 * 24 * 3600)


class CleanerMetrics:
    """Every metric the cleaner exports. Gauges that are computed on demand take callables."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.events = Counter(
            "acidclean_cleaner_events",
            "Events handled, by outcome (cleaned, delayed, dead_lettered, "
            "table_dropped, skipped_other_tenant, dry_run, dropped: not even a dead letter could be built).",
            ["outcome"],
            registry=r,
        )
        self.requeues = Counter(
            "acidclean_cleaner_requeues", "Delay envelopes published (locks still held).", registry=r
        )
        self.dead_letters = Counter(
            "acidclean_cleaner_dead_letters",
            "Events sent to the dead-letter topic, by reason code.",
            ["reason"],
            registry=r,
        )
        self.check_errors = Counter(
            "acidclean_cleaner_check_errors",
            "readyToClean checks that failed closed (metastore or storage).",
            registry=r,
        )
        self.metastore_calls = Counter(
            "acidclean_cleaner_metastore_calls", "Metastore calls made, by call.", ["call"], registry=r
        )
        self.wait_seconds = Histogram(
            "acidclean_cleaner_wait_seconds",
            "From the vacuum's commit to its cleanup.",
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.lateness_seconds = Histogram(
            "acidclean_cleaner_lateness_seconds",
            "Re-check time minus due time of delayed events (never negative).",
            buckets=LATENESS_BUCKETS,
            registry=r,
        )
        self.deleted_bytes = Counter("acidclean_cleaner_deleted_bytes", "Bytes deleted.", registry=r)
        self.deleted_directories = Counter("acidclean_cleaner_deleted_directories", "Directories deleted.", registry=r)
        self.deleted_files = Counter("acidclean_cleaner_deleted_files", "Files deleted.", registry=r)
        self.stuck_checks = Counter(
            "acidclean_cleaner_stuck_checks", "Checks of vacuums waiting longer than the max wait.", registry=r
        )
        self.commit_failures = Counter("acidclean_cleaner_commit_failures", "Offset commits that failed.", registry=r)
        self.rebalances = Counter(
            "acidclean_cleaner_rebalances", "Partitions assigned, revoked or lost.", ["kind"], registry=r
        )
        self.paused_partitions = Gauge(
            "acidclean_cleaner_paused_partitions", "Delay-topic partitions paused until their head is due.", registry=r
        )
        self.oldest_pending_seconds = Gauge(
            "acidclean_cleaner_oldest_pending_seconds",
            "Age of the oldest vacuum this process is waiting on.",
            registry=r,
        )
        self.stuck_events = Gauge(
            "acidclean_cleaner_stuck_events", "Vacuums waiting longer than the max wait, seen recently.", registry=r
        )
        self.overdue_seconds = Gauge(
            "acidclean_cleaner_overdue_seconds",
            "How long the most overdue record this process has read and not finished has been due "
            "(a stalled partition; about zero while the cleaner keeps up).",
            registry=r,
        )
        self.clamped_due_times = Counter(
            "acidclean_cleaner_clamped_due_times",
            "Delay envelopes read with a due time more than a few intervals ahead (clock skew or a bad "
            "record), clamped to one interval from now.",
            registry=r,
        )
        self.handler_errors = Counter(
            "acidclean_cleaner_handler_errors",
            "Tries of an event that failed with an error other than an unacknowledged publish.",
            registry=r,
        )

    def bind(
        self,
        *,
        paused: Callable[[], float],
        oldest_pending: Callable[[], float],
        stuck: Callable[[], float],
        overdue: Callable[[], float],
    ) -> None:
        """Compute the on-demand gauges from the running cleaner's state at scrape time."""
        self.paused_partitions.set_function(paused)
        self.oldest_pending_seconds.set_function(oldest_pending)
        self.stuck_events.set_function(stuck)
        self.overdue_seconds.set_function(overdue)

    def serve(self, port: int, address: str = "0.0.0.0", probes: Probes | None = None) -> ThreadingHTTPServer:
        """Serve ``/metrics`` (and with ``probes`` ``/healthz`` and ``/readyz``) on ``port`` from a daemon
        thread; ``shutdown()`` the returned server to stop it."""
        return serve_http(self.registry, port, address, probes)


# A readiness check: None when it passes, else the reason, one line naming what is down and where.
ReadinessCheck = Callable[[], str | None]


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    reasons: tuple[str, ...] = ()

    def body(self) -> bytes:
        return ("ok\n" if self.ok else "".join(f"{reason}\n" for reason in self.reasons)).encode()


class Probes:
    """What ``/healthz`` and ``/readyz`` answer for a running cleaner.

    Liveness is only "the loop still steps": a step blocks at most half a second polling Kafka, and
    longer only while a rebalance waits for in-flight work, so a loop that has not stepped for
    ``stale_after_s`` is wedged and a restart is the cure. Readiness is every named check (group joined,
    broker and metastore reachable); a failing one takes the pod out of the Service's endpoints but must
    not restart it, which is why reachability is not part of liveness.
    """

    def __init__(self, stale_after_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.stale_after_s = stale_after_s
        self._clock = clock
        self._last_step = clock()
        self._checks: list[ReadinessCheck] = []

    def stepped(self) -> None:
        """Called by the loop after each step."""
        self._last_step = self._clock()

    def add_check(self, check: ReadinessCheck) -> None:
        self._checks.append(check)

    def health(self) -> ProbeResult:
        age = self._clock() - self._last_step
        if age <= self.stale_after_s:
            return ProbeResult(True)
        limit = self.stale_after_s
        return ProbeResult(False, (f"the cleaner loop has not stepped for {age:.0f} s (limit {limit:.0f} s)",))

    def readiness(self) -> ProbeResult:
        reasons: list[str] = []
        for check in self._checks:
            try:
                reason = check()
            except Exception as error:  # a check that fails to run is a reason, not a 500
                reason = f"{type(error).__name__}: {error}"
            if reason is not None:
                reasons.append(reason)
        return ProbeResult(not reasons, tuple(reasons))


def serve_http(
    registry: CollectorRegistry, port: int, address: str = "0.0.0.0", probes: Probes | None = None
) -> ThreadingHTTPServer:
    """``/metrics`` from ``registry``; ``/healthz`` and ``/readyz`` from ``probes`` (200 or 503 with the
    reasons as text, one a line); anything else 404."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            if path in ("/", "/metrics"):
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path in ("/healthz", "/readyz") and probes is not None:
                result = probes.health() if path == "/healthz" else probes.readiness()
                self._send(200 if result.ok else 503, result.body(), "text/plain; charset=utf-8")
            else:
                self._send(404, b"not found: /metrics, /healthz, /readyz\n", "text/plain; charset=utf-8")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the prober gave up
                self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # a probe every few seconds would bury the cleaner's JSON log lines

    server = ThreadingHTTPServer((address, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server
