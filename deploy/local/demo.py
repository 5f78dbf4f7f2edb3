"""The whole acidclean story on the local stack, narrated as it happens.

Each part runs for real, as the same ``acidclean`` commands a user would type, and closes the loop
of issue 13: the ingest writer streams commits into a transactional table, publishing
``DeltaCommitted``; a reader takes a SHARED_READ lock and reads; the commit that crosses
``hive.compactor.delta.num.threshold`` makes ``acidclean initiator`` publish ``VacuumRequested``;
``acidclean vacuum-service`` starts the vacuum on its warm SparkSession (``VacuumStarted``), compacts
the deltas, snapshots the reader's lock and publishes ``VacuumCommitted``; a cleaner process requeues
the event on the delay topic while the lock is held; the reader finishes; the cleaner deletes the
obsolete directories and publishes ``CleanupDone``; ``acidclean audit`` shows the history (requested,
running, committed, cleaned) and draws the timeline. No command is typed between the commits and the
cleanup. With ``by_hand`` the vacuum is run as ``acidclean vacuum`` instead, as before the loop.
The narration follows the events on the topics.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from acidclean.deploy.local.process import stop_process
from acidclean.deploy.local.stack import StackInfo, stack_up
from acidclean.producers.reader import locked_read
from acidclean.schemas.events import (
    CleanupDone,
    CleanupRejected,
    DelayedVacuums,
    DelayEnvelope,
    VacuumCommitted,
    VacuumFailed,
    VacuumRequested,
    VacuumStarted,
)
from acidclean.shared.bus.codec import decode
from acidclean.shared.bus.records import raw_record
from acidclean.shared.bus.topics import ensure_topics
from acidclean.shared.errors import AcidCleanError, ConfigurationError
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.settings import Settings, load_settings
from acidclean.shared.storage import open_location

Say = Callable[[str], None]
REQUEUES_BEFORE_RELEASE = 2
STORY_TOPICS = ("vacuum_requests", "vacuum_committed", "cleanup_delay", "cleanup_done", "dead_letter")


@dataclass(frozen=True)
class DemoOptions:
    state_dir: Path
    flavour: str = "hive2"
    commits: int = 8
    rows: int = 2000
    interval_ms: int = 2000
    full: bool = True  # by hand only: the initiator picks MAJOR or MINOR itself
    storage: str = "local"
    by_hand: bool = False  # run `acidclean vacuum` instead of the initiator and the vacuum service
    # What the demo leaves for the user (the timeline, the services' logs): outside the state directory,
    # which `acidclean stack down` removes. None: demo_output_dir of the stack's state directory.
    output_dir: Path | None = None


DEMO_OUTPUT = "acidclean-demo"


def demo_output_dir(state_dir: Path) -> Path:
    """Where the demo leaves its timeline and logs by default: ``acidclean-demo`` beside the state directory."""
    return state_dir.resolve().parent / DEMO_OUTPUT


def demo_output(options: DemoOptions, state_dir: Path) -> Path:
    """The folder the demo writes its timeline and logs to; refused inside ``state_dir``."""
    output = (options.output_dir or demo_output_dir(state_dir)).resolve()
    if output == state_dir.resolve() or state_dir.resolve() in output.parents:
        raise ConfigurationError(
            f"the demo's output folder {output} is inside the stack's state directory {state_dir}, which "
            "`acidclean stack down` removes: choose a folder outside it (--output-dir)"
        )
    return output


@dataclass
class StoryEvents:
    """What the narrator has seen on the topics, shared with the waiting steps."""

    delays: int = 0
    done: CleanupDone | None = None
    rejected: CleanupRejected | None = None
    vacuum: VacuumCommitted | None = None
    requested: VacuumRequested | None = None
    failed: VacuumFailed | None = None
    changed: threading.Condition = field(default_factory=threading.Condition)
    watching: threading.Event = field(default_factory=threading.Event)  # the watcher is assigned

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        with self.changed:
            return self.changed.wait_for(predicate, timeout=timeout_s)


class Narrator:
    def __init__(self, say: Say) -> None:
        self._say = say
        self._started = time.monotonic()

    def step(self, text: str) -> None:
        self._say(f"[{time.monotonic() - self._started:5.1f}s] ==> {text}")

    def detail(self, text: str) -> None:
        for line in text.rstrip().splitlines():
            self._say(f"            {line}")

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self._started


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "acidclean", *args]


def _run(narrator: Narrator, env: dict[str, str], *args: str, show: bool = True) -> str:
    """Run an acidclean command to completion; show its output indented; fail with its output."""
    completed = subprocess.run(_command(*args), env=env, capture_output=True, text=True, check=False)
    output = completed.stdout + (completed.stderr if completed.returncode else "")
    if completed.returncode != 0:
        raise AcidCleanError(f"`acidclean {' '.join(args)}` failed (exit {completed.returncode}):\n{output}")
    if show:
        narrator.detail(completed.stdout)
    return completed.stdout


def _listing(location_uri: str) -> list[str]:
    location = open_location(location_uri)
    return sorted(entry.name for entry in location.fs.list_dir(location.path))


def _watch_topics(
    settings: Settings, table: str, story: StoryEvents, narrator: Narrator, stop: threading.Event
) -> None:
    """Narrate the vacuum, delay, cleanup and dead-letter events as they arrive (no consumer group)."""
    topics = {settings.topic(name): name for name in STORY_TOPICS}
    consumer = Consumer(
        {
            **settings.kafka,
            "group.id": f"acidclean-demo-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "log_level": 3,
        }
    )
    try:
        metadata = consumer.list_topics(timeout=30)
        assignment = []
        for topic in topics:
            for partition in metadata.topics[topic].partitions:
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
                assignment.append(TopicPartition(topic, partition, high))
        consumer.assign(assignment)
        story.watching.set()
        while not stop.is_set():
            message = consumer.poll(0.2)
            if message is None or message.error() is not None:
                continue
            event = decode(raw_record(message), rejected_by="acidclean-demo", tenant=settings.tenant)
            if getattr(event, "table", None) == table:
                _narrate(event, story, narrator)
    finally:
        consumer.close()


def _narrate(event: object, story: StoryEvents, narrator: Narrator) -> None:
    with story.changed:
        if isinstance(event, VacuumRequested):
            story.requested = event
            narrator.step(f"initiator: VacuumRequested ({event.compaction_type}: {event.reason})")
        elif isinstance(event, VacuumStarted):
            narrator.step(f"vacuum service {event.vacuum_service_id}: VacuumStarted on its warm SparkSession")
        elif isinstance(event, VacuumFailed):
            story.failed = event
            narrator.step(f"vacuum service: VacuumFailed {event.reason_code}: {event.message}")
        elif isinstance(event, VacuumCommitted):
            story.vacuum = event
            locks = ", ".join(f"lock {lock.lock_id} ({lock.user}@{lock.host})" for lock in event.lock_snapshot)
            narrator.step(
                f"VacuumCommitted on the bus: new {', '.join(event.new_directories)}; "
                f"lock snapshot: {locks or 'no locks'}"
            )
        elif isinstance(event, DelayEnvelope):
            story.delays += 1
            held = ", ".join(str(lock.lock_id) for lock in event.locks_held)
            due_in = (event.due_at - event.occurred_at).total_seconds()
            narrator.step(
                f"cleaner: not ready to clean, lock {held} still held -> delay topic "
                f"(attempt {event.attempt}, due in {due_in:.1f} s); nothing deleted"
            )
        elif isinstance(event, DelayedVacuums):
            story.delays += 1
            due_in = (event.due_at - event.occurred_at).total_seconds()
            narrator.step(
                f"cleaner: {len(event.waiting)} vacuums of {event.table} not ready to clean -> one delay "
                f"record (due in {due_in:.1f} s); nothing deleted"
            )
        elif isinstance(event, CleanupDone):
            story.done = event
            files = sum(d.file_count for d in event.directories_removed)
            narrator.step(
                f"CleanupDone: {len(event.directories_removed)} directories, {files} files, "
                f"{event.bytes_freed:,} bytes removed after {event.attempts} checks "
                f"({event.time_waited_ms / 1000:.1f} s after the vacuum)"
            )
        elif isinstance(event, CleanupRejected):
            story.rejected = event
            narrator.step(f"dead letter: {event.reason_code}: {event.reason}")
        story.changed.notify_all()


@contextmanager
def _service(env: dict[str, str], log_file: Path, *args: str) -> Iterator[int]:
    """``acidclean ARGS`` as a background process, stopped by its pid (SIGTERM: it commits and leaves)."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        process = subprocess.Popen(
            _command(*args, "--group", f"demo-{uuid.uuid4().hex[:6]}"),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield process.pid
    finally:
        stop_process(process.pid, args[0], timeout_s=60)


