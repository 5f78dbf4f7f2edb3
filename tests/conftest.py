"""Session-wide fixtures: one Kafka broker, one Hive Metastore and one SparkSession per test session.

Services come from the environment, else from containers where Docker answers, else from local JVM
processes started here (see ``acidclean.deploy.local.provision``). Whatever this file starts, it
stops at the end of the session by process id. Unit tests request none of these and start nothing.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings
from hypothesis_support import FAST_DEFAULT_EXAMPLES, profile
from session_signals import stop_cleanly_on_signals
from storage_support import StorageStack

from acidclean.deploy.local.provision import Services, provide_services
from acidclean.shared.hive_metastore import HiveMetastore


def pytest_configure(config: pytest.Config) -> None:
    # Not in an xdist worker (make test-fast): its pure tests start no service to stop, and execnet
    # interrupts a worker slow to finish (a loaded box) with SIGINT, which would then raise mid-teardown.
    if not hasattr(config, "workerinput"):
        stop_cleanly_on_signals()


# Hypothesis profiles, chosen by $HYPOTHESIS_PROFILE (see hypothesis_support.py): ci keeps every test's
# example count (make test); fast tries a few of each and gives no deadline, since a loaded box's pauses
# say nothing of the code (make test-fast).
hypothesis_settings.register_profile("ci", print_blob=True)
hypothesis_settings.register_profile("fast", max_examples=FAST_DEFAULT_EXAMPLES, deadline=None, print_blob=True)
hypothesis_settings.load_profile(profile())

# The fixtures that start real services: a test that asks for one, even through another fixture, is in
# the integration tier, so that `-m "not integration"` (make test-fast) starts nothing.
SERVICE_FIXTURES = frozenset({"local_stack", "spark", "hdfs_stack", "s3_stack"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unmarked = [
        item.nodeid
        for item in items
        if SERVICE_FIXTURES & set(getattr(item, "fixturenames", ()))
        and item.get_closest_marker("integration") is None
        and item.get_closest_marker("bench") is None
    ]
    if unmarked:
        raise pytest.UsageError(
            "these tests start real services without @pytest.mark.integration: mark them (or their module's "
            "pytestmark) so that -m 'not integration' starts nothing: " + ", ".join(unmarked)
        )


# Tests and benchmarks send traffic only to 127.0.0.1: every Spark they start binds to loopback.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(scope="session")
def local_stack() -> Iterator[Services]:
    state_dir = Path(tempfile.mkdtemp(prefix="acidclean-test-stack-"))
    services = provide_services(state_dir)
    atexit.register(services.stop)  # a backstop if the session dies before the finaliser runs
    try:
        yield services
    finally:
        services.stop()
        shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def kafka_bootstrap(local_stack: Services) -> str:
    return local_stack.kafka_bootstrap


@pytest.fixture(scope="session")
def metastore_uri(local_stack: Services) -> str:
    return local_stack.metastore_uri


@pytest.fixture(scope="session")
def metastore(metastore_uri: str) -> Iterator[HiveMetastore]:
    """One metastore client for the session (it is thread-safe and reconnects by itself)."""
    with HiveMetastore(metastore_uri) as client:
        yield client


@pytest.fixture(scope="session")
def metastore_flavour(local_stack: Services) -> str:
    return local_stack.metastore_flavour


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    warehouse = tempfile.mkdtemp(prefix="acidclean-spark-warehouse-")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("acidclean-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.warehouse.dir", warehouse)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
        shutil.rmtree(warehouse, ignore_errors=True)


@pytest.fixture
def unique_name() -> str:
    """A short name no other test uses: for topic prefixes, databases and tables."""
    return "t" + uuid.uuid4().hex[:10]


# -- storages: the same tests on the local disk, a real HDFS and a real S3 API server ----------------


@pytest.fixture(scope="session")
def hdfs_stack(local_stack: Services, metastore: HiveMetastore, metastore_uri: str) -> Iterator[StorageStack]:
    """A NameNode and a DataNode in one JVM, started once; the session's metastore reaches it."""
    from acidclean.deploy.local.hdfs import start_hdfs
    from acidclean.deploy.local.process import stop_process

    state_dir = local_stack.state_dir / "hdfs-storage"
    process, namenode = start_hdfs(state_dir)
    try:
        yield StorageStack(
            "hdfs",
            metastore,
            metastore_uri,
            local_stack.metastore_flavour,
            f"{namenode}/warehouse",
            {},
            request_log=state_dir / "logs" / "hdfs-audit.log",
            namenode=namenode,
        )
    finally:
        stop_process(process.pid, process.name)


@pytest.fixture(scope="session")
def s3_stack(local_stack: Services) -> Iterator[StorageStack]:
    """An S3 API server and, beside the session's metastore, a Hive 3.1.3 metastore with Hadoop's S3A
    client whose warehouse is in the server's bucket (the Hive 2.3 metastore has no S3A client)."""
    from acidclean.deploy.local.metastore import start_metastore
    from acidclean.deploy.local.process import stop_process
    from acidclean.deploy.local.s3 import s3_request_log, s3a_jars, s3a_metastore_settings, start_s3

    state_dir = local_stack.state_dir / "s3-storage"
    jars = s3a_jars(state_dir / "logs")
    server, endpoint = start_s3(state_dir)
    stoppers = [lambda: stop_process(server.pid, server.name)]
    saved = {name: os.environ.get(name) for name in endpoint.environment()}
    os.environ.update(endpoint.environment())
    try:
        process, uri = start_metastore(
            state_dir,
            "hive3",
            warehouse_uri=endpoint.uri("warehouse"),
            extra_settings=s3a_metastore_settings(endpoint),
            extra_classpath=(jars,),
        )
        stoppers.append(lambda: stop_process(process.pid, process.name))
        with HiveMetastore(uri) as client:
            yield StorageStack(
                "s3",
                client,
                uri,
                "hive3",
                endpoint.uri("warehouse"),
                endpoint.environment(),
                request_log=s3_request_log(state_dir),
                s3_endpoint=endpoint,
            )
    finally:
        for stop in reversed(stoppers):
            stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(params=["local", "hdfs", "s3"])
def storage(request: pytest.FixtureRequest, local_stack: Services) -> StorageStack:
    """Each storage in turn (HDFS and S3 start once, the first time a test asks for them)."""
    if request.param == "hdfs":
        return request.getfixturevalue("hdfs_stack")  # type: ignore[no-any-return]
    if request.param == "s3":
        return request.getfixturevalue("s3_stack")  # type: ignore[no-any-return]
    return StorageStack(
        "local",
        request.getfixturevalue("metastore"),
        local_stack.metastore_uri,
        local_stack.metastore_flavour,
        None,
        {},
    )
