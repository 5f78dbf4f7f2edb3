"""``acidclean undo [CLEANUP_ID] [--table DB.TABLE] [--since TIME] [--apply]``.

Puts the files of a cleanup back from the trash, by its ledger on the ledger topic
(:mod:`acidclean.consumers.undo`): a dry run unless ``--apply``; never over an existing file, never
into a table that is not the one cleaned; what cannot be put back is named, one line each reason.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from acidclean.cli import examples, table_name
from acidclean.cli.audit import format_bytes, parse_since
from acidclean.cli.context import command_settings
from acidclean.consumers.ledger import Ledger
from acidclean.consumers.undo_log import CleanupUndo, read_ledger_log, select_cleanups, undo_cleanups
from acidclean.schemas.common import utc_now
from acidclean.shared.bus.producer import KafkaEventBus
from acidclean.shared.bus.topics import ensure_topics
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.metastore import TableInfo


@click.command(
    epilog=examples(
        "acidclean undo 7b7933ae-67d0-5532-8bbb-99f12e5b4f48",
        "acidclean undo 7b7933ae-67d0-5532-8bbb-99f12e5b4f48 --apply",
        "acidclean undo --table sales.orders --since 2h",
    )
)
@click.argument("cleanup_id", required=False, metavar="[CLEANUP_ID]")
@click.option("--table", callback=table_name, metavar="DB.TABLE", help="Every cleanup of this table (with --since).")
@click.option("--since", "since_text", metavar="TIME", help="Only cleanups since TIME (ISO 8601, or an age: 2h, 7d).")
@click.option("--apply", "apply", is_flag=True, help="Put the files back (default: only say what would be).")
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    envvar="ACIDCLEAN_CONFIG",
    help="Settings file (.properties or .json); ACIDCLEAN_* variables apply on top.",
)
def undo(
    cleanup_id: str | None, table: str | None, since_text: str | None, apply: bool, config_file: Path | None
) -> None:
    """Put a cleanup's files back from the trash (dry run).

    CLEANUP_ID is the event_id of the cleanup's CleanupDone or of its vacuum. Only files moved to a
    trash that still holds them go back, only where no file is, only into the same table.
    """
    if cleanup_id is None and table is None:
        raise click.UsageError("give CLEANUP_ID, or --table DB.TABLE (with --since) to undo that table's cleanups")
    since = parse_since(since_text, utc_now()) if since_text else None
    settings = command_settings(config_file)
    since_ms = None if since is None else int(since.timestamp() * 1000)
    selected = select_cleanups(read_ledger_log(settings, since_ms), cleanup_id, table, since)
    if not selected:
        click.echo("no cleanup with a ledger matches; nothing to undo")
        return
    with HiveMetastore.from_settings(settings) as metastore:

        def reread(ledger: Ledger) -> TableInfo:
            db, name = ledger.table.split(".", 1)
            return metastore.get_table(db, name, ledger.partition)

        if apply:
            ensure_topics(settings, ["cleanup_ledger"])
            with KafkaEventBus(settings.kafka, source="/acidclean/undo") as bus:
                undos = undo_cleanups(selected, reread, apply=True, bus=bus, topic=settings.topic("cleanup_ledger"))
        else:
            undos = undo_cleanups(selected, reread, apply=False, bus=None, topic=settings.topic("cleanup_ledger"))
    failed = False
    for item in undos:
        failed |= report(item, apply)
    if not apply:
        click.echo("dry run: nothing moved; run again with --apply to put these files back")
    if failed:
        sys.exit(1)


def report(item: CleanupUndo, applied: bool) -> bool:
    """Print one cleanup's undo; True when files it could have put back were refused."""
    ledger = item.plan.ledger
    where = ledger.table + (f" partition {ledger.partition}" if ledger.partition else "")
    click.echo(f"cleanup {ledger.cleanup_id} of {where} at {ledger.recorded_at.isoformat()}:")
    if item.result is None:
        restores, refused = item.plan.restores, item.plan.refused
        verb = "would put back"
    else:
        restores, refused = item.result.restored, item.result.refused
        verb = "put back"
    if item.plan.table_refusal is not None:
        click.echo(f"  refused: {item.plan.table_refusal}")
        return True
    size = format_bytes(sum(restore.file.size for restore in restores))
    click.echo(f"  {verb} {len(restores)} file(s), {size}")
    by_reason: dict[str, int] = {}
    for refusal in refused:
        by_reason[refusal.reason] = by_reason.get(refusal.reason, 0) + 1
    for reason, count in sorted(by_reason.items()):
        click.echo(f"  refused {count} file(s): {reason}")
    if item.published is not None:
        click.echo(f"  published CleanupUndone {item.published.event_id}")
    return bool(refused) and not restores if applied else False