def _cleaner(env: dict[str, str], log_file: Path, interval_ms: int) -> Any:
    return _service(env, log_file, "cleaner", "--interval-ms", str(interval_ms))


@contextmanager
def _initiator(
    env: dict[str, str], demo_dir: Path, narrator: Narrator, threshold: int, by_hand: bool
) -> Iterator[None]:
    """The initiator, requesting on the ingest's events only (nothing when the vacuum is run by hand)."""
    if by_hand:
        yield
        return
    loop_env = {
        **env,
        "ACIDCLEAN_COMPACTOR_DELTA_NUM_THRESHOLD": str(threshold),
        "ACIDCLEAN_INITIATOR_SWEEP_INTERVAL_S": "0",
    }
    with _service(loop_env, demo_dir / "initiator.log", "initiator") as pid:
        narrator.step(
            f"initiator started (pid {pid}, hive.compactor.delta.num.threshold {threshold}; "
            f"its JSON log: {demo_dir / 'initiator.log'})"
        )
        yield


@contextmanager
def _reader(
    metastore: HiveMetastore, db: str, table: str, narrator: Narrator, release: threading.Event
) -> Iterator[threading.Event]:
    """A reader in its own thread: lock, list, read, then hold the lock until ``release`` is set."""
    locked = threading.Event()
    failure: list[BaseException] = []

    def read() -> None:
        try:
            with locked_read(metastore, db, table) as seen:
                narrator.step(
                    f"a reader locked {db}.{table} (SHARED_READ, txn {seen.txn_id}, lock {seen.lock_id}) "
                    f"and read {seen.rows.num_rows:,} rows from {len(seen.directories)} directories; "
                    "it keeps its lock while it works"
                )
                locked.set()
                release.wait(timeout=600)
                narrator.step(f"the reader finished and committed txn {seen.txn_id}: its lock is released")
        except BaseException as error:  # reported by the main thread
            failure.append(error)
            locked.set()

    thread = threading.Thread(target=read, name="demo-reader", daemon=True)
    thread.start()
    locked.wait(timeout=120)
    if failure:
        raise failure[0]
    try:
        yield locked
    finally:
        release.set()
        thread.join(timeout=60)
        if failure:
            raise failure[0]


