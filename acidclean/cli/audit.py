"""``acidclean audit [DB.TABLE] [--partition P] [--since TIME] [--format table|json] [--validate]``.

One row per vacuum, and per request no vacuum answered yet, rebuilt from the event topics (see
``acidclean.consumers.audit``): whether it was requested, is running or failed, what was compacted,
whether its obsolete directories were cleaned, are still waiting (and for whose locks), are stuck,
or were rejected, and what was removed. Like Hive's SHOW COMPACTIONS, without a retention limit.
``--format json`` prints a JSON array for scripts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

import click

from acidclean.cli import examples, require_extra, table_name
from acidclean.cli.context import command_settings
from acidclean.consumers.audit import AuditRow, read_audit
from acidclean.schemas.common import PARTITION_PATTERN, utc_now

COLUMNS = (
    "TABLE",
    "PARTITION",
    "TYPE",
    "REQUESTED",
    "VACUUM TIME",
    "NEW DIRECTORIES",
    "STATE",
    "ATTEMPTS",
    "WAITED",
    "REMOVED",
    "BYTES FREED",
    "CLEANER",
    "DETAIL",
)
RELATIVE = re.compile(r"^(\d+)([smhd])$")
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_since(text: str, now: datetime) -> datetime:
    """An ISO 8601 date or time (UTC when no zone is given), or an age such as ``90m``, ``2h``, ``7d``."""
    relative = RELATIVE.match(text.strip())
    if relative:
        return now - timedelta(**{UNITS[relative.group(2)]: int(relative.group(1))})
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is neither an ISO 8601 time (2025-03-14, 2025-03-14T09:00:00Z) nor an age (90m, 2h, 7d)"
        ) from None
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)


def format_duration(milliseconds: int | None) -> str:
    if milliseconds is None:
        return "-"
    seconds = milliseconds / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d{hours:02d}h"
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s"


def format_bytes(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{count} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _names(names: Sequence[str], shown: int = 3) -> str:
    if not names:
        return "-"
    more = f" +{len(names) - shown} more" if len(names) > shown else ""
    return ",".join(names[:shown]) + more


def _time(moment: datetime | None) -> str:
    return "-" if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def table_cells(row: AuditRow) -> tuple[str, ...]:
    return (
        row.table or "?",
        row.partition or "-",
        (row.compaction_type or "?") + (f" hive#{row.hive_compaction_id}" if row.hive_compaction_id else ""),
        _time(row.requested_at),
        _time(row.vacuum_time),
        _names(row.new_directories),
        row.state,
        str(row.attempts),
        format_duration(row.time_waited_ms),
        _names(row.directories_removed),
        format_bytes(row.bytes_freed) if row.state == "cleaned" else "-",
        row.cleaner_id or "-",
        row.reason or "",
    )


def _scope(table: str | None, partition: str | None, since_text: str | None) -> str:
    """What an audit was asked about, as words: "of sales.orders partition ds=1 since 2h"."""
    words = [f"of {table}" if table else "of any table"]
    if partition:
        words.append(f"partition {partition}")
    if since_text:
        words.append(f"since {since_text}")
    return " ".join(words)


def render_table(rows: Sequence[AuditRow]) -> str:
    """Rows as aligned text columns under a header line."""
    cells = [COLUMNS, *(table_cells(row) for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in cells
    )


def render_json(rows: Sequence[AuditRow]) -> str:
    """Rows as a JSON array (one object per vacuum, ISO 8601 UTC times)."""
    return json.dumps([row.to_json() for row in rows], indent=2)


@click.command(
    epilog=examples(
        "acidclean audit",
        "acidclean audit sales.orders --partition ds=2026-11-23",
        "acidclean audit sales.orders --since 2h --format json",
        "acidclean audit demo.clicks --plot clicks.png",
        "acidclean audit --validate",
        "acidclean audit --hive-compaction 42",
    )
)
@click.argument("table", required=False, metavar="[DB.TABLE]", callback=table_name)
@click.option("--partition", help="Only this partition, as k=v/k2=v2 (escaped or with the values as they are).")
@click.option("--since", "since_text", metavar="TIME", help="Only vacuums since TIME (ISO 8601, or an age: 2h, 7d).")
@click.option(
    "--hive-compaction",
    "hive_compaction_id",
    type=click.IntRange(min=1),
    help="Only the vacuum that served this entry of Hive's compaction queue (the id SHOW COMPACTIONS prints).",
)
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option(
    "--plot",
    "plot_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Also draw DB.TABLE's timeline (delta directories; requests, runs, vacuums, waits, cleanups) into "
    "this PNG file.",
)
@click.option(
    "--validate",
    is_flag=True,
    help="Decode every record with the event models (slower; the rows are the same: the fast decoder leaves "
    "every record it cannot read exactly to the models).",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    envvar="ACIDCLEAN_CONFIG",
    help="Settings file (.properties or .json); ACIDCLEAN_* variables apply on top.",
)
def audit(
    table: str | None,
    partition: str | None,
    since_text: str | None,
    hive_compaction_id: int | None,
    output_format: str,
    plot_file: Path | None,
    validate: bool,
    config_file: Path | None,
) -> None:
    """Show each vacuum's history, from the event topics.

    One row per vacuum (and per request not yet answered by one): requested, running, failed,
    committed, its waits (and for whose locks), cleanup, rejection or stuck wait, and what was removed.
    """
    if partition is not None and not re.fullmatch(PARTITION_PATTERN, partition):
        raise click.BadParameter(f"{partition!r} is not k=v[/k2=v2...]", param_hint="--partition")
    if plot_file is not None and table is None:
        raise click.UsageError("--plot draws one table's timeline: give DB.TABLE")
    if plot_file is not None:
        require_extra("plot", "acidclean audit --plot")
    since = parse_since(since_text, utc_now()) if since_text else None
    settings = command_settings(config_file)
    rows, reader = read_audit(settings, table=table, partition=partition, since=since, validate=validate)
    if hive_compaction_id is not None:
        rows = [row for row in rows if row.hive_compaction_id == hive_compaction_id]
    for topic in reader.missing_topics:
        click.echo(f"note: topic {topic} does not exist (yet); read as empty", err=True)
    click.echo(render_json(rows) if output_format == "json" else render_table(rows))
    if not rows and output_format == "table":
        click.echo(f"note: no vacuum or request {_scope(table, partition, since_text)} in the event topics", err=True)
    if plot_file is not None and table is not None:
        from acidclean.consumers.plot import draw, read_timeline

        timeline = read_timeline(settings, table, partition)
        draw(timeline, plot_file)
        click.echo(f"timeline of {table} ({len(timeline.marks)} events marked) written to {plot_file}", err=True)
