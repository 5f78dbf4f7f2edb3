"""The local stack as one unit: up, status, down.

``up`` starts Kafka and the Hive Metastore concurrently (the machine has two cores and both are
JVMs that spend their start-up mostly waiting) and records what runs where in ``stack.json`` in the
state directory. ``up`` on a running stack returns the running stack. ``down`` stops each service by
the process id recorded at start and removes the state directory.
"""

from __future__ import annotations

import json
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from acidclean.deploy.local.kafka import kafka_ready, start_kafka
from acidclean.deploy.local.metastore import metastore_ready, start_metastore
from acidclean.deploy.local.process import StartedProcess, pid_alive, stop_process
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
    else:
        answering = kafka_ready(info.address)
    return "running" if answering else "not answering"


def stack_up(
    state_dir: Path,
    metastore_flavour: str = "hive2",
    kafka_port: int | None = None,
    metastore_port: int | None = None,
) -> tuple[StackInfo, bool]:
    """Start the stack, or return the one already running. The flag says whether it was started now."""
    state_dir = state_dir.resolve()
    existing = read_state(state_dir)
    if existing is not None:
        statuses = {service_status(existing.kafka), service_status(existing.metastore)}
        if statuses == {"running"}:
            if existing.metastore_flavour != metastore_flavour:
                raise StackError(
                    f"a stack with a {existing.metastore_flavour} metastore already runs from {state_dir}; "
                    "run `acidclean stack down` first to switch flavours"
                )
            return existing, False
        stack_down(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    with ThreadPoolExecutor(max_workers=2) as pool:
        kafka_future = pool.submit(start_kafka, state_dir, kafka_port)
        metastore_future = pool.submit(start_metastore, state_dir, metastore_flavour, metastore_port)
        failures: list[str] = []
        results = {}
        for name, future in (("kafka", kafka_future), ("metastore", metastore_future)):
            try:
                results[name] = future.result()
            except StackError as error:
                failures.append(str(error))
    if failures:
        for process, _ in results.values():
            stop_process(process.pid, process.name)
        raise StackError("\n\n".join(failures))
    kafka_process, bootstrap = results["kafka"]
    metastore_process, uri = results["metastore"]
    info = StackInfo(
        state_dir=str(state_dir),
        kafka=_service(kafka_process, bootstrap),
        metastore=_service(metastore_process, uri),
        metastore_flavour=metastore_flavour,
        warehouse=str(state_dir / "warehouse"),
        started_at=started,
    )
    (state_dir / STATE_FILE).write_text(info.to_json(), encoding="utf-8")
    return info, True


OWN_ENTRIES = {STATE_FILE, "kafka", "metastore", "logs", "warehouse", "outbox", "demo"}


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
        for service in (info.kafka, info.metastore):
            if stop_process(service.pid, service.name):
                stopped.append(f"{service.name} (pid {service.pid})")
    if not keep_state and _is_stack_dir(state_dir):
        shutil.rmtree(state_dir, ignore_errors=True)
    return stopped
