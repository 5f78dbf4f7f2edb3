"""``acidclean acid-state`` and ``acidclean scan``: Hive's ACID rules and snapshot reader on a directory.

Both take a table or partition directory (local path, ``file:``, ``hdfs://``, ``s3://``) and the
snapshot as flags. Without ``--high-watermark`` every id in the listing counts as committed. Their
output is a contract other tools parse: ``acid-state`` prints one JSON object, ``scan`` prints rows
as JSON lines (the default) or CSV, or their count.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.fs as pafs

from acidclean.cli import examples
from acidclean.shared.acid.names import is_hidden, parse_directory_name
from acidclean.shared.acid.state import AcidState, Listing
from acidclean.shared.acid.state import acid_state as compute_acid_state
from acidclean.shared.acid.write_ids import (
    ValidCleanerTxnList,
    ValidCleanerWriteIdList,
    ValidIdList,
    ValidTxnList,
    ValidWriteIdList,
)
from acidclean.shared.orc.reader import list_table_dir, read_state
from acidclean.shared.storage import open_location


def _ids(value: str | None) -> list[int]:
    if not value:
        return []
    try:
        ids = [int(part) for part in value.split(",") if part.strip()]
    except ValueError as error:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of ids") from error
    if any(id_ < 1 for id_ in ids):
        raise click.BadParameter(f"{value!r}: ids start at 1")
    return ids


@dataclass(frozen=True)
class _SnapshotFlags:
    high_watermark: int | None
    open_ids: list[int]
    aborted_ids: list[int]
    min_open_write_id: int | None
    cleaner: bool
    valid_txns: str | None
    hive2: bool = False


def _snapshot_options(command: Callable[..., None]) -> Callable[..., None]:
    """Add the snapshot flags both commands share; the command receives them as ``snapshot``."""

    @functools.wraps(command)
    def with_snapshot(
        *args: Any,
        high_watermark: int | None,
        open_ids: str | None,
        aborted_ids: str | None,
        min_open_write_id: int | None,
        cleaner: bool,
        valid_txns: str | None,
        hive2: bool,
        **kwargs: Any,
    ) -> None:
        flags = _SnapshotFlags(
            high_watermark, _ids(open_ids), _ids(aborted_ids), min_open_write_id, cleaner, valid_txns, hive2
        )
        command(*args, snapshot=flags, **kwargs)

    options = [
        click.option(
            "--high-watermark",
            type=click.IntRange(min=0),
            help="Highest write id of the snapshot (default: the listing's).",
        ),
        click.option("--open", "open_ids", metavar="IDS", help="Open write ids, comma-separated."),
        click.option("--aborted", "aborted_ids", metavar="IDS", help="Aborted write ids, comma-separated."),
        click.option("--min-open-write-id", type=click.IntRange(min=1), help="Default: the smallest open id."),
        click.option("--cleaner", is_flag=True, help="Use the cleaner list: nothing above the watermark counts."),
        click.option(
            "--valid-txns",
            metavar="LIST",
            help="Hive ValidTxnList (hwm:minOpen:open:aborted) deciding which _vT directories are visible "
            "(default: all).",
        ),
        click.option(
            "--hive2",
            is_flag=True,
            help="The names carry Hive 2 transaction ids (a Hive 2.x metastore): Hive 2's rules, where every base "
            "is a compactor's and is read only below the lowest open transaction.",
        ),
    ]
    decorated: Callable[..., None] = with_snapshot
    for option in reversed(options):
        decorated = option(decorated)
    return decorated


def _highest_write_id_in(listing: Listing) -> int:
    highest = 0
    for name in {entry.partition("/")[0] for entry in listing.directories}:
        parsed = None if is_hidden(name) else parse_directory_name(name)
        if parsed is not None:
            highest = max(highest, parsed.max_write_id)
    return highest


@dataclass(frozen=True)
class _Loaded:
    fs: pafs.FileSystem
    listing: Listing
    valid_ids: ValidIdList
    state: AcidState


def _load(directory: str, flags: _SnapshotFlags) -> _Loaded:
    """List the directory and compute its state for the snapshot the flags describe."""
    location = open_location(directory)
    listing = list_table_dir(location.fs.arrow, location.path)
    high_watermark = flags.high_watermark
    if high_watermark is None:
        high_watermark = max([_highest_write_id_in(listing), *flags.open_ids, *flags.aborted_ids])
    kind: type[ValidIdList]
    if flags.hive2:
        kind = ValidCleanerTxnList if flags.cleaner else ValidTxnList
    else:
        kind = ValidCleanerWriteIdList if flags.cleaner else ValidWriteIdList
    valid_ids = kind.from_ids(
        high_watermark, flags.open_ids, flags.aborted_ids, min_open_write_id=flags.min_open_write_id
    )
    valid_txns = ValidTxnList.from_string(flags.valid_txns) if flags.valid_txns else None
    return _Loaded(location.fs.arrow, listing, valid_ids, compute_acid_state(listing, valid_ids, valid_txns))


@click.command(
    "acid-state",
    epilog=examples("acidclean acid-state stack-warehouse/sales.db/orders/ds=2026-11-23 --high-watermark 18 --open 19"),
)
@click.argument("directory")
@_snapshot_options
def acid_state(directory: str, snapshot: _SnapshotFlags) -> None:
    """Print a directory's ACID state as one JSON object.

    What a snapshot of DIRECTORY (a table or partition directory: a path, file:, hdfs://, s3://)
    reads, and what is obsolete or aborted, by Hive's rules.
    """
    state = _load(directory, snapshot).state
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


@click.command(
    "scan",
    epilog=examples(
        "acidclean scan stack-warehouse/sales.db/orders/ds=2026-11-22",
        "acidclean scan stack-warehouse/sales.db/orders/ds=2026-11-22 --count",
        "acidclean scan stack-warehouse/sales.db/orders/ds=2026-11-22 --format csv --with-row-id --columns id,amount",
    ),
)
@click.argument("directory")
@_snapshot_options
@click.option("--columns", metavar="A,B", help="Row columns to print (default: all).")
@click.option("--with-row-id", is_flag=True, help="Also print originalTransaction, bucket, rowId, currentTransaction.")
@click.option("--count", "count_only", is_flag=True, help="Print only the number of visible rows.")
@click.option(
    "--format", "output_format", type=click.Choice(["jsonl", "csv"]), help="Print the rows so.  [default: jsonl]"
)
def scan(
    directory: str,
    snapshot: _SnapshotFlags,
    columns: str | None,
    with_row_id: bool,
    count_only: bool,
    output_format: str | None,
) -> None:
    """Print the rows of DIRECTORY a snapshot sees.

    As JSON lines (the default), CSV (--format csv), or only their number (--count).
    """
    if count_only and output_format is not None:
        raise click.UsageError("give one of --count and --format, not both")
    loaded = _load(directory, snapshot)
    selected = [c.strip() for c in columns.split(",") if c.strip()] if columns else None
    rows = read_state(
        loaded.fs, loaded.listing, loaded.state, loaded.valid_ids, columns=selected, with_row_id=with_row_id
    )
    if count_only:
        click.echo(rows.num_rows)
    else:
        _print_rows(rows, output_format or "jsonl")
