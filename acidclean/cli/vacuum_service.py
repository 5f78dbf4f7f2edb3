"""``acidclean vacuum-service``: answer vacuum requests in one warm SparkSession until SIGTERM.

See :mod:`acidclean.producers.vacuum_service`. Logs are JSON lines on stderr.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from acidclean.cli import examples, require_extra
from acidclean.cli.context import command_settings
from acidclean.shared.logs import configure_json_logging


@click.command(
    "vacuum-service",
    epilog=examples(
        "acidclean vacuum-service --metrics-port 9465",
        "acidclean vacuum-service --master yarn --threads 4 --config /etc/acidclean/acidclean.properties",
    ),
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Config file (.properties or .json), read before ACIDCLEAN_* variables and these flags.",
)
@click.option("--group", help="Consumer group (the process joins GROUP.TENANT). Default: vacuum_service_group_id.")
@click.option("--threads", type=click.IntRange(min=1), help="Vacuums run at once (default 1).")
@click.option("--master", help="Spark master (default: spark-submit's, else local[*]).")
@click.option("--tenant", help="The tenant this process vacuums for: its requests only.")
@click.option(
    "--no-create-topics", is_flag=True, help="Only check that the topics exist (provisioned topics, no Create ACL)."
)
@click.option("--metrics-port", type=click.IntRange(min=0, max=65535), help="Serve /metrics, /healthz, /readyz here.")
@click.option("--service-id", help="This process's id in events and logs (default: host-pid).")
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def vacuum_service(
    config_file: Path | None,
    group: str | None,
    threads: int | None,
    master: str | None,
    tenant: str | None,
    no_create_topics: bool,
    metrics_port: int | None,
    service_id: str | None,
    log_level: str,
) -> None:
    """Run one vacuum service of the consumer group.

    It reads VacuumRequested (from `acidclean initiator`) and runs each vacuum in one SparkSession
    started once, publishing VacuumStarted, then VacuumCommitted (with the request's id) or
    VacuumFailed. On SIGTERM it lets running vacuums finish (vacuum_service_shutdown_s), commits and
    leaves the group.
    """
    require_extra("vacuum", "acidclean vacuum-service")
    from acidclean.producers.vacuum_service import ServiceOptions, VacuumService

    configure_json_logging(log_level)
    settings = command_settings(
        config_file,
        overrides={
            "vacuum_service_group_id": group,
            "vacuum_service_threads": threads,
            "vacuum_service_master": master,
            "tenant": tenant,
            "create_topics": False if no_create_topics else None,
        },
    )
    options = ServiceOptions(service_id=service_id, metrics_port=metrics_port)
    service = VacuumService(settings, options)
    service.run()
    if service.abandoned_close:
        # A vacuum still runs in Spark, or the broker did not take the final commit: leave without them.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