@dataclass(frozen=True)
class DemoStack:
    """Where the story runs: a Kafka broker, a metastore and a folder for its files."""

    kafka_bootstrap: str
    metastore_uri: str
    state_dir: Path
    environment: dict[str, str] = field(default_factory=dict)  # what storage clients need (S3 endpoint)


def run_demo(options: DemoOptions, say: Say, stack: DemoStack | None = None) -> float:
    """Run the story (on ``stack``, else on the local stack, started if need be); returns its duration."""
    narrator = Narrator(say)
    demo_dir = demo_output(options, stack.state_dir if stack is not None else options.state_dir)
    if stack is None:
        storage = {"hdfs": ", an HDFS", "s3": ", an S3 API server"}.get(options.storage, "")
        narrator.step(
            f"starting the local stack (a Kafka broker{storage} and a Hive Metastore, as local processes) ..."
        )
        info, started = stack_up(options.state_dir, options.flavour, storage=options.storage)
        _describe_stack(narrator, info, started)
        stack = DemoStack(info.kafka_bootstrap, info.metastore_uri, Path(info.state_dir), info.environment)
    os.environ.update(stack.environment)  # this process lists the table too

    demo_dir.mkdir(parents=True, exist_ok=True)
    environ = {
        "ACIDCLEAN_KAFKA_BOOTSTRAP": stack.kafka_bootstrap,
        "ACIDCLEAN_METASTORE_URIS": stack.metastore_uri,
        "ACIDCLEAN_STATE_DIR": str(stack.state_dir),
        "ACIDCLEAN_CLEANUP_INTERVAL_MS": str(options.interval_ms),
        **stack.environment,
    }
    if options.storage == "s3" and options.flavour == "hive3":
        # vacuum_commit=auto refuses an object store behind Hive 3, whose readers cannot parse _vT names; the
        # demo's only readers are acidclean's own, which do, so it asks for the transaction commit and says so.
        environ.update(
            {"ACIDCLEAN_VACUUM_COMMIT": "visibility-txn", "ACIDCLEAN_VACUUM_VISIBILITY_TXN_ON_HIVE3": "true"}
        )
    env = {**os.environ, **environ, "PYTHONUNBUFFERED": "1"}
    settings = load_settings(environ={k: v for k, v in environ.items() if k not in stack.environment})
    ensure_topics(settings)

    db, table = "demo", f"clicks_{uuid.uuid4().hex[:6]}"
    name = f"{db}.{table}"
    _run(narrator, env, "create-table", name, "--columns", "id int, v string", "--buckets", "2", show=False)
    with HiveMetastore(stack.metastore_uri) as metastore:
        location = metastore.get_table(db, table).location
        narrator.step(f"created transactional table {name} (2 buckets, ORC) at {location}")
        # The cleaner may delete only under the warehouse: the folder holding the database's folder.
        warehouse = location.rstrip("/").rsplit("/", 2)[0]
        environ["ACIDCLEAN_ALLOWED_ROOTS"] = env["ACIDCLEAN_ALLOWED_ROOTS"] = json.dumps({"default": [warehouse]})

        story = StoryEvents()
        stop_watch = threading.Event()
        watcher = threading.Thread(
            target=_watch_topics, args=(settings, name, story, narrator, stop_watch), daemon=True
        )
        watcher.start()
        if not story.watching.wait(timeout=30):
            raise AcidCleanError(f"could not follow the topics on {stack.kafka_bootstrap} within 30 s")
        # A commit writes a delta and, from the second on, a delete delta: the last commit crosses it.
        threshold = 2 * options.commits - 2
        release = threading.Event()
        try:
            with (
                _cleaner(env, demo_dir / "cleaner.log", options.interval_ms) as pid,
                _initiator(env, demo_dir, narrator, threshold, options.by_hand),
                ExitStack() as service,
            ):
                narrator.step(
                    f"cleaner started (pid {pid}, interval {options.interval_ms} ms; "
                    f"its JSON log: {demo_dir / 'cleaner.log'})"
                )
                narrator.step(
                    f"streaming {options.commits} commits of {options.rows} rows through the ingest writer "
                    "(each: open txn, write id, SHARED_WRITE lock, delta, commit, DeltaCommitted) ..."
                )
                _run(
                    narrator,
                    env,
                    "ingest",
                    name,
                    "--rows",
                    str(options.rows),
                    "--commits",
                    str(options.commits),
                    "--delete-fraction",
                    "0.05",
                )
                before = _listing(location)
                narrator.detail("table directory now: " + " ".join(before))
                with _reader(metastore, db, table, narrator, release):
                    if options.by_hand:
                        kind = "MAJOR: VACUUM TABLE ... FULL" if options.full else "MINOR: VACUUM TABLE ..."
                        narrator.step(f"running the Spark vacuum ({kind}) while the reader holds its lock ...")
                        _run(narrator, env, "vacuum", name, *(["--full"] if options.full else []))
                    else:
                        if not story.wait_for(lambda: story.requested is not None, 60):
                            raise AcidCleanError(f"no VacuumRequested within 60 s; see {demo_dir / 'initiator.log'}")
                        # Started now, so the reader surely holds its lock before the vacuum commits; the
                        # request waits on its topic meanwhile (a service that is down loses none).
                        service_pid = service.enter_context(
                            _service(env, demo_dir / "vacuum-service.log", "vacuum-service", "--master", "local[2]")
                        )
                        narrator.step(
                            f"vacuum service started (pid {service_pid}): it starts its SparkSession "
                            "once, then takes the request from the topic while the reader holds its lock ..."
                        )
                        if not story.wait_for(lambda: story.vacuum is not None or story.failed is not None, 300):
                            raise AcidCleanError(f"no vacuum within 300 s; see {demo_dir / 'vacuum-service.log'}")
                        if story.failed is not None:
                            raise AcidCleanError(f"the requested vacuum failed: {story.failed.message}")
                    narrator.step(
                        f"the reader's files are still there: {sum(n in _listing(location) for n in before)}"
                        f" of {len(before)} directories"
                    )
                    if not story.wait_for(lambda: story.delays >= REQUEUES_BEFORE_RELEASE, timeout_s=60):
                        raise AcidCleanError(
                            "the cleaner did not requeue the vacuum within 60 s; see its log "
                            f"{demo_dir / 'cleaner.log'}"
                        )
                    release.set()
                if not story.wait_for(
                    lambda: story.done is not None or story.rejected is not None,
                    timeout_s=60 + options.interval_ms / 1000,
                ):
                    raise AcidCleanError(f"no CleanupDone within 60 s; see the cleaner log {demo_dir / 'cleaner.log'}")
        finally:
            stop_watch.set()
            watcher.join(timeout=10)

        after = _listing(location)
        narrator.step("table directory before and after the cleanup:")
        narrator.detail("before: " + " ".join(before + [d for d in after if d not in before]))
        narrator.detail("after:  " + " ".join(after))

    plot = demo_dir / f"{table}.png"
    narrator.step(f"acidclean audit {name} --plot {plot}")
    _run(narrator, env, "audit", name, "--plot", str(plot))
    narrator.step(f"timeline drawn to {plot}")
    narrator.step(
        f"the timeline and the services' logs are in {demo_dir}, which `acidclean stack down` does not remove"
    )
    exports = " ".join(f"{key}={shlex.quote(value)}" for key, value in environ.items())
    narrator.step(
        f"done in {narrator.elapsed:.0f} s. The stack keeps running for you to explore (export {exports}); "
        f"stop it with: acidclean stack down --state-dir {options.state_dir}"
    )
    return narrator.elapsed


def _describe_stack(narrator: Narrator, info: StackInfo, started: bool) -> None:
    how = "started" if started else "already running"
    narrator.detail(f"kafka      {info.kafka_bootstrap} (pid {info.kafka.pid}, {how})")
    metastore = info.metastore
    narrator.detail(f"metastore  {info.metastore_uri} (pid {metastore.pid}, {info.metastore_flavour}, {how})")
    if info.storage_service is not None:
        service = info.storage_service
        narrator.detail(f"{info.storage:<10} {service.address} (pid {service.pid}, {how}); warehouse {info.warehouse}")
