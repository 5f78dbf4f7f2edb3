"""The vacuum job: compact one Hive ACID table or partition on Spark, commit, snapshot locks, publish.

Steps (docs/design.md sections 2 and 7):

1. publish what earlier runs left in the outbox, and finish any commit a crash interrupted;
2. look the table or partition up in the metastore and refuse, saying why, anything that is not a
   transactional table or has nothing to compact (:mod:`.plan` decides, from the directory listing
   and the metastore's valid id list, compacting only ids below the lowest open one);
3. run one Spark task per bucket (:mod:`.compact`: pyarrow inside the executors), writing under a
   hidden ``_tmp_acidclean_<job>`` staging directory;
4. rename the new directories into place (:mod:`.commit`), then snapshot the locks held on the
   table or partition, then publish ``VacuumCommitted`` and wait for Kafka's acknowledgement; if
   that fails the event stays in the outbox and the result says so (:mod:`.publish`).

A vacuum that dies before its rename leaves only the staging directory, which readers ignore.
A re-run whose target directories already exist does nothing.

Run it as ``acidclean vacuum DB.TABLE [--partition P] [--full] [--dry-run]``, or with spark-submit
(``spark-submit .../acidclean/__main__.py vacuum DB.TABLE ...``, the same command line as
``acidclean``; ``deploy/production/vacuum-spark-submit.sh``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acidclean.producers.acid_files import orc_codec
from acidclean.producers.commit import (
    CommitCollision,
    commit,
    finish_directories,
    recover_commits,
    remove_abandoned_staging,
    staging_name,
    write_vacuum_markers,
)
from acidclean.producers.commit_mode import CommitMode, choose_commit_mode
from acidclean.producers.compact import BucketResult, bucket_tasks, input_row_type, needs_row_type
from acidclean.producers.exclusion import ExclusionSettings, VacuumLock, exclusive_vacuum, register_vacuum_txn
from acidclean.producers.late_commit import overlapping_outputs
from acidclean.producers.outbox import Outbox
from acidclean.producers.outbox import outbox_for as outbox_for  # where callers have imported it from
from acidclean.producers.plan import (
    CompactionPlan,
    CompactionType,
    format_bytes,
    pending_cleanup,
    plan_compaction,
    with_visibility_txn,
)
from acidclean.producers.publish import (
    FlushReport,
    Publisher,
    PublishOutcome,
    complete_event,
    flush_outbox,
    publish_committed,
)
from acidclean.producers.shared_locations import describe_sharers, shared_vacuum_locks, sharers_of
from acidclean.producers.spark_daemon import DAEMON_CONF
from acidclean.producers.spark_tasks import Progress, quiet, run_bucket_tasks, task_error_message
from acidclean.producers.table_identity import DRAFT_KEY as IDENTITY_KEY
from acidclean.producers.table_identity import fence_on_identity, planned_identity, to_draft
from acidclean.schemas.common import SharedLocation
from acidclean.schemas.events import VacuumCommitted
from acidclean.shared.acid.write_ids import ValidTxnList
from acidclean.shared.errors import (
    AcidCleanError,
    MetastoreError,
    TableNotFoundError,
    VacuumError,
    VacuumFencedError,
    VacuumRefusedError,
)
from acidclean.shared.metastore import Metastore, TableIdentity, TableInfo, partition_name, split_table_name
from acidclean.shared.orc.reader import list_table_dir
from acidclean.shared.settings import Settings
from acidclean.shared.storage import StorageLocation, location_scheme, open_location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class VacuumRequest:
    table: str  # db.table
    partition: str | None = None
    compaction_type: CompactionType = CompactionType.MINOR
    dry_run: bool = False
    allow_uncleaned: bool = False  # vacuum although an earlier vacuum's cleanup has not run yet
    request_id: str | None = None  # the VacuumRequested this vacuum answers (the vacuum service sets it)


@dataclass(frozen=True)
class VacuumResult:
    """What a vacuum did. ``status`` is ``committed``, ``dry-run`` or ``already-committed``."""

    status: str
    plan: CompactionPlan
    new_directories: tuple[str, ...] = ()
    rows_written: int = 0
    deletes_written: int = 0
    files_written: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    task_seconds: float = 0.0  # the bucket tasks' own time, summed (the rest of ``seconds`` is not theirs)
    job_id: str | None = None
    publish: PublishOutcome | None = None
    earlier: list[PublishOutcome] = field(default_factory=list)  # events of earlier runs published now
    removed_staging: tuple[str, ...] = ()  # staging directories of vacuums that died while writing
    commit_mode: CommitMode = CommitMode.RENAME
    visibility_txn_id: int | None = None  # the transaction that committed a visibility-txn vacuum
    overlapping_directories: tuple[str, ...] = ()  # another vacuum's output over the same ids (a late commit)


def lookup_table(metastore: Metastore, table: str, partition: str | None) -> TableInfo:
    """The table or partition, or a refusal naming what is wrong with it."""
    db, name = split_table_name(table)
    partition = partition_name(partition)
    try:
        info = metastore.get_table(db, name)
    except TableNotFoundError as error:
        raise VacuumRefusedError(f"table {db}.{name} does not exist in the metastore ({error})") from error
    if not info.transactional:
        raise VacuumRefusedError(
            f"{db}.{name} is not a transactional table (TBLPROPERTIES transactional=true is not set): only "
            "Hive ACID tables have deltas to compact"
        )
    if info.parameters.get("transactional_properties", "").lower() == "insert_only":
        raise VacuumRefusedError(f"{db}.{name} is an insert-only ACID table, which this vacuum does not compact")
    if info.partition_keys and partition is None:
        raise VacuumRefusedError(
            f"{db}.{name} is partitioned by {', '.join(info.partition_keys)}: vacuum one partition at a time "
            f"(--partition {'/'.join(k + '=...' for k in info.partition_keys)})"
        )
    if partition is not None and not info.partition_keys:
        raise VacuumRefusedError(f"{db}.{name} is not partitioned, so it has no partition {partition}")
    if partition is None:
        return info
    try:
        return metastore.get_table(db, name, partition)
    except TableNotFoundError as error:
        raise VacuumRefusedError(f"{db}.{name} has no partition {partition} ({error})") from error


def _draft(
    plan: CompactionPlan,
    settings: Settings,
    location: StorageLocation,
    new_directories: list[str],
    job_id: str,
    staging: str | None,
    visibility_txn_id: int | None = None,
    request_id: str | None = None,
    identity: TableIdentity | None = None,
) -> dict[str, Any]:
    draft: dict[str, Any] = {
        "event_id": str(uuid.uuid4()),
        "tenant": settings.tenant,
        "table": plan.table,
        "partition": plan.partition,
        "location": location.uri,
        "compaction_type": plan.compaction_type.value,
        "new_directories": new_directories,
        "obsolete_directories": list(plan.obsolete_after),
        "highest_write_id": plan.highest_write_id,
        "vacuum_job_id": job_id,
        "staging_dir": staging,
    }
    if visibility_txn_id is not None:
        draft["visibility_txn_id"] = visibility_txn_id
    if request_id is not None:
        draft["request_id"] = request_id
    if identity is not None:
        draft[IDENTITY_KEY] = to_draft(identity)
    return draft


def _publish_earlier(
    location: StorageLocation, metastore: Metastore, publisher: Publisher, outbox: Outbox
) -> list[PublishOutcome]:
    """Finish commits a crash interrupted in this location and publish their events."""
    outcomes = []
    for recovered in recover_commits(location.fs.arrow, location.path):
        event = complete_event(recovered.draft, metastore)
        outcomes.append(publish_committed(recovered.draft, event, publisher, outbox))
    return outcomes


def run_vacuum(
    request: VacuumRequest,
    *,
    settings: Settings,
    metastore: Metastore,
    spark: Callable[[], SparkSession],
    publisher: Publisher | None = None,
    outbox: Outbox | None = None,
    progress: Progress = quiet,
) -> VacuumResult:
    """Vacuum one table or partition (see the module docstring). ``spark`` is called only when there
    is something to compact. Raises :class:`VacuumRefusedError` when there is nothing to do and
    :class:`VacuumError` when the compaction fails (the table is then unchanged)."""
    publisher = publisher or Publisher(settings)
    outbox = outbox or outbox_for(settings)
    earlier: list[PublishOutcome] = []
    if not request.dry_run:
        flushed: FlushReport = flush_outbox(outbox, metastore, publisher)
        earlier = flushed.published + flushed.failed

    info = lookup_table(metastore, request.table, request.partition)
    db, table = split_table_name(request.table)
    if request.dry_run:
        return _plan_and_vacuum(request, settings, metastore, info, spark, publisher, outbox, progress, earlier, None)
    # One vacuum per directory at a time, on any host, whichever of its names it was asked for (rule 8);
    # the loser writes nothing at all.
    sharers = sharers_of(metastore, info)
    also, where_also = shared_vacuum_locks(sharers), describe_sharers(sharers)
    exclusion = exclusion_settings(settings)
    with exclusive_vacuum(metastore, db, table, info.partition, exclusion, also, where_also) as held:
        return _plan_and_vacuum(
            request, settings, metastore, info, spark, publisher, outbox, progress, earlier, held, sharers
        )


def exclusion_settings(settings: Settings) -> ExclusionSettings:
    return ExclusionSettings(wait_s=settings.vacuum_lock_wait_s, stale_s=settings.vacuum_lock_stale_s)


def _plan_and_vacuum(
    request: VacuumRequest,
    settings: Settings,
    metastore: Metastore,
    info: TableInfo,
    spark: Callable[[], SparkSession],
    publisher: Publisher,
    outbox: Outbox,
    progress: Progress,
    earlier: list[PublishOutcome],
    held: VacuumLock | None,
    sharers: Sequence[SharedLocation] = (),
) -> VacuumResult:
    location = open_location(info.location)
    mode = choose_commit_mode(
        settings.vacuum_commit,
        metastore.kind,
        location_scheme(location.uri),
        location.uri,
        hive_version=getattr(metastore, "major_version", None),
        v_readers_acknowledged=settings.vacuum_visibility_txn_on_hive3,
    )
    removed_staging: tuple[str, ...] = ()
    identity: TableIdentity | None = None
    if not request.dry_run:
        refuse_while_hive_compacts(metastore, info, sharers)
        # Which table this vacuum compacts, read before it lists the directory (rule 9).
        identity = planned_identity(metastore, info, held.metastore_now_ms) if held is not None else None
        earlier = earlier + _publish_earlier(location, metastore, publisher, outbox)
        removed_staging = tuple(
            remove_abandoned_staging(location.fs.arrow, location.path, settings.abandoned_staging_s)
        )

    db, table = split_table_name(request.table)
    valid_ids_text = metastore.valid_write_ids(db, table)
    valid_txns_text = metastore.valid_txn_list()
    listing = list_table_dir(location.fs.arrow, location.path)
    plan = plan_compaction(
        listing,
        valid_ids_text,
        metastore.kind,
        request.compaction_type,
        table=f"{db}.{table}",
        partition=info.partition,
        valid_txns_text=valid_txns_text,
    )
    existing = plan.existing_targets
    if existing == plan.targets:
        return VacuumResult(
            "already-committed", plan, new_directories=existing, earlier=earlier, removed_staging=removed_staging
        )
    if existing:
        missing = ", ".join(t for t in plan.targets if t not in existing)
        raise VacuumError(
            f"{', '.join(existing)} already exist(s) in {location.uri} but {missing} do(es) not: a vacuum of "
            "this table was interrupted half-way without a commit marker; inspect the directory before "
            "vacuuming it again"
        )
    if request.dry_run:
        return VacuumResult("dry-run", plan, earlier=earlier)
    pending = pending_cleanup(listing, valid_ids_text, metastore.kind, valid_txns_text=valid_txns_text)
    if pending and not request.allow_uncleaned:
        where = plan.table + (f" partition {plan.partition}" if plan.partition else "")
        shown = ", ".join(pending[:5]) + (f" and {len(pending) - 5} more" if len(pending) > 5 else "")
        raise VacuumRefusedError(
            f"{where} still holds {len(pending)} director{'y' if len(pending) == 1 else 'ies'} an earlier vacuum "
            f"made obsolete ({shown}): its cleanup has not run yet. Let the cleaner finish (acidclean audit "
            f"{plan.table} shows it), or pass --allow-uncleaned to vacuum anyway"
        )
    _connect_in_background(publisher)
    commit_with = _compact_and_commit if mode is CommitMode.RENAME else _compact_and_commit_txn
    job = _Job(
        settings,
        metastore,
        location,
        info,
        spark(),
        publisher,
        outbox,
        progress,
        earlier,
        request.request_id,
        held,
        identity,
    )
    result = commit_with(plan, job)
    return dataclasses.replace(result, removed_staging=removed_staging)


def _connect_in_background(publisher: Publisher) -> threading.Thread:
    """Start the publisher's producer while the tasks run: its handshake would otherwise add about
    half a second, on one core, after the commit. A failure here is met again, and reported, by the
    publish itself."""

    def connect() -> None:
        try:
            publisher.connect()
        except Exception as error:  # the publish connects again and reports it
            LOGGER.debug("the publisher could not connect ahead of the publish: %s", error)

    thread = threading.Thread(target=connect, name="acidclean-vacuum-publisher", daemon=True)
    thread.start()
    return thread


def refuse_while_hive_compacts(metastore: Metastore, info: TableInfo, sharers: Sequence[SharedLocation] = ()) -> None:
    """Refuse while Hive's own compactor has a compaction of the table or partition initiated, working
    or ready for cleaning: both would write a compacted directory of the same range (two of one range
    is HIVE-29210's duplicate case), and Hive's Cleaner may remove the inputs this vacuum is reading.
    Every other name of the directory (``sharers``, rule 8) counts: Hive compacting ``p=real`` writes and
    cleans the very directory a vacuum of its alias ``p=latest`` reads. One ``show_compact`` per name."""
    names = [(info.db, info.table, info.partition)]
    for sharer in sharers:
        db, _, table = sharer.table.partition(".")
        if (db, table, sharer.partition) not in names:
            names.append((db, table, sharer.partition))
    for db, table, partition in names:
        for compaction in metastore.compactions(db, table, partition):
            if not compaction.active or compaction.taken_by_acidclean:  # an entry acidclean serves
                continue
            where = f"{compaction.db}.{compaction.table}"
            where += f" partition {compaction.partition}" if compaction.partition else ""
            where += "" if (db, table, partition) == names[0] else ", which shares this vacuum's directory"
            since = ""
            if compaction.started_at_ms:
                since = ", since " + time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(compaction.started_at_ms / 1000))
            kind = "partition" if compaction.partition else "table or partition"
            raise VacuumRefusedError(
                f"Hive's compactor has a {compaction.compaction_type} compaction of {where} in state "
                f"{compaction.state} (id {compaction.compaction_id}{since}): acidclean does not compact a {kind} "
                "Hive is compacting; retry when it is done or turn Hive's Initiator off (see docs/operations.md)"
            )


@dataclass(frozen=True)
class _Job:
    """What a vacuum's compaction and commit work with, whichever way it commits."""

    settings: Settings
    metastore: Metastore
    location: StorageLocation
    info: TableInfo
    spark: SparkSession
    publisher: Publisher
    outbox: Outbox
    progress: Progress
    earlier: list[PublishOutcome]
    request_id: str | None = None
    held: VacuumLock | None = None  # the vacuum lock; None only for a dry run, which commits nothing
    identity: TableIdentity | None = None  # the table as planned (rule 9), confirmed after the commit

    def fence(self, before: str) -> None:
        """The last step before the commit: refuse unless the vacuum lock is still this vacuum's and the
        table the one it planned on."""
        if self.held is None:
            raise VacuumFencedError(f"a vacuum without its vacuum lock cannot {before}")
        self.held.ensure_held(before)
        fence_on_identity(self.metastore, self.info, self.identity, before)  # rule 9: still the table planned on

    def new_job_id(self) -> str:
        return f"{self.spark.sparkContext.applicationId}-{uuid.uuid4().hex[:8]}"

    def write(self, plan: CompactionPlan, into: str) -> list[BucketResult]:
        """Run one Spark task per bucket, writing the plan's targets under ``into``."""
        tasks = bucket_tasks(
            plan,
            location_uri=self.location.uri,
            staging_dir=into,
            row_type=input_row_type(self.location.fs.arrow, plan) if needs_row_type(plan) else None,
            codec=orc_codec(self.info.orc_compress),
        )
        return run_bucket_tasks(self.spark, tasks, self.progress)


def _compact_and_commit(plan: CompactionPlan, job: _Job) -> VacuumResult:
    settings, metastore, progress = job.settings, job.metastore, job.progress
    location, outbox = job.location, job.outbox
    started = time.monotonic()
    job_id = job.new_job_id()
    staging = staging_name(job_id)
    staging_dir = location.child(staging)
    fs = location.fs.arrow
    where = plan.table + (f" partition {plan.partition}" if plan.partition else "")
    progress(
        f"{plan.compaction_type.value} vacuum of {where}: {len(plan.inputs)} inputs, {plan.input_files} files, "
        f"{format_bytes(plan.input_bytes)}, "
        f"{len(plan.buckets)} buckets -> {', '.join(plan.targets)}"
    )
    try:
        results = job.write(plan, staging_dir)
        produced = finish_directories(fs, staging_dir, plan.targets)
    except Exception as error:
        if isinstance(error, AcidCleanError):
            raise
        raise VacuumError(
            f"the vacuum of {plan.table} failed while writing: {task_error_message(error)}. Nothing was "
            f"committed; its partial output is in {staging_dir}, which readers ignore"
        ) from error

    draft = _draft(
        plan, settings, location, produced, job_id, staging, request_id=job.request_id, identity=job.identity
    )
    outbox.save_draft(draft)  # from here on a crash cannot lose the event
    try:
        commit(fs, location.path, staging_dir, produced, draft, fence=lambda: job.fence("rename its output into place"))
    except (VacuumFencedError, CommitCollision):
        outbox.remove(uuid.UUID(draft["event_id"]))  # set aside: this vacuum never commits
        raise
    draft["overlapping_directories"] = overlapping_outputs(metastore, location, plan.table, produced)
    event = complete_event(draft, metastore)  # the lock snapshot, taken after the rename
    outbox.save_event(draft, event)
    return _committed_result(job, plan, produced, results, started, job_id, draft, event)


def _committed_result(
    job: _Job,
    plan: CompactionPlan,
    produced: list[str],
    results: list[BucketResult],
    started: float,
    job_id: str,
    draft: dict[str, Any],
    event: VacuumCommitted,
    visibility_txn_id: int | None = None,
) -> VacuumResult:
    rows = sum(r.rows_written for r in results)
    job.progress(f"  committed {', '.join(produced)} ({rows} rows); {len(event.lock_snapshot)} locks in the snapshot")
    outcome = publish_committed(draft, event, job.publisher, job.outbox)
    return VacuumResult(
        status="committed",
        plan=plan,
        new_directories=tuple(produced),
        rows_written=rows,
        deletes_written=sum(r.deletes_written for r in results),
        files_written=sum(len(r.files) for r in results),
        bytes_read=sum(r.bytes_read for r in results),
        bytes_written=sum(f.bytes for r in results for f in r.files),
        seconds=time.monotonic() - started,
        task_seconds=sum(r.seconds for r in results),
        job_id=job_id,
        publish=outcome,
        earlier=job.earlier,
        commit_mode=CommitMode.RENAME if visibility_txn_id is None else CommitMode.VISIBILITY_TXN,
        visibility_txn_id=visibility_txn_id,
        overlapping_directories=tuple(event.overlapping_directories),
    )


def _compact_and_commit_txn(plan: CompactionPlan, job: _Job) -> VacuumResult:
    """The commit without a rename (:mod:`.commit_mode`): open transaction T, write straight into
    ``base_N_vT`` / ``delta_X_Y_vT``, which every reader skips while T is open, then commit T.

    A failure before the commit aborts T: what was written is an aborted ``_vT`` directory that no
    reader uses and that the next vacuum claims, so its cleanup removes it (docs/design.md section 7, rule 6). A vacuum
    killed before its commit leaves T open; the metastore's housekeeping aborts it once its heartbeats
    stop (``hive.txn.timeout``). The lock snapshot is taken after T commits (rule 2, docs/safety.md)."""
    settings, metastore, progress = job.settings, job.metastore, job.progress
    location, outbox = job.location, job.outbox
    started = time.monotonic()
    job_id = job.new_job_id()
    fs = location.fs.arrow
    txn_id = metastore.open_txn()
    if job.held is not None:
        register_vacuum_txn(metastore, job.held, txn_id)
    with heartbeating(metastore, txn_id, settings.vacuum_lock_stale_s / 10):
        try:
            plan = with_visibility_txn(plan, txn_id, metastore.valid_txn_list())
            where = plan.table + (f" partition {plan.partition}" if plan.partition else "")
            progress(
                f"{plan.compaction_type.value} vacuum of {where} in transaction {txn_id}: {len(plan.inputs)} "
                f"inputs, {plan.input_files} files, {format_bytes(plan.input_bytes)}, {len(plan.buckets)} buckets "
                f"-> {', '.join(plan.targets)}"
            )
            results = job.write(plan, location.path)
            produced = finish_directories(fs, location.path, plan.targets)
            draft = _draft(
                plan,
                settings,
                location,
                produced,
                job_id,
                None,
                visibility_txn_id=txn_id,
                request_id=job.request_id,
                identity=job.identity,
            )
            write_vacuum_markers(fs, location.path, produced, draft)
            outbox.save_draft(draft)  # from here on a crash cannot lose the event
            job.fence(f"commit its transaction {txn_id}")
        except BaseException as error:
            _abort_quietly(metastore, txn_id)
            if isinstance(error, VacuumFencedError):
                outbox.remove(uuid.UUID(draft["event_id"]))  # T is aborted: this vacuum never commits
            if isinstance(error, AcidCleanError) or not isinstance(error, Exception):
                raise
            raise VacuumError(
                f"the vacuum of {plan.table} failed while writing: {task_error_message(error)}. Nothing was "
                f"committed: transaction {txn_id} is aborted, so readers skip what it wrote (*_v{txn_id:07d}), "
                "and the next vacuum's cleanup removes it"
            ) from error
        _commit_visibility_txn(metastore, txn_id, outbox, draft)
    draft["overlapping_directories"] = overlapping_outputs(metastore, location, plan.table, produced)
    event = complete_event(draft, metastore)  # the lock snapshot, taken after T committed
    outbox.save_event(draft, event)
    return _committed_result(job, plan, produced, results, started, job_id, draft, event, txn_id)


def _commit_visibility_txn(metastore: Metastore, txn_id: int, outbox: Outbox, draft: dict[str, Any]) -> None:
    """Commit T. A failed call may still have committed (the answer was lost): the transaction list
    tells, and only a T that did not commit is aborted and its draft dropped."""
    try:
        metastore.commit_txn(txn_id)
        return
    except MetastoreError as error:
        failure = error
    try:
        committed = ValidTxnList.from_string(metastore.valid_txn_list()).is_txn_valid(txn_id)
    except MetastoreError:
        committed = None
    if committed:
        return
    if committed is False:
        _abort_quietly(metastore, txn_id)
        outbox.remove(uuid.UUID(draft["event_id"]))
    raise VacuumError(
        f"the vacuum of {draft['table']} could not commit transaction {txn_id}: {failure}. "
        + (
            "It did not commit: readers skip its output, which the next vacuum's cleanup removes"
            if committed is False
            else "Whether it committed is unknown; the next vacuum publishes its event if it did"
        )
    ) from failure


def _abort_quietly(metastore: Metastore, txn_id: int) -> None:
    try:
        metastore.abort_txn(txn_id)
    except MetastoreError as error:  # the metastore aborts it itself once its heartbeats stop
        LOGGER.warning("could not abort the vacuum's transaction %s: %s", txn_id, error)


@contextmanager
def heartbeating(metastore: Metastore, txn_id: int, every_s: float) -> Iterator[None]:
    """Keep transaction ``txn_id`` alive while the block runs (the metastore aborts a silent one)."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every_s):
            try:
                metastore.heartbeat(txn_id=txn_id)
            except MetastoreError as error:
                LOGGER.warning("heartbeat of the vacuum's transaction %s failed: %s", txn_id, error)

    thread = threading.Thread(target=beat, name=f"vacuum-txn-{txn_id}-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)


def spark_session(master: str | None = None, app_name: str = "acidclean-vacuum") -> SparkSession:
    """The active SparkSession, else a new one: spark-submit's master if it set one, else ``master``
    (default ``local[*]``)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(app_name).config("spark.ui.showConsoleProgress", "false")
    if master is not None or not SparkConf().contains("spark.master"):
        master = master or "local[*]"
        builder = builder.master(master)
        if master.startswith("local"):
            # A local Spark serves only this process: keep it on loopback and its logging to errors.
            # Its workers run this interpreter, which has acidclean: they may fork from a daemon
            # that imported the vacuum's modules already.
            for key, value in DAEMON_CONF.items():
                builder = builder.config(key, value)
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            log_config = Path(__file__).with_name("spark-log4j2.properties")
            os.environ.setdefault(
                "PYSPARK_SUBMIT_ARGS",
                f"--driver-java-options -Dlog4j2.configurationFile=file:{log_config} pyspark-shell",
            )
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
