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

from acidclean.deploy.local.provision import Services, provide_services
from acidclean.shared.hive_metastore import HiveMetastore

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

    session = (
        SparkSession.builder.master("local[2]")
        .appName("acidclean-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.warehouse.dir", tempfile.mkdtemp(prefix="acidclean-spark-warehouse-"))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def unique_name() -> str:
    """A short name no other test uses: for topic prefixes, databases and tables."""
    return "t" + uuid.uuid4().hex[:10]
