"""Start failures of the local stack give one clear paragraph: the cause, what to do, the log tail."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from acidclean.deploy.local import jars
from acidclean.deploy.local.kafka import start_kafka
from acidclean.deploy.local.metastore import start_metastore
from acidclean.deploy.local.process import java_executable, start_service
from acidclean.deploy.local.stack import read_state, stack_down, stack_up
from acidclean.shared.errors import StackError

pytestmark = pytest.mark.integration


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        yield listener.getsockname()[1]


def test_kafka_on_a_taken_port_names_the_port(tmp_path: Path, taken_port: int) -> None:
    with pytest.raises(StackError, match=f"Kafka cannot start: port {taken_port} on 127.0.0.1 is already taken"):
        start_kafka(tmp_path, broker_port=taken_port)


def test_metastore_on_a_taken_port_names_the_port(tmp_path: Path, taken_port: int) -> None:
    with pytest.raises(StackError, match=f"Hive Metastore cannot start: port {taken_port}"):
        start_metastore(tmp_path, "hive2", port=taken_port)


def test_stack_up_on_a_taken_port_starts_nothing_and_leaves_no_state(tmp_path: Path, taken_port: int) -> None:
    with pytest.raises(StackError, match="already taken"):
        stack_up(tmp_path / "stack", kafka_port=taken_port)
    assert read_state(tmp_path / "stack") is None


def test_missing_jar_cache_without_maven_says_to_install_maven(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACIDCLEAN_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(StackError, match=r"`mvn` was not found on the PATH: install Apache Maven"):
        jars.kafka_libs(tmp_path / "logs")


def test_refused_download_says_maven_central_is_unreachable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACIDCLEAN_CACHE_DIR", str(tmp_path / "empty-cache"))
    settings = tmp_path / "settings.xml"
    settings.write_text(
        "<settings><mirrors><mirror><id>dead</id><mirrorOf>*</mirrorOf>"
        "<url>http://127.0.0.1:9/maven2</url></mirror></mirrors>"
        f"<localRepository>{tmp_path / 'm2'}</localRepository></settings>"
    )
    monkeypatch.setenv("ACIDCLEAN_MAVEN_SETTINGS", str(settings))
    with pytest.raises(StackError, match="Maven could not fetch the jars; check that Maven Central"):
        jars.kafka_libs(tmp_path / "logs")


def test_missing_java_says_to_install_a_jdk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(StackError, match=r"`java` was not found.*Java 17"):
        java_executable()


def test_a_process_that_dies_while_starting_shows_its_log_tail(tmp_path: Path) -> None:
    with pytest.raises(StackError, match=r"exited with code 1 while starting(.|\n)*NoSuchMainClass"):
        start_service(
            "Broken service",
            [java_executable(), "-cp", str(tmp_path), "NoSuchMainClass"],
            tmp_path / "broken.log",
            ready=lambda: False,
            timeout_s=60,
        )


def test_stack_down_without_a_stack_removes_nothing_foreign(tmp_path: Path) -> None:
    keep = tmp_path / "precious.txt"
    keep.write_text("user data")
    assert stack_down(tmp_path) == []
    assert keep.read_text() == "user data"
