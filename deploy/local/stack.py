"""The local stack as one unit: up, status, down.

``up`` starts Kafka and, beside it, the storage service (``--storage hdfs`` or ``s3``; none for the
local disk) followed by the Hive Metastore whose warehouse lives there (the machine has two cores and
these JVMs spend their start-up mostly waiting), and records what runs where in ``stack.json`` in the
state directory. ``up`` on a running stack returns the running stack. ``down`` stops each service by
the process id recorded at start, and only while that pid still names the process started then (its
start time is recorded beside it), and removes the state directory. A damaged ``stack.json`` is one
:class:`DamagedStateError` naming the file and the way out, ``down --forget``.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from acidclean.deploy.local.kafka import kafka_ready, start_kafka
from acidclean.deploy.local.metastore import metastore_ready, start_metastore
from acidclean.deploy.local.process import (
    StartedProcess,
    pid_alive,
    port_accepts,
    process_replaced,
    process_start_time,
    process_started_at,
    stop_process,
)
from acidclean.deploy.local.storage import StorageService, check_storage, start_storage
from acidclean.deploy.local.warehouse import local_warehouse
from acidclean.shared.errors import StackError

STATE_FILE = "stack.json"
# The start time given to a service of an old stack.json (written before start times were recorded)
# whose pid now belongs to a process younger than the file: no process has it, so none is signalled.
NOT_THIS_PROCESS = -1


class DamagedStateError(StackError):
    """``stack.json`` cannot be read: truncated, not JSON, or missing what a stack records."""


@dataclass(frozen=True)
class ServiceInfo:
    name: str
    pid: int
    address: str
    log_file: str
    seconds_to_ready: float
    start_time: int | None = None  # see process_start_time; None in files written before it was recorded

    @staticmethod
    def from_raw(raw: Any, key: str) -> ServiceInfo:
        if not isinstance(raw, dict):
            raise ValueError(f"{key!r} is not an object")
        missing = [name for name in ("name", "pid", "address", "log_file") if name not in raw]
        if missing:
            raise ValueError(f"{key!r} has no {', '.join(map(repr, missing))}")
        for name in ("pid", "start_time"):
            value = raw.get(name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise ValueError(f"{key}.{name} is {value!r}, not a positive integer")
        if raw["pid"] is None:
            raise ValueError(f"{key}.pid is null")
        return ServiceInfo(
            name=str(raw["name"]),
            pid=raw["pid"],
            address=str(raw["address"]),
            log_file=str(raw["log_file"]),
            seconds_to_ready=float(raw.get("seconds_to_ready") or 0.0),
            start_time=raw.get("start_time"),
        )


@dataclass(frozen=True)
class StackInfo:
    state_dir: str
    kafka: ServiceInfo
    metastore: ServiceInfo
    metastore_flavour: str
    warehouse: str
    started_at: float
    storage: str = "local"
    storage_service: ServiceInfo | None = None  # the HDFS or S3 server; None on the local disk
    environment: dict[str, str] = field(default_factory=dict)  # what clients need to reach the storage

    @property
    def services(self) -> tuple[ServiceInfo, ...]:
        return (self.kafka, self.metastore) + ((self.storage_service,) if self.storage_service else ())

    @property
    def kafka_bootstrap(self) -> str:
        return self.kafka.address

    @property
    def metastore_uri(self) -> str:
        return self.metastore.address

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @staticmethod
    def from_json(text: str) -> StackInfo:
        """The stack ``text`` records; ValueError (JSONDecodeError included) when it records none."""
        raw = json.loads(text)
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        required = ("state_dir", "kafka", "metastore", "metastore_flavour", "warehouse")
        missing = [key for key in required if key not in raw]
        if missing:
            raise ValueError(f"no {', '.join(map(repr, missing))}")
        return StackInfo(
            state_dir=str(raw["state_dir"]),
            kafka=ServiceInfo.from_raw(raw["kafka"], "kafka"),
            metastore=ServiceInfo.from_raw(raw["metastore"], "metastore"),
            metastore_flavour=str(raw["metastore_flavour"]),
            warehouse=str(raw["warehouse"]),
            started_at=float(raw.get("started_at") or 0.0),
            storage=str(raw.get("storage", "local")),
            storage_service=(
                ServiceInfo.from_raw(raw["storage_service"], "storage_service") if raw.get("storage_service") else None
            ),
            environment={str(k): str(v) for k, v in dict(raw.get("environment") or {}).items()},
        )


def _service(process: StartedProcess, address: str) -> ServiceInfo:
    return ServiceInfo(
        process.name,
        process.pid,
        address,
        str(process.log_file),
        round(process.seconds_to_ready, 2),
        process.start_time,
    )


def forget_hint(state_dir: Path) -> str:
    return f"remove it, or run `acidclean stack down --forget --state-dir {state_dir}` to stop nothing and forget it"


def read_state(state_dir: Path) -> StackInfo | None:
    """The stack recorded in ``state_dir``, None when there is none; DamagedStateError when the record
    cannot be read."""
    state_file = state_dir / STATE_FILE
    try:
        text = state_file.read_text(encoding="utf-8")
        info = StackInfo.from_json(text)
        written_at = state_file.stat().st_mtime
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as error:
        if isinstance(error, json.JSONDecodeError):
            reason = f"not JSON: {error}"
        else:
            reason = (error.strerror if isinstance(error, OSError) else str(error)) or type(error).__name__
        raise DamagedStateError(f"{state_file} is damaged ({reason}): {forget_hint(state_dir)}") from None
    return _with_start_times(info, written_at)


def _with_start_times(info: StackInfo, written_at: float) -> StackInfo:
    """Give the services of a file written before start times were recorded one: the current process
    of the pid if it started before the file was written (every service did), else none can be it."""

    def identified(service: ServiceInfo | None) -> ServiceInfo | None:
        if service is None or service.start_time is not None:
            return service
        started_at = process_started_at(service.pid)
        if started_at is None:
            return service  # gone: nothing to signal
        own = started_at <= written_at + 1.0
        start_time = process_start_time(service.pid) if own else NOT_THIS_PROCESS
        return dataclasses.replace(service, start_time=start_time)

    kafka, metastore = identified(info.kafka), identified(info.metastore)
    assert kafka is not None and metastore is not None
    return dataclasses.replace(info, kafka=kafka, metastore=metastore, storage_service=identified(info.storage_service))


def replaced_note(service: ServiceInfo) -> str:
    return f"pid {service.pid} ({service.name}) is now another process; not stopping it"


def service_status(info: ServiceInfo) -> str:
    """``running``, ``not answering`` (process alive, probe fails), ``stopped``, or ``stopped (pid N is
    now another process)`` when the pid was given to a process started since."""
    if process_replaced(info.pid, info.start_time):
        return f"stopped (pid {info.pid} is now another process)"
    if not pid_alive(info.pid, info.start_time):
        return "stopped"
    if info.address.startswith("thrift://"):
        answering = metastore_ready(int(info.address.rsplit(":", 1)[1]))
    elif info.address.startswith("hdfs://"):
        from acidclean.deploy.local.hdfs import hdfs_ready

        answering = hdfs_ready(info.address)
    elif info.address.startswith("http"):
        answering = port_accepts(int(info.address.rsplit(":", 1)[1].split("/")[0]))
    else:
        answering = kafka_ready(info.address)
    return "running" if answering else "not answering"


def stack_up(
    state_dir: Path,
    metastore_flavour: str = "hive2",
    kafka_port: int | None = None,
    metastore_port: int | None = None,
    storage: str = "local",
    hdfs_trash_interval_min: int | None = None,
) -> tuple[StackInfo, bool]:
    """Start the stack, or return the one already running. The flag says whether it was started now."""
    state_dir = state_dir.resolve()
    check_storage(storage, metastore_flavour)
    existing = read_state(state_dir)
    if existing is not None:
        statuses = {service_status(service) for service in existing.services}
        if statuses == {"running"}:
            if (existing.metastore_flavour, existing.storage) != (metastore_flavour, storage):
                raise StackError(
                    f"a stack with a {existing.metastore_flavour} metastore on {existing.storage} storage already "
                    f"runs from {state_dir}; run `acidclean stack down` first to switch"
                )
            return existing, False
        stack_down(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    storage_started: list[StorageService] = []

    def storage_then_metastore() -> tuple[StartedProcess, str]:
        service = start_storage(state_dir, storage, metastore_flavour, hdfs_trash_interval_min)
        storage_started.append(service)
        return start_metastore(
            state_dir,
            metastore_flavour,
            metastore_port,
            warehouse_uri=service.warehouse_uri,
            extra_settings=service.metastore_settings,
            extra_classpath=service.metastore_classpath,
        )

    with ThreadPoolExecutor(max_workers=2) as pool:
        kafka_future = pool.submit(start_kafka, state_dir, kafka_port)
        metastore_future = pool.submit(storage_then_metastore)
        failures: list[str] = []
        results = {}
        for name, future in (("kafka", kafka_future), ("metastore", metastore_future)):
            try:
                results[name] = future.result()
            except StackError as error:
                failures.append(str(error))
    if failures:
        started_processes = [process for process, _ in results.values()]
        started_processes += [s.process for s in storage_started if s.process is not None]
        for process in started_processes:
            stop_process(process.pid, process.name, start_time=process.start_time)
        raise StackError("\n\n".join(failures))
    kafka_process, bootstrap = results["kafka"]
    metastore_process, uri = results["metastore"]
    service = storage_started[0]
    info = StackInfo(
        state_dir=str(state_dir),
        kafka=_service(kafka_process, bootstrap),
        metastore=_service(metastore_process, uri),
        metastore_flavour=metastore_flavour,
        warehouse=service.warehouse_uri or str(local_warehouse(state_dir)),
        started_at=started,
        storage=storage,
        storage_service=_service(service.process, service.address) if service.process else None,
        environment=service.environment,
    )
    (state_dir / STATE_FILE).write_text(info.to_json(), encoding="utf-8")
    return info, True


OWN_ENTRIES = {STATE_FILE, "kafka", "metastore", "logs", "warehouse", "outbox", "demo", "hdfs", "s3"}


def _is_stack_dir(state_dir: Path) -> bool:
    """Only a folder holding nothing but the stack's own entries is ever removed."""
    if not state_dir.is_dir():
        return False
    entries = {entry.name for entry in state_dir.iterdir()}
    return entries <= OWN_ENTRIES


