"""Helpers for the tests of the vacuum service and the closed loop, on the real stack.

A request is built as the initiator would build it and published to the requests topic; the
service runs in a thread of the test (with the session's SparkSession) or as ``acidclean
vacuum-service`` in a subprocess stopped by its pid; what happened is read back from the topics.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from acidclean.producers.vacuum_service import ServiceOptions, VacuumService
from acidclean.schemas.common import utc_now
from acidclean.schemas.events import (
    RequestedBy,
    VacuumFigures,
    VacuumRequested,
    VacuumThresholds,
)
from acidclean.shared.bus.codec import decode
from acidclean.shared.bus.producer import KafkaEventBus
from acidclean.shared.bus.reader import LogReader
from acidclean.shared.bus.records import raw_record
from acidclean.shared.bus.topics import ensure_topics
from acidclean.shared.settings import Settings

T = TypeVar("T")


def request_for(
    settings: Settings, table: str, location: str, *, partition: str | None = None, full: bool = False
) -> VacuumRequested:
    """A request as the initiator makes it (12 deltas over a threshold of 10)."""
    now = utc_now()
    return VacuumRequested(
        tenant=settings.tenant,
        table=table,
        partition=partition,
        occurred_at=now,
        location=location,
        compaction_type="MAJOR" if full else "MINOR",
        reason="12 deltas >= hive.compactor.delta.num.threshold 10",
        figures=VacuumFigures(delta_count=12, delete_delta_count=0, delta_bytes=1, base_bytes=0, aborted_txns=0),
        thresholds=VacuumThresholds(delta_num=10, delta_pct=0.1, aborted_txns=1000),
        requested_by=RequestedBy(initiator_id="test", trigger="event"),
        requested_at=now,
    )


def publish_requests(settings: Settings, *requests: VacuumRequested) -> None:
    ensure_topics(settings, ("vacuum_requests", "vacuum_committed"))
    with KafkaEventBus(settings.kafka) as bus:
        bus.publish_many([(settings.topic("vacuum_requests"), request) for request in requests])


def topic_events(settings: Settings, *names: str) -> list[Any]:
    """Every event on the settings' topics ``names`` (fields of TopicNames), in offset order per partition."""
    reader = LogReader(settings.kafka, [settings.topic(name) for name in names], stall_timeout_s=20.0)
    return [decode(raw_record(message), rejected_by="tests", tenant=settings.tenant) for message in reader]


def of_type(events: list[Any], kind: type[T], **fields: Any) -> list[T]:
    return [e for e in events if isinstance(e, kind) and all(getattr(e, k) == v for k, v in fields.items())]


def wait_for(condition: Callable[[], T], timeout_s: float, what: str, every_s: float = 0.5) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(every_s)


@contextmanager
def running_service(
    settings: Settings, spark: Any, service_id: str = "it", metrics_port: int | None = None
) -> Iterator[VacuumService]:
    """A vacuum service in a thread of this process on the session's Spark, stopped on exit."""
    options = ServiceOptions(
        service_id=f"{service_id}-{uuid.uuid4().hex[:6]}", metrics_port=metrics_port, metrics_address="127.0.0.1"
    )
    service = VacuumService(settings, options, spark=lambda: spark)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            service.run()
        except BaseException as error:  # surfaced to the test below
            errors.append(error)

    thread = threading.Thread(target=run, name="vacuum-service", daemon=True)
    thread.start()
    try:
        yield service
    finally:
        service.stop()
        thread.join(120)
        assert not thread.is_alive(), "the vacuum service did not stop within 120 s"
        if errors:
            raise errors[0]


def settings_environment(settings: Settings) -> dict[str, str]:
    """The settings as ACIDCLEAN_* variables, for a process of the loop run as a subprocess."""
    values = {
        "ACIDCLEAN_KAFKA_BOOTSTRAP": settings.bootstrap_servers,
        "ACIDCLEAN_METASTORE_URIS": settings.metastore_uris,
        "ACIDCLEAN_TOPIC_PREFIX": settings.topic_prefix,
        "ACIDCLEAN_TOPIC_PARTITIONS": str(settings.topic_partitions),
        "ACIDCLEAN_TENANT": settings.tenant,
        "ACIDCLEAN_ALLOWED_ROOTS": json.dumps(settings.allowed_roots),
        "ACIDCLEAN_STATE_DIR": str(settings.state_dir),
        "ACIDCLEAN_GROUP_ID": settings.group_id,
        "ACIDCLEAN_CLEANUP_INTERVAL_MS": str(settings.cleanup_interval_ms),
        "ACIDCLEAN_VACUUM_SERVICE_GROUP_ID": settings.vacuum_service_group_id,
        "ACIDCLEAN_VACUUM_LOCK_WAIT_S": str(settings.vacuum_lock_wait_s),
        "ACIDCLEAN_VACUUM_LOCK_STALE_S": str(settings.vacuum_lock_stale_s),
    }
    if settings.vacuum_service_master:
        values["ACIDCLEAN_VACUUM_SERVICE_MASTER"] = settings.vacuum_service_master
    return values


@dataclass
class Subprocess:
    """An ``acidclean`` command run in a subprocess, stopped by its pid."""

    process: subprocess.Popen[bytes]
    log_file: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, timeout_s: float = 60.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait(10)

    def kill(self) -> int:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        return self.process.wait(10)

    def log(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""


def start_command(
    settings: Settings, log_file: Path, *args: str, extra_env: dict[str, str] | None = None
) -> Subprocess:
    """``acidclean ARGS`` in a subprocess with the settings in its environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACIDCLEAN_")}
    env.update(settings_environment(settings))
    env.update(extra_env or {})
    env["PYTHONUNBUFFERED"] = "1"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "acidclean", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=settings.state_dir,
        )
    return Subprocess(process, log_file)


@contextmanager
def subprocesses() -> Iterator[list[Subprocess]]:
    """A list the test appends its subprocesses to; each is stopped (by pid) on exit."""
    started: list[Subprocess] = []
    try:
        yield started
    finally:
        for process in started:
            process.stop(30)
