"""Kubernetes' probes and Prometheus' ``/metrics`` for acidclean's long-running services.

``/healthz`` (liveness: the service's loop stepped recently) and ``/readyz`` (readiness: every check of
:class:`Probes` passes; the body names the ones that fail), served with ``/metrics`` from one small
HTTP server. The cleaner (:mod:`acidclean.consumers.metrics`) and the vacuum service
(:mod:`acidclean.producers.vacuum_service`) both use it.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from thrift.transport.TTransport import TTransportException

from acidclean.shared.errors import MetastoreAuthenticationError, MetastoreError
from acidclean.shared.metastore import parse_metastore_uris
from acidclean.shared.metastore_transport import KerberosSettings, kerberos_from_settings, open_transport
from acidclean.shared.settings import Settings

# A readiness check: None when it passes, else the reason, one line naming what is down and where.
ReadinessCheck = Callable[[], str | None]


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    reasons: tuple[str, ...] = ()

    def body(self) -> bytes:
        return ("ok\n" if self.ok else "".join(f"{reason}\n" for reason in self.reasons)).encode()


class Probes:
    """What ``/healthz`` and ``/readyz`` answer for a running service (the cleaner, the vacuum service).

    Liveness is only "the loop still steps": a step blocks at most half a second polling Kafka, and
    longer only while a rebalance waits for in-flight work, so a loop that has not stepped for
    ``stale_after_s`` is wedged and a restart is the cure. Readiness is every named check (group joined,
    broker and metastore reachable); a failing one takes the pod out of the Service's endpoints but must
    not restart it, which is why reachability is not part of liveness.
    """

    def __init__(
        self, stale_after_s: float, clock: Callable[[], float] = time.monotonic, *, loop_name: str = "cleaner"
    ) -> None:
        self.stale_after_s = stale_after_s
        self.loop_name = loop_name
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
        return ProbeResult(False, (f"the {self.loop_name} loop has not stepped for {age:.0f} s (limit {limit:.0f} s)",))

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


PROBE_TIMEOUT_S = 2.0  # per readiness check; the chart's probe timeoutSeconds leaves room for two


def metastore_check(
    uris: str, timeout_s: float = PROBE_TIMEOUT_S, kerberos: KerberosSettings | None = None
) -> ReadinessCheck:
    """Ready when any metastore of ``hive.metastore.uris`` accepts a connection (the client fails over
    between them the same way). With ``kerberos`` the connection must also complete the SASL/GSSAPI
    handshake: a keytab the KDC no longer accepts, a lost ticket or a metastore that refuses our
    principal leave the port open but every call failing, and readiness must say so."""

    def check() -> str | None:
        failures = []
        for host, port in parse_metastore_uris(uris):
            started = time.monotonic()
            try:
                if kerberos is None:
                    with socket.create_connection((host, port), timeout=timeout_s):
                        return None
                open_transport(host, port, timeout_s, kerberos).close()
                return None
            except MetastoreAuthenticationError as refused:
                return f"metastore refuses our Kerberos login: {refused}"
            except (OSError, MetastoreError, TTransportException) as error:
                took = time.monotonic() - started
                said = error.strerror if isinstance(error, OSError) and error.strerror else error
                failures.append(f"thrift://{host}:{port} ({said} after {took:.1f} s)")
        return "metastore unreachable: " + ", ".join(failures)

    return check


def metastore_check_for(settings: Settings, timeout_s: float = PROBE_TIMEOUT_S) -> ReadinessCheck:
    """:func:`metastore_check` for a service's settings, with their Kerberos identity when SASL is on."""
    return metastore_check(settings.metastore_uris, timeout_s, kerberos_from_settings(settings))


def broker_check(kafka: Mapping[str, str], topic: str, timeout_s: float = PROBE_TIMEOUT_S) -> ReadinessCheck:
    """Ready when the broker describes ``topic``, asked by an admin client of the probes' own (a
    consumer belongs to its loop's thread: its list_topics from another thread blocked while it polled)."""
    admin: list[AdminClient] = []

    def check() -> str | None:
        if not admin:
            config: dict[str, Any] = {k: v for k, v in kafka.items() if not k.startswith(CONSUMER_ONLY_PREFIXES)}
            config["logger"] = logging.getLogger("acidclean.kafka")
            admin.append(AdminClient(config))
        try:
            metadata = admin[0].list_topics(topic, timeout=timeout_s)
        except KafkaException as error:
            return f"broker unreachable ({kafka.get('bootstrap.servers', '?')}): {error.args[0].str()}"
        found = metadata.topics.get(topic)
        if found is None:
            return f"topic {topic} missing on the broker"
        if found.error is not None:
            return f"topic {topic} not readable: {found.error.str()}"
        return None

    return check


# Consumer-only librdkafka settings: a producer or admin client would only warn that it ignores them.
CONSUMER_ONLY_PREFIXES = (
    "group.",
    "session.timeout",
    "heartbeat.",
    "max.poll.",
    "auto.offset.",
    "enable.auto.",
    "fetch.",
    "isolation.level",
    "partition.assignment",
    "auto.commit",
    "queued.",
    "check.crcs",
)
