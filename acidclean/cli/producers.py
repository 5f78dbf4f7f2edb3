"""``acidclean vacuum``, ``create-table``, ``ingest``, ``read`` and ``outbox``: the producer side.

Every command takes ``--config FILE`` (settings file; ``ACIDCLEAN_*`` variables override it).
``vacuum`` exits 0 when it committed and published, 1 when it refused or failed (nothing was
committed), 2 on a usage error and 3 when it committed but could not publish its event (kept in the
outbox for ``acidclean outbox flush``): the exit codes of every command (``acidclean.cli``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from acidclean.cli import EXIT_FAILED, EXIT_NOT_PUBLISHED, examples, require_extra, table_name
from acidclean.cli.context import command_settings
from acidclean.producers.plan import CompactionType, describe_plan, format_bytes
from acidclean.shared.acid.id_lists import MetastoreKind
from acidclean.shared.errors import NothingToCompactError
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.metastore import split_table_name
from acidclean.shared.settings import Settings

if TYPE_CHECKING:  # publish imports the ORC writer (pyorc, the vacuum extra)
    from acidclean.producers.publish import PublishOutcome
    from acidclean.producers.vacuum import VacuumRequest, VacuumResult

_Command = TypeVar("_Command", bound=Callable[..., Any])

config_option = click.option(
    "--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="Settings file."
)

PARTITION_SPELLING = (
    ": escaped, as SHOW PARTITIONS prints it (city=St. John%27s%232), or with its values as they are "
    "(city=St. John's#2)."
)


no_create_topics_option = click.option(
    "--no-create-topics", is_flag=True, help="Only check that the topic exists (provisioned topics, no Create ACL)."
)


def _settings(config_file: Path | None, no_create_topics: bool = False) -> Settings:
    return command_settings(config_file, overrides={"create_topics": False} if no_create_topics else None)


def _metastore(settings: Settings) -> HiveMetastore:
    return HiveMetastore.from_settings(settings)


def _names(names: Sequence[str], limit: int = 6) -> str:
    """Names joined with commas; a long list keeps its ends and says how many are left out."""
    if len(names) <= limit:
        return ", ".join(names) or "(none)"
    return f"{', '.join(names[:2])}, ... {len(names) - 4} more ..., {', '.join(names[-2:])}"


def _info(text: str) -> None:
    click.echo(text, err=True)


def _outcome_line(outcome: PublishOutcome) -> str:
    event = outcome.event
    where = f"{event.table}{' partition ' + event.partition if event.partition else ''}"
    if outcome.delivery is not None:
        delivery = outcome.delivery
        return (
            f"published VacuumCommitted {event.event_id} ({where}: {', '.join(event.new_directories)}) to "
            f"{delivery.topic} [partition {delivery.partition}, offset {delivery.offset}]"
        )
    return (
        f"NOT published: VacuumCommitted {event.event_id} ({where}): {outcome.error}\n"
        f"  the event is kept in {outcome.outbox_path}; `acidclean outbox flush` (or the next vacuum) publishes it"
    )


PUBLISH_TIMEOUT = click.FloatRange(min=0, min_open=True)


@click.command(
    epilog=examples(
        "acidclean vacuum sales.orders --partition ds=2026-11-22 --dry-run",
        "acidclean vacuum sales.orders --partition ds=2026-11-23",
        "acidclean vacuum sales.orders --full",
    )
    + "\n\nExit 0 committed and published, 1 refused or failed (the table is unchanged), 3 committed but "
    "not published (the event waits in the outbox). Of every partition: 1 when one was refused or failed, "
    "or none had anything to compact."
)
@click.argument("table", metavar="DB.TABLE", callback=table_name)
@click.option(
    "--partition",
    metavar="K=V[/K2=V2]",
    help="Vacuum one partition"
    + PARTITION_SPELLING
    + " Without it, a partitioned table has each of its partitions vacuumed in turn, each its own vacuum.",
)
@click.option("--full", is_flag=True, help="MAJOR vacuum (VACUUM TABLE t FULL): base and deltas into base_N.")
@click.option("--dry-run", is_flag=True, help="Print what would be compacted into what; write nothing.")
@click.option(
    "--allow-uncleaned",
    is_flag=True,
    help="Vacuum although an earlier vacuum's obsolete directories are not cleaned yet.",
)
@click.option("--master", help="Spark master (default: spark-submit's, else local[*]).")
@click.option("--outbox", "outbox_dir", type=click.Path(file_okay=False), help="Outbox (default <state_dir>/outbox).")
@click.option(
    "--publish-timeout", type=PUBLISH_TIMEOUT, default=30.0, show_default=True, help="Seconds to wait for Kafka."
)
@no_create_topics_option
@config_option
def vacuum(
    table: str,
    partition: str | None,
    full: bool,
    dry_run: bool,
    allow_uncleaned: bool,
    master: str | None,
    outbox_dir: str | None,
    publish_timeout: float,
    no_create_topics: bool,
    config_file: Path | None,
) -> None:
    """Compact DB.TABLE on Spark and publish VacuumCommitted.

    Compacts the deltas (MINOR, or with --full base and deltas: MAJOR), commits the new directory,
    snapshots the read locks held then, and publishes the event the cleaners act on.
    """
    require_extra("vacuum", "acidclean vacuum")
    from acidclean.producers.publish import Publisher
    from acidclean.producers.table_vacuum import partitions_to_vacuum
    from acidclean.producers.vacuum import VacuumRequest, outbox_for, run_vacuum, spark_session

    settings = _settings(config_file, no_create_topics)
    compaction = CompactionType.MAJOR if full else CompactionType.MINOR
    request = VacuumRequest(table, partition, compaction, dry_run, allow_uncleaned)
    publisher = Publisher(settings, timeout_s=publish_timeout)
    outbox = outbox_for(settings, outbox_dir)
    with _metastore(settings) as metastore:

        def run(one: VacuumRequest) -> VacuumResult:
            return run_vacuum(
                one,
                settings=settings,
                metastore=metastore,
                spark=lambda: spark_session(master, f"acidclean-vacuum {table}"),  # one session for all
                publisher=publisher,
                outbox=outbox,
                progress=_info,
            )

        partitions = partitions_to_vacuum(metastore, table) if partition is None else None
        if partitions is not None:
            _vacuum_every_partition(request, partitions, run, metastore.kind)
            return
        result = run(request)
        kind = metastore.kind
    published = _report_vacuum(result, kind)
    if dry_run:
        click.echo("dry run: nothing written")
    if not published:
        sys.exit(EXIT_NOT_PUBLISHED)


def _report_vacuum(result: VacuumResult, kind: MetastoreKind) -> bool:
    """Print what one vacuum did; False when it committed and its event waits in the outbox."""
    for outcome in result.earlier:
        click.echo(f"earlier vacuum: {_outcome_line(outcome)}")
    for staging in result.removed_staging:
        click.echo(f"removed {staging}: the staging directory of a vacuum that died while writing")
    plan = result.plan
    if result.status == "dry-run":
        click.echo("\n".join(describe_plan(plan, kind)))
        return True
    if result.status == "already-committed":
        click.echo(f"{plan.table}: {', '.join(result.new_directories)} already committed; nothing to do")
        return True
    click.echo(
        f"committed {plan.compaction_type.value} vacuum of {plan.table}"
        f"{' partition ' + plan.partition if plan.partition else ''}: {', '.join(result.new_directories)}"
    )
    click.echo(
        f"  compacted {_names(plan.inputs)} ({plan.input_files} files, {format_bytes(result.bytes_read)})"
        f" in {result.seconds:.1f} s: {result.rows_written} rows and {result.deletes_written} delete events in "
        f"{result.files_written} files, {format_bytes(result.bytes_written)}"
    )
    click.echo(f"  obsolete now: {_names(plan.obsolete_after)}")
    if result.overlapping_directories:
        click.echo(
            f"  late commit: {_names(result.overlapping_directories)} of another vacuum hold rows of the same write "
            "ids, which readers now read twice; the event says so and nothing is deleted for it (docs/safety.md)"
        )
    assert result.publish is not None
    locks = result.publish.event.lock_snapshot
    click.echo(f"  lock snapshot: {len(locks)} lock(s)" + "".join(f"\n    {lock.describe()}" for lock in locks))
    click.echo(_outcome_line(result.publish))
    return result.publish.published


def _vacuum_every_partition(
    request: VacuumRequest,
    partitions: Sequence[str],
    run: Callable[[VacuumRequest], VacuumResult],
    kind: MetastoreKind,
) -> None:
    """``vacuum DB.TABLE`` of a partitioned table: each partition in turn, as ``--partition`` would
    (:mod:`acidclean.producers.table_vacuum`), then one line for the whole table. Exit 1 when a
    partition was refused or failed, or when no partition had anything to compact; else 3 when an
    event waits in the outbox."""
    from acidclean.producers.table_vacuum import summarize, vacuum_each_partition

    if not partitions:
        raise NothingToCompactError(f"nothing to compact in {request.table}: it is partitioned and has no partition")
    _info(f"{request.table}: {len(partitions)} partition(s), vacuumed one at a time")
    outcomes = []
    all_published = True
    for outcome in vacuum_each_partition(request, partitions, run):
        outcomes.append(outcome)
        if outcome.result is not None:
            all_published = _report_vacuum(outcome.result, kind) and all_published
        elif outcome.skipped is not None:
            click.echo(f"skipped: {outcome.skipped}")
        else:
            click.echo(f"not vacuumed: partition {outcome.partition}: {outcome.failed}")
    summary = summarize(outcomes)
    counts = [
        f"{summary.planned} would be vacuumed" if request.dry_run else f"{summary.committed} vacuumed",
        f"{summary.nothing_to_do} with nothing to compact",
    ]
    if summary.failed:
        counts.append(f"{len(summary.failed)} not vacuumed ({_names(summary.failed)})")
    click.echo(f"{request.table}: {len(partitions)} partition(s): {', '.join(counts)}")
    if request.dry_run:
        click.echo("dry run: nothing written")
    if summary.failed:
        sys.exit(EXIT_FAILED)
    if all(outcome.skipped is not None for outcome in outcomes):
        raise NothingToCompactError(
            f"nothing to compact in any of the {len(partitions)} partition(s) of {request.table}"
        )
    if not all_published:
        sys.exit(EXIT_NOT_PUBLISHED)


def _partition_column(text: str | None) -> list[tuple[str, str]]:
    if not text:
        return []
    name, _, hive_type = text.strip().partition(" ")
    return [(name.lower(), hive_type.strip().lower() or "string")]


@click.command(
    "create-table",
    epilog=examples(
        'acidclean create-table sales.orders --columns "id int, amount double, note string" --buckets 2 '
        "--partitioned-by ds"
    ),
)
@click.argument("table", metavar="DB.TABLE", callback=table_name)
@click.option("--columns", required=True, help='Columns, e.g. "id int, v string".')
@click.option(
    "--buckets", type=click.IntRange(min=1), default=1, show_default=True, help="Buckets (on the first column)."
)
@click.option("--partitioned-by", metavar="COL [TYPE]", help="Partition column (type string by default).")
@click.option("--orc-compress", default="ZLIB", show_default=True, help="Table property orc.compress.")
@config_option
def create_table(
    table: str, columns: str, buckets: int, partitioned_by: str | None, orc_compress: str, config_file: Path | None
) -> None:
    """Create a transactional, bucketed ORC table.

    In the metastore, with its directory under the warehouse.
    """
    require_extra("vacuum", "acidclean create-table")
    from acidclean.producers.hive_types import parse_columns
    from acidclean.producers.ingest import create_table as create

    db, name = split_table_name(table)
    parsed = parse_columns(columns)
    with _metastore(_settings(config_file)) as metastore:
        info = create(
            metastore,
            db,
            name,
            parsed,
            buckets=buckets,
            partitioned_by=_partition_column(partitioned_by),
            orc_compress=orc_compress.upper(),
        )
    partitioning = f", partitioned by {', '.join(info.partition_keys)}" if info.partition_keys else ""
    click.echo(
        f"created transactional table {info.db}.{info.table} ({', '.join(f'{n} {t}' for n, t in info.columns)}): "
        f"{info.bucket_count} buckets on {', '.join(info.bucket_columns)}{partitioning}, ORC {info.orc_compress}, "
        f"at {info.location}"
    )


@click.command(
    epilog=examples(
        "acidclean ingest sales.orders --partition ds=2026-11-22 --rows 500 --commits 3 --delete-fraction 0.1"
    )
)
@click.argument("table", metavar="DB.TABLE", callback=table_name)
@click.option("--rows", type=click.IntRange(min=0), required=True, help="Rows each commit inserts.")
@click.option("--commits", type=click.IntRange(min=1), default=1, show_default=True, help="Transactions to commit.")
@click.option(
    "--delete-fraction",
    type=click.FloatRange(0, 1),
    default=0.0,
    show_default=True,
    help="Each commit also deletes this fraction of the rows it sees.",
)
@click.option("--partition", metavar="K=V[/K2=V2]", help="The partition to write (created if missing).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the generated values.")
@click.option("--publish/--no-publish", default=True, show_default=True, help="Publish DeltaCommitted.")
@no_create_topics_option
@config_option
def ingest(
    table: str,
    rows: int,
    commits: int,
    delete_fraction: float,
    partition: str | None,
    seed: int,
    publish: bool,
    no_create_topics: bool,
    config_file: Path | None,
) -> None:
    """Commit deltas to DB.TABLE, as streaming ingest does.

    Each commit opens a transaction, takes a SHARED_WRITE lock, writes a delta (and a delete delta),
    commits, and publishes DeltaCommitted.
    """
    require_extra("vacuum", "acidclean ingest")
    from acidclean.producers.ingest import CommitResult, IngestRequest
    from acidclean.producers.ingest import ingest as run_ingest
    from acidclean.shared.bus.kafka_errors import KafkaAccessDeniedError, KafkaTopicMissingError
    from acidclean.shared.bus.producer import KafkaEventBus
    from acidclean.shared.bus.topics import ensure_topics
    from acidclean.shared.errors import AcidCleanError, ConfigurationError

    settings = _settings(config_file, no_create_topics)
    db, name = split_table_name(table)
    bus = None
    if publish:
        try:
            ensure_topics(settings, ["delta_committed"], timeout_s=10.0)
            bus = KafkaEventBus(
                settings.kafka, source="/acidclean/ingest", delivery_timeout_s=10.0, total_timeout_s=10.0
            )
        except (ConfigurationError, KafkaAccessDeniedError, KafkaTopicMissingError):
            raise  # a wrong setting, ACL or topic: fix it first, nothing was written
        except AcidCleanError as error:
            _info(f"warning: DeltaCommitted events will not be published: {error}")

    def report(result: CommitResult) -> None:
        parts = [f"{result.delta} ({result.rows} rows)"] if result.delta else []
        if result.delete_delta:
            parts.append(f"{result.delete_delta} ({result.deletes} deletes)")
        published = " (DeltaCommitted published)" if result.published else ""
        click.echo(
            f"committed write id {result.write_id} (txn {result.txn_id}): {', '.join(parts) or 'nothing'}, "
            f"{format_bytes(result.bytes)}{published}"
        )
        if result.publish_error:
            _info(f"warning: DeltaCommitted not published: {result.publish_error}")

    with _metastore(settings) as metastore:
        run_ingest(
            metastore,
            IngestRequest(db, name, rows, commits, delete_fraction, partition, seed),
            bus=bus,
            topic=settings.topic("delta_committed"),
            tenant=settings.tenant,
            on_commit=report,
        )


@click.command(
    epilog=examples(
        "acidclean read sales.orders --partition ds=2026-11-22 --count",
        "acidclean read sales.orders --partition ds=2026-11-22 --hold 60",
    )
)
@click.argument("table", metavar="DB.TABLE", callback=table_name)
@click.option(
    "--partition",
    metavar="K=V[/K2=V2]",
    help="Read one partition"
    + PARTITION_SPELLING
    + " Without it, a partitioned table is read whole (every partition).",
)
@click.option(
    "--hold",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Seconds to keep the read lock after reading.",
)
@click.option("--count", "count_only", is_flag=True, help="Print only the number of rows.")
@click.option("--with-row-id", is_flag=True, help="Also print originalTransaction, bucket, rowId, currentTransaction.")
@config_option
def read(
    table: str, partition: str | None, hold: float, count_only: bool, with_row_id: bool, config_file: Path | None
) -> None:
    """Lock DB.TABLE for reading, then list and read it.

    The SHARED_READ lock comes first, then the listing; the rows are printed as JSON lines. The lock
    is released on exit, Ctrl-C included.
    """
    from acidclean.producers.reader import hold as hold_lock
    from acidclean.producers.reader import locked_read

    db, name = split_table_name(table)
    with (
        _metastore(_settings(config_file)) as metastore,
        locked_read(metastore, db, name, partition, with_row_id=with_row_id) as snapshot,
    ):
        _info(
            f"lock {snapshot.lock_id} (SHARED_READ, txn {snapshot.txn_id}) acquired; read "
            f"{', '.join(snapshot.directories) or 'no directories'}: {snapshot.rows.num_rows} rows"
        )
        if count_only:
            click.echo(snapshot.rows.num_rows)
        else:
            for row in snapshot.rows.to_pylist():
                click.echo(json.dumps(row, default=str))
        if hold:
            _info(f"holding lock {snapshot.lock_id} for {hold:g} s")
            sys.stdout.flush()
            hold_lock(metastore, snapshot.txn_id, hold)
    _info(f"released lock {snapshot.lock_id}")


@click.group(epilog=examples("acidclean outbox list", "acidclean outbox flush"))
def outbox() -> None:
    """Events a vacuum committed but Kafka did not take.

    VacuumCommitted events not yet acknowledged by Kafka, kept in <state_dir>/outbox.
    """


@outbox.command("flush", epilog=examples("acidclean outbox flush", "acidclean outbox flush --publish-timeout 60"))
@click.option("--outbox", "outbox_dir", type=click.Path(file_okay=False), help="Outbox (default <state_dir>/outbox).")
@click.option(
    "--publish-timeout", type=PUBLISH_TIMEOUT, default=30.0, show_default=True, help="Seconds to wait for Kafka."
)
@config_option
def outbox_flush(outbox_dir: str | None, publish_timeout: float, config_file: Path | None) -> None:
    """Publish every event left in the outbox.

    Exit 0 when all were published, 3 when some still cannot be (they stay in the outbox).
    """
    from acidclean.producers.outbox import outbox_for
    from acidclean.producers.publish import Publisher, flush_outbox

    settings = _settings(config_file)
    box = outbox_for(settings, outbox_dir)
    with _metastore(settings) as metastore:
        report = flush_outbox(box, metastore, Publisher(settings, timeout_s=publish_timeout))
    for outcome in report.published + report.failed:
        click.echo(_outcome_line(outcome))
    for event_id in report.dropped:
        click.echo(f"dropped draft {event_id}: its vacuum never committed")
    for event_id in report.waiting:
        click.echo(
            f"kept draft {event_id}: its commit is not decided yet (a transaction still open, or a commit marker "
            "the table's next vacuum finishes under its vacuum lock)"
        )
    for event_id in report.skipped:
        click.echo(f"kept {event_id}: it could not be handled now (see the log line above); tried again next time")
    click.echo(f"{len(report.published)} published, {len(report.failed)} still pending in {box.directory}")
    if report.failed or report.skipped:
        sys.exit(EXIT_NOT_PUBLISHED)


@outbox.command("list", epilog=examples("acidclean outbox list"))
@click.option("--outbox", "outbox_dir", type=click.Path(file_okay=False), help="Outbox (default <state_dir>/outbox).")
@config_option
def outbox_list(outbox_dir: str | None, config_file: Path | None) -> None:
    """List the events waiting in the outbox."""
    from acidclean.producers.outbox import outbox_for

    box = outbox_for(_settings(config_file), outbox_dir)
    entries = box.entries()
    for entry in entries:
        draft = entry.draft
        where = draft["table"] + (f"/{draft['partition']}" if draft["partition"] else "")
        error = f" (last error: {entry.last_error})" if entry.last_error else ""
        click.echo(f"{entry.event_id} {entry.state} {where} {', '.join(draft['new_directories'])}{error}")
    click.echo(f"{len(entries)} event(s) in {box.directory}")
