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
from acidclean.shared.logs import configure_json_logging, flush_logs


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
        flush_logs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


@click.command(
    "vacuum-request",
    epilog=examples(
        "acidclean vacuum-request @request.json",
        "acidclean vacuum-request - --master yarn < request.json",
    )
    + "\n\nAs one spark-submit per request: deploy/production/vacuum-request-spark-submit.sh request.json."
    + "\n\nExit 0 answered (committed, or answered before), 1 failed (VacuumFailed published), 3 committed "
    "but not published (the event waits in the outbox), 4 a service did not answer.",
)
@click.argument("request_json", metavar="JSON|@FILE|-")
@click.option("--master", help="Spark master (default: spark-submit's, else local[*]).")
@click.option("--service-id", help="Its id in VacuumStarted (default: spark-submit-host-pid).")
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Config file (.properties or .json), read before ACIDCLEAN_* variables and these flags.",
)
def vacuum_request(request_json: str, master: str | None, service_id: str | None, config_file: Path | None) -> None:
    """Answer one VacuumRequested as the vacuum service would.

    For clusters that run each Spark job on its own: a scheduler turns each request into one
    spark-submit of this command (deploy/production/vacuum-request-spark-submit.sh). It publishes
    VacuumStarted, then VacuumCommitted with the request's id or VacuumFailed; a request already
    answered is not run again.
    """
    require_extra("vacuum", "acidclean vacuum-request")
    configure_json_logging("WARNING")
    import socket
    import threading

    from pydantic import ValidationError

    from acidclean.producers.vacuum import outbox_for, spark_session
    from acidclean.producers.vacuum_requests import RequestHandler, ServiceOutbox
    from acidclean.producers.vacuum_service import SERVICE_TOPICS
    from acidclean.schemas.events import VacuumRequested
    from acidclean.shared.bus.producer import KafkaEventBus
    from acidclean.shared.bus.topics import ensure_topics
    from acidclean.shared.hive_metastore import HiveMetastore

    text = sys.stdin.read() if request_json == "-" else request_json
    if text.startswith("@"):
        text = Path(text[1:]).read_text(encoding="utf-8")
    try:
        request = VacuumRequested.model_validate_json(text)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "(value)"
        raise click.BadParameter(f"not a VacuumRequested: {where}: {first['msg']}") from None
    settings = command_settings(config_file)
    ensure_topics(settings, SERVICE_TOPICS)
    service = service_id or f"spark-submit-{socket.gethostname()}-{os.getpid()}"
    with (
        HiveMetastore.from_settings(settings) as metastore,
        KafkaEventBus(settings.kafka, source=f"/acidclean/vacuum-request/{service}") as bus,
    ):
        handler = RequestHandler(
            settings,
            service,
            metastore=lambda: metastore,
            bus=lambda: bus,
            spark=lambda: spark_session(master or settings.vacuum_service_master, f"acidclean-vacuum {request.table}"),
            outbox=ServiceOutbox(outbox_for(settings).directory),
            stopping=threading.Event(),
            publish_tries=5,
        )
        handled = handler.handle(request)
    where = request.table + (f" partition {request.partition}" if request.partition else "")
    if handled.outcome == "failed":
        click.echo(f"request {request.event_id} ({where}): VacuumFailed {handled.reason_code}: {handled.message}")
        sys.exit(1)
    if handled.outcome == "abandoned":
        click.echo(
            f"request {request.event_id} ({where}): not answered, Kafka did not acknowledge (see the log "
            "lines above); a committed vacuum's event waits in the outbox: run this command again"
        )
        sys.exit(3)
    detail = f"VacuumCommitted {handled.vacuum_id}" if handled.vacuum_id else handled.message
    click.echo(f"request {request.event_id} ({where}): {handled.outcome}: {detail}")
