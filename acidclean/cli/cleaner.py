"""``acidclean cleaner``: run one process of the cleaner consumer group until SIGTERM.

Defaults come from the settings (``hive.compaction-cleanup-interval`` 2000 ms,
``hive.compaction-cleanup-threads`` 2, ...); the flags override them. Logs are JSON lines on stderr.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from acidclean.cli import examples
from acidclean.cli.context import command_settings
from acidclean.consumers.cleaner_process import CleanerOptions, CleanerProcess
from acidclean.consumers.crash_points import crash_points_from_env
from acidclean.consumers.logs import configure_json_logging, flush_logs


@click.command(
    epilog=examples("acidclean cleaner --metrics-port 9464", "acidclean cleaner --tenant acme --threads 4 --dry-run")
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Config file (.properties or .json), read before ACIDCLEAN_* variables and these flags.",
)
@click.option("--group", help="Consumer group (the process joins GROUP.TENANT). Default: group_id setting.")
@click.option("--threads", type=click.IntRange(min=1), help="Parallel tables and parallel deletes (default 2).")
@click.option(
    "--interval-ms",
    metavar="DURATION",
    help="Delay before a waiting vacuum is checked again: milliseconds, or with a unit (500ms, 2s, 5m); default 2000.",
)
@click.option("--tenant", help="The tenant this process cleans for: its events and its allowed roots only.")
@click.option(
    "--max-wait",
    "max_wait_s",
    metavar="DURATION",
    help="After this a waiting vacuum is reported stuck (it keeps waiting): seconds, or with a unit (30m, 1d); "
    "default 1d.",
)
@click.option("--dry-run", is_flag=True, help="Delete nothing; publish CleanupDone(dry_run=true) with what would go.")
@click.option(
    "--no-create-topics", is_flag=True, help="Only check that the topics exist (provisioned topics, no Create ACL)."
)
@click.option("--metrics-port", type=click.IntRange(min=0, max=65535), help="Serve Prometheus /metrics on this port.")
@click.option("--cleaner-id", help="This process's id in events and logs (default: host-pid).")
@click.option(
    "--batch-tables",
    type=click.IntRange(min=1),
    default=200,
    show_default=True,
    help="Tables one thread handles together (one show_locks, one publish of their outcomes).",
)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def cleaner(
    config_file: Path | None,
    group: str | None,
    threads: int | None,
    interval_ms: str | None,
    tenant: str | None,
    max_wait_s: str | None,
    dry_run: bool,
    no_create_topics: bool,
    metrics_port: int | None,
    cleaner_id: str | None,
    batch_tables: int,
    log_level: str,
) -> None:
    """Run one cleaner of the consumer group.

    It waits for the readers of each vacuum's lock snapshot, deletes the obsolete directories and
    reports, until SIGTERM (finish the running work, commit, leave the group). Ctrl-C stops it the
    same way if that takes less than a second, else at once (exit 130); the group redoes what it was
    doing, as after a crash.
    """
    configure_json_logging(log_level)
    settings = command_settings(
        config_file,
        overrides={
            "group_id": group,
            "cleanup_threads": threads,
            "cleanup_interval_ms": interval_ms,
            "tenant": tenant,
            "max_wait_s": max_wait_s,
            "create_topics": False if no_create_topics else None,
        },
    )
    options = CleanerOptions(
        dry_run=dry_run,
        metrics_port=metrics_port,
        cleaner_id=cleaner_id,
        crash_points=crash_points_from_env(),
        batch_tables=batch_tables,
        tune_gc=True,
        release_memory=True,
        short_thread_switches=True,
    )
    process = CleanerProcess(settings, options)
    process.run()
    if process.loop.abandoned_close:
        # The Kafka client still waits for a broker that is gone; its teardown at interpreter exit would too.
        flush_logs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
