"""Find or start a Kafka broker and a Hive Metastore for tests, benchmarks and the demo.

For each service, first match wins: an address from the environment (``ACIDCLEAN_KAFKA_BOOTSTRAP``,
``ACIDCLEAN_METASTORE_URIS``); a container where a Docker engine answers and testcontainers is
installed (optional path); else the local JVM processes of :mod:`acidclean.deploy.local`. Services
that need starting start concurrently. :meth:`Services.stop` stops exactly what was started here,
by process id (or container id).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from acidclean.deploy.local.kafka import start_kafka
from acidclean.deploy.local.metastore import start_metastore
from acidclean.deploy.local.process import stop_process

KAFKA_ENV = "ACIDCLEAN_KAFKA_BOOTSTRAP"
METASTORE_ENV = "ACIDCLEAN_METASTORE_URIS"
FLAVOUR_ENV = "ACIDCLEAN_TEST_METASTORE"
CONTAINER_IMAGES = {"kafka": "apache/kafka:4.1.1", "hive3": "apache/hive:3.1.3", "hive4": "apache/hive:4.0.1"}


@dataclass
class Services:
    kafka_bootstrap: str
    metastore_uri: str
    metastore_flavour: str
    origin: dict[str, str]
    state_dir: Path
    _stoppers: list[Callable[[], None]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def stop(self) -> None:
        """Stop what this object started, newest first; safe to call twice."""
        with self._lock:
            while self._stoppers:
                self._stoppers.pop()()


def docker_reachable(timeout_s: float = 2.0) -> bool:
    """True when testcontainers is installed and a Docker engine answers a ping."""
    try:
        import docker
    except ImportError:
        return False
    try:
        client = docker.from_env(timeout=timeout_s)
        return bool(client.ping())
    except Exception:  # any failure simply means: no Docker here
        return False


def _kafka_container() -> tuple[str, Callable[[], None]]:
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs

    container = DockerContainer(CONTAINER_IMAGES["kafka"]).with_exposed_ports(9092)
    container.start()
    wait_for_logs(container, "Kafka Server started", timeout=120)
    address = f"{container.get_container_host_ip()}:{container.get_exposed_port(9092)}"
    return address, container.stop


def _metastore_container(flavour: str) -> tuple[str, Callable[[], None]]:
    from testcontainers.core.container import DockerContainer

    container = (
        DockerContainer(CONTAINER_IMAGES[flavour]).with_env("SERVICE_NAME", "metastore").with_exposed_ports(9083)
    )
    container.start()
    address = f"thrift://{container.get_container_host_ip()}:{container.get_exposed_port(9083)}"
    return address, container.stop


def provide_services(state_dir: Path, flavour: str | None = None) -> Services:
    """Find or start Kafka and the metastore (see the module docstring for the order). ``flavour``
    (default ``$ACIDCLEAN_TEST_METASTORE``, else ``hive2``) is one of ``FLAVOURS`` of
    :mod:`acidclean.deploy.local.metastore`: ``hive2``, ``hive3`` or ``hive4``."""
    flavour = flavour or os.environ.get(FLAVOUR_ENV, "hive2")
    state_dir = state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    services = Services("", "", flavour, {}, state_dir)
    use_docker = (KAFKA_ENV not in os.environ or METASTORE_ENV not in os.environ) and docker_reachable()
    tasks: dict[str, Callable[[], tuple[str, Callable[[], None], str]]] = {}

    if KAFKA_ENV in os.environ:
        services.kafka_bootstrap = os.environ[KAFKA_ENV]
        services.origin["kafka"] = "environment"
    elif use_docker:
        tasks["kafka"] = lambda: (*_kafka_container(), "container")
    else:

        def local_kafka() -> tuple[str, Callable[[], None], str]:
            process, bootstrap = start_kafka(state_dir)
            return bootstrap, lambda: _stop_quietly(process.pid, process.name), str(process.pid)

        tasks["kafka"] = local_kafka

    if METASTORE_ENV in os.environ:
        services.metastore_uri = os.environ[METASTORE_ENV].split(",")[0]
        services.origin["metastore"] = "environment"
    elif use_docker and flavour in ("hive3", "hive4"):
        tasks["metastore"] = lambda: (*_metastore_container(flavour), "container")
    else:

        def local_metastore() -> tuple[str, Callable[[], None], str]:
            process, uri = start_metastore(state_dir, flavour)
            return uri, lambda: _stop_quietly(process.pid, process.name), str(process.pid)

        tasks["metastore"] = local_metastore

    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(task) for name, task in tasks.items()}
        errors: list[BaseException] = []
        for name, future in futures.items():
            try:
                address, stopper, origin = future.result()
            except BaseException as error:
                errors.append(error)
                continue
            services._stoppers.append(stopper)
            services.origin[name] = origin
            if name == "kafka":
                services.kafka_bootstrap = address
            else:
                services.metastore_uri = address
    if errors:
        services.stop()
        raise errors[0]
    return services


def _stop_quietly(pid: int, name: str) -> None:
    with contextlib.suppress(Exception):
        stop_process(pid, name)
