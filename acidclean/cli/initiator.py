"""``acidclean initiator``: run one process of the initiator group until SIGTERM.

It requests vacuums (``VacuumRequested``) when a table or partition crosses Hive's compactor
thresholds (``hive.compactor.delta.num.threshold`` 10, ``hive.compactor.delta.pct.threshold`` 0.1,
``hive.compactor.abortedtxn.threshold`` 1000, per-table ``compactorthreshold.*`` overrides), at most
one in flight per table or partition. Logs are JSON lines on stderr.
"""

from __future__ import annotations

from pathlib import Path

import click

from acidclean.cli import examples
from acidclean.cli.context import command_settings
from acidclean.producers.initiator.process import InitiatorOptions, InitiatorProcess
from acidclean.shared.logs import configure_json_logging


@click.command(
    epilog=examples(
        "acidclean initiator --metrics-port 9465",
        "acidclean initiator --tenant acme --sweep-interval 5m --delta-num-threshold 10",
    )
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Config file (.properties or .json), read before ACIDCLEAN_* variables and these flags.",
)
@click.option("--group", help="Consumer group (the process joins GROUP.TENANT). Default: initiator_group_id setting.")
@click.option("--tenant", help="The tenant this process initiates for.")
@click.option(
    "--sweep-interval",
    metavar="DURATION",
    help="How often the metastore's transactional tables are swept (tables whose writers publish nothing): "
    "seconds, or with a unit (30s, 5m); 0 turns the sweep off; default hive.compactor.check.interval, 300 s.",
)
@click.option(
    "--sweep-tables-per-minute", type=click.IntRange(min=1), help="At most this many tables a minute (default 60)."
)
@click.option("--delta-num-threshold", type=click.IntRange(min=0), help="hive.compactor.delta.num.threshold (10).")
@click.option("--delta-pct-threshold", type=click.FloatRange(min=0), help="hive.compactor.delta.pct.threshold (0.1).")
@click.option("--aborted-txn-threshold", type=click.IntRange(min=0), help="hive.compactor.abortedtxn.threshold (1000).")
@click.option(
    "--no-create-topics", is_flag=True, help="Only check that the topics exist (provisioned topics, no Create ACL)."
)
@click.option("--metrics-port", type=click.IntRange(min=0, max=65535), help="Serve Prometheus /metrics on this port.")
@click.option("--initiator-id", help="This process's id in events and logs (default: initiator-host-pid).")
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def initiator(
    config_file: Path | None,
    group: str | None,
    tenant: str | None,
    sweep_interval: str | None,
    sweep_tables_per_minute: int | None,
    delta_num_threshold: int | None,
    delta_pct_threshold: float | None,
    aborted_txn_threshold: int | None,
    no_create_topics: bool,
    metrics_port: int | None,
    initiator_id: str | None,
    log_level: str,
) -> None:
    """Run one initiator of the consumer group.

    It reads DeltaCommitted, keeps each table's and partition's deltas and bytes (listed from storage
    when first seen), and publishes VacuumRequested when Hive's thresholds are crossed and no vacuum of
    it is in flight; the sweep covers tables written without events. SIGTERM (or Ctrl-C) stops it after
    the current step; a killed initiator loses no request (the group reads the uncommitted deltas again).
    """
    configure_json_logging(log_level)
    settings = command_settings(
        config_file,
        overrides={
            "initiator_group_id": group,
            "tenant": tenant,
            "initiator_sweep_interval_s": sweep_interval,
            "initiator_sweep_tables_per_minute": sweep_tables_per_minute,
            "compactor_delta_num_threshold": delta_num_threshold,
            "compactor_delta_pct_threshold": delta_pct_threshold,
            "compactor_abortedtxn_threshold": aborted_txn_threshold,
            "create_topics": False if no_create_topics else None,
        },
    )
    InitiatorProcess(settings, InitiatorOptions(initiator_id=initiator_id, metrics_port=metrics_port)).run()
