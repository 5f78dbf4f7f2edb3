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
    log_level: str,
) -> None:
    """Serve Hive 4's compaction queue as its worker.

    Each initiated entry of the pool is taken as Hive's Worker takes one (find_next_compact2, so Hive's
    Worker never holds the same entry) and published as a VacuumRequested carrying its Hive compaction
    id; as the vacuum and its cleanup reach the event log, the entry moves to ready for cleaning, then
    succeeded (or failed, with the message), so SHOW COMPACTIONS shows acidclean's work. Needs a Hive 4
    metastore; a round that cannot reach it changes nothing and the next round catches up.
    """
    from acidclean.producers.hive_queue.bridge import HiveQueueBridge
    from acidclean.shared.bus.producer import KafkaEventBus
    from acidclean.shared.bus.topics import ensure_topics
    from acidclean.shared.hive4_queue.queue import HiveCompactionQueue
    from acidclean.shared.hive_metastore import HiveMetastore

    configure_json_logging(log_level)
    settings = command_settings(
        config_file,
        overrides={"tenant": tenant, "hive_queue_pool": pool, "hive_queue_poll_interval_s": interval},
    )
    ensure_topics(settings, ("vacuum_requests", "vacuum_committed", "cleanup_done", "dead_letter"))
    with HiveMetastore.from_settings(settings) as metastore, KafkaEventBus(settings.kafka) as bus:
        bridge = HiveQueueBridge(
            settings,
            HiveCompactionQueue(metastore),
            bus,
            name=name or socket.gethostname(),
            pool=settings.hive_queue_pool,
        )

        def stop(*_: Any) -> None:
            bridge.stop()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        bridge.run(settings.hive_queue_poll_interval_s)
