"""``acidclean hive-queue``: serve Hive 4's compaction queue until SIGTERM (see
:mod:`acidclean.producers.hive_queue.bridge`). Logs are JSON lines on stderr."""

from __future__ import annotations

import signal
import socket
from pathlib import Path
from typing import Any

import click

from acidclean.cli import examples
from acidclean.cli.context import command_settings
from acidclean.shared.logs import configure_json_logging


@click.command(
    "hive-queue",
    epilog=examples(
        "acidclean hive-queue",
        "acidclean hive-queue --pool acidclean --name cleaner-host-1",
        "acidclean hive-queue --metrics-port 9467",
    ),
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Config file (.properties or .json), read before ACIDCLEAN_* variables and these flags.",
)
@click.option("--tenant", help="The tenant whose metastore's queue this process serves.")
@click.option("--pool", help="The queue's pool to serve (default: hive_queue_pool; unset: Hive's default pool).")
@click.option("--interval", type=click.FloatRange(min=0.1), help="Seconds between rounds (default 5).")
@click.option(
    "--name", help="This replica's name; its worker id is acidclean-NAME (default: the host name). Unique per replica."
)
@click.option(
    "--metrics-port",
    type=click.IntRange(min=0, max=65535),
    help="Serve Prometheus /metrics, /healthz and /readyz on this port.",
)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def hive_queue(
    config_file: Path | None,
    tenant: str | None,
    pool: str | None,
    interval: float | None,
    name: str | None,
    metrics_port: int | None,
    log_level: str,
) -> None:
    """Serve Hive 4's compaction queue as its worker.

    Each initiated entry of the pool is taken as Hive's Worker takes one (find_next_compact2, so Hive's
    Worker never holds the same entry) and published as a VacuumRequested carrying its Hive compaction
    id; as the vacuum and its cleanup reach the event log, the entry moves to ready for cleaning, then
    succeeded (or failed, with the message), so SHOW COMPACTIONS shows acidclean's work. Needs a Hive 4
    metastore; a round that cannot reach it changes nothing and the next round catches up.
    """
    from acidclean.producers.hive_queue.bridge import HiveQueueBridge, RoundReport
    from acidclean.producers.hive_queue.metrics import HiveQueueMetrics
    from acidclean.shared.bus.producer import KafkaEventBus
    from acidclean.shared.bus.topics import ensure_topics
    from acidclean.shared.hive4_queue.queue import HiveCompactionQueue
    from acidclean.shared.hive_metastore import HiveMetastore
    from acidclean.shared.probes import Probes, broker_check, metastore_check_for, serve_http

    configure_json_logging(log_level)
    settings = command_settings(
        config_file,
        overrides={"tenant": tenant, "hive_queue_pool": pool, "hive_queue_poll_interval_s": interval},
    )
    ensure_topics(settings, ("vacuum_requests", "vacuum_committed", "cleanup_done", "dead_letter"))
    metrics = HiveQueueMetrics()
    # A round is a show_compact, a read of the log and a few calls: one that has not ended for four
    # intervals (two minutes at least) is wedged, and a restart is the cure.
    probes = Probes(stale_after_s=max(120.0, 4 * settings.hive_queue_poll_interval_s), loop_name="hive-queue")
    probes.add_check(metastore_check_for(settings))
    probes.add_check(broker_check(settings.kafka, settings.topic("vacuum_requests")))

    def observe(report: RoundReport) -> None:
        metrics.observe(report)
        probes.stepped()

    http = serve_http(metrics.registry, metrics_port, probes=probes) if metrics_port is not None else None
    with HiveMetastore.from_settings(settings) as metastore, KafkaEventBus(settings.kafka) as bus:
        bridge = HiveQueueBridge(
            settings,
            HiveCompactionQueue(metastore),
            bus,
            name=name or socket.gethostname(),
            pool=settings.hive_queue_pool,
            observe=observe,
        )

        def stop(*_: Any) -> None:
            bridge.stop()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        try:
            bridge.run(settings.hive_queue_poll_interval_s)
        finally:
            if http is not None:
                http.shutdown()
