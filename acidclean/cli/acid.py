"""``acidclean acid-state`` and ``acidclean scan``: Hive's ACID rules and snapshot reader on a directory.

Both take a table or partition directory (local path, ``file:``, ``hdfs://``, ``s3://``) and the
snapshot as flags. Without ``--high-watermark`` every id in the listing counts as committed. Their
output is a contract other tools parse: ``acid-state`` prints one JSON object, ``scan`` prints rows
as JSON lines or CSV, or their count.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click
import pyarrow as pa
import pyarrow.csv as pa_csv

from acidclean.shared.acid.names import is_hidden, parse_directory_name
from acidclean.shared.acid.reader import list_table_dir, read_state
from acidclean.shared.acid.state import Listing
from acidclean.shared.acid.state import acid_state as compute_acid_state
from acidclean.shared.acid.write_ids import ValidCleanerWriteIdList, ValidIdList, ValidTxnList, ValidWriteIdList
from acidclean.shared.filesystem import open_location

_Command = TypeVar("_Command", bound=Callable[..., Any])


def _ids(value: str | None) -> list[int]:
    if not value:
        return []
    try:
        return [int(part) for part in value.split(",") if part.strip()]
    except ValueError as error:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of ids") from error


def _snapshot_options(command: _Command) -> _Command:
    options = [
        click.option("--high-watermark", type=int, help="Highest write id of the snapshot (default: the listing's)."),
        click.option("--open", "open_ids", metavar="IDS", help="Open write ids, comma-separated."),
        click.option("--aborted", "aborted_ids", metavar="IDS", help="Aborted write ids, comma-separated."),
        click.option("--min-open-write-id", type=int, help="Default: the smallest open id."),
        click.option("--cleaner", is_flag=True, help="Use the cleaner list: nothing above the watermark counts."),
        click.option(
            "--valid-txns",
            metavar="LIST",
            help="Hive ValidTxnList (hwm:minOpen:open:aborted) deciding which _vT directories are visible "
            "(default: all).",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _highest_write_id_in(listing: Listing) -> int:
    highest = 0
    for name in {entry.partition("/")[0] for entry in listing.directories}:
        parsed = None if is_hidden(name) else parse_directory_name(name)
        if parsed is not None:
            highest = max(highest, parsed.max_write_id)
    return highest


def _snapshot(
    listing: Listing,
    high_watermark: int | None,
    open_ids: str | None,
    aborted_ids: str | None,
    min_open_write_id: int | None,
    cleaner: bool,
) -> ValidIdList:
    opened, aborted = _ids(open_ids), _ids(aborted_ids)
    if high_watermark is None:
        high_watermark = max([_highest_write_id_in(listing), *opened, *aborted])
    kind = ValidCleanerWriteIdList if cleaner else ValidWriteIdList
    return kind.from_ids(high_watermark, opened, aborted, min_open_write_id=min_open_write_id)


def _txns(valid_txns: str | None) -> ValidTxnList | None:
    return ValidTxnList.from_string(valid_txns) if valid_txns else None


@click.command("acid-state")
@click.argument("directory")
@_snapshot_options
def acid_state(
    directory: str,
    high_watermark: int | None,
    open_ids: str | None,
    aborted_ids: str | None,
    min_open_write_id: int | None,
    cleaner: bool,
    valid_txns: str | None,
) -> None:
    """Print what a snapshot of DIRECTORY reads and what is obsolete, as one JSON object."""
    location = open_location(directory)
    listing = list_table_dir(location.fs.arrow, location.path)
    valid_ids = _snapshot(listing, high_watermark, open_ids, aborted_ids, min_open_write_id, cleaner)
    state = compute_acid_state(listing, valid_ids, _txns(valid_txns))
    click.echo(
        json.dumps(
            {
                "base": state.base.name if state.base else None,
                "deltas": [delta.name for delta in state.deltas],
                "obsolete": sorted(state.obsolete),
                "aborted": sorted(state.aborted),
                "original_files": sorted(f.path for f in state.original_files),
            }
        )
    )


def _print_rows(rows: pa.Table, output_format: str) -> None:
    if output_format == "csv":
        sink = pa.BufferOutputStream()
        pa_csv.write_csv(rows, sink)
        click.echo(sink.getvalue().to_pybytes(), nl=False)
        return
    for batch in rows.to_batches():
        for row in batch.to_pylist():
            # Dates, timestamps and decimals are printed as their string form.
            click.echo(json.dumps(row, default=str))


@click.command("scan")
@click.argument("directory")
@_snapshot_options
@click.option("--columns", metavar="A,B", help="Row columns to print (default: all).")
@click.option("--with-row-id", is_flag=True, help="Also print originalTransaction, bucket, rowId, currentTransaction.")
@click.option("--count", "count_only", is_flag=True, help="Print only the number of visible rows.")
@click.option("--format", "output_format", type=click.Choice(["jsonl", "csv"]), help="Print the rows.")
def scan(
    directory: str,
    high_watermark: int | None,
    open_ids: str | None,
    aborted_ids: str | None,
    min_open_write_id: int | None,
    cleaner: bool,
    valid_txns: str | None,
    columns: str | None,
    with_row_id: bool,
    count_only: bool,
    output_format: str | None,
) -> None:
    """Print the rows of DIRECTORY a snapshot sees (--format jsonl|csv) or their number (--count)."""
    if count_only == (output_format is not None):
        raise click.UsageError("give exactly one of --count and --format")
    location = open_location(directory)
    fs = location.fs.arrow
    listing = list_table_dir(fs, location.path)
    valid_ids = _snapshot(listing, high_watermark, open_ids, aborted_ids, min_open_write_id, cleaner)
    state = compute_acid_state(listing, valid_ids, _txns(valid_txns))
    selected = [c.strip() for c in columns.split(",") if c.strip()] if columns else None
    rows = read_state(fs, listing, state, valid_ids, columns=selected, with_row_id=with_row_id)
    if count_only:
        click.echo(rows.num_rows)
    else:
        assert output_format is not None
        _print_rows(rows, output_format)
