"""The local stack as one unit: up, status, down.

``up`` starts Kafka and, beside it, the storage service (``--storage hdfs`` or ``s3``; none for the
local disk) followed by the Hive Metastore whose warehouse lives there (the machine has two cores and
these JVMs spend their start-up mostly waiting), and records what runs where in ``stack.json`` in the
state directory. ``up`` on a running stack returns the running stack. ``down`` stops each service by
the process id recorded at start and removes the state directory.
"""

from __future__ import annotations

import json
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from acidclean.deploy.local.kafka import kafka_ready, start_kafka
from acidclean.deploy.local.metastore import metastore_ready, start_metastore
from acidclean.deploy.local.process import StartedProcess, pid_alive, port_accepts, stop_process
from acidclean.deploy.local.storage import StorageService, check_storage, start_storage
from acidclean.shared.errors import StackError

STATE_FILE = "stack.json"


@dataclass(frozen=True)
class ServiceInfo:
    name: str
    pid: int
    address: str
    log_file: str
    seconds_to_ready: float


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
        raw = json.loads(text)
        return StackInfo(
            state_dir=raw["state_dir"],
            kafka=ServiceInfo(**raw["kafka"]),
            metastore=ServiceInfo(**raw["metastore"]),
            metastore_flavour=raw["metastore_flavour"],
            warehouse=raw["warehouse"],
            started_at=raw["started_at"],
            storage=raw.get("storage", "local"),
            storage_service=ServiceInfo(**raw["storage_service"]) if raw.get("storage_service") else None,
            environment=dict(raw.get("environment") or {}),
        )


def _service(process: StartedProcess, address: str) -> ServiceInfo:
    return ServiceInfo(process.name, process.pid, address, str(process.log_file), round(process.seconds_to_ready, 2))


def read_state(state_dir: Path) -> StackInfo | None:
    state_file = state_dir / STATE_FILE
    if not state_file.exists():
        return None
    return StackInfo.from_json(state_file.read_text(encoding="utf-8"))


def service_status(info: ServiceInfo) -> str:
    """``running``, ``not answering`` (process alive, probe fails) or ``stopped``."""
    if not pid_alive(info.pid):
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
        service = start_storage(state_dir, storage, metastore_flavour)
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
            stop_process(process.pid, process.name)
        raise StackError("\n\n".join(failures))
    kafka_process, bootstrap = results["kafka"]
    metastore_process, uri = results["metastore"]
    service = storage_started[0]
    info = StackInfo(
        state_dir=str(state_dir),
        kafka=_service(kafka_process, bootstrap),
        metastore=_service(metastore_process, uri),
        metastore_flavour=metastore_flavour,
        warehouse=service.warehouse_uri or str(state_dir / "warehouse"),
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


def stack_down(state_dir: Path, keep_state: bool = False) -> list[str]:
    """Stop every recorded service by its pid and remove the state. Returns what was stopped."""
    state_dir = state_dir.resolve()
    info = read_state(state_dir)
    stopped: list[str] = []
    if info is not None:
        for service in reversed(info.services):
            if stop_process(service.pid, service.name):
                stopped.append(f"{service.name} (pid {service.pid})")
    if not keep_state and _is_stack_dir(state_dir):
        shutil.rmtree(state_dir, ignore_errors=True)
    return stopped