@dataclass(frozen=True)
class StackDown:
    """What ``down`` did: the services it stopped and the pids it left alone (now other processes)."""

    stopped: list[str]
    left_alone: list[str]


def stop_stack(state_dir: Path, keep_state: bool = False, forget: bool = False) -> StackDown:
    """Stop every recorded service whose pid still names it, and remove the state.

    ``forget`` stops nothing and does not read ``stack.json`` (the way out of a damaged one): the state
    directory is removed, or only ``stack.json`` when the directory holds other things too.
    """
    state_dir = state_dir.resolve()
    stopped: list[str] = []
    left_alone: list[str] = []
    recorded: StackInfo | None = None
    if forget:
        if not _is_stack_dir(state_dir):
            (state_dir / STATE_FILE).unlink(missing_ok=True)
    else:
        recorded = read_state(state_dir)
        for service in reversed(recorded.services if recorded is not None else ()):
            if process_replaced(service.pid, service.start_time):
                left_alone.append(replaced_note(service))
            elif stop_process(service.pid, service.name, start_time=service.start_time):
                stopped.append(f"{service.name} (pid {service.pid})")
    if not keep_state and _is_stack_dir(state_dir):
        if recorded is not None:
            _remove_warehouse_beside(state_dir, recorded.warehouse)
        shutil.rmtree(state_dir, ignore_errors=True)
    return StackDown(stopped, left_alone)


def _remove_warehouse_beside(state_dir: Path, recorded: str) -> None:
    """Remove the stack's local warehouse when it lies outside the state directory (as the state
    directory's own ``warehouse`` goes with it): only the folder this stack recorded and would choose."""
    warehouse = local_warehouse(state_dir)
    if Path(recorded) == warehouse and state_dir not in warehouse.parents:
        shutil.rmtree(warehouse, ignore_errors=True)


def stack_down(state_dir: Path, keep_state: bool = False) -> list[str]:
    """Stop every recorded service by its pid and remove the state. Returns what was stopped."""
    return stop_stack(state_dir, keep_state).stopped
