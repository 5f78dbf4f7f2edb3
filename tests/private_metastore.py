"""A metastore of a test's own, which the test may stop by pid and restart on the same port with the same
Derby directory (the session's metastore must never be stopped): the outage tests use it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

import acidclean.deploy.local.metastore as local_metastore
from acidclean.deploy.local.process import free_port, stop_process
from acidclean.shared.errors import StackError


def _port_free_for_a_server(port: int, service: str) -> None:
    """The JVM binds with SO_REUSEADDR (Thrift's server socket does), so connections of the stopped
    metastore lingering in TIME_WAIT do not stop it from listening again; check the same way."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as error:
            raise StackError(f"{service}: port {port} is taken ({error.strerror})") from error


class PrivateMetastore:
    def __init__(self, state_dir: Path, flavour: str = "hive2") -> None:
        self.state_dir = state_dir
        self.flavour = flavour
        self.port = free_port()
        self.uri = f"thrift://127.0.0.1:{self.port}"
        self.pid: int | None = None

    def start(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(local_metastore, "ensure_port_free", _port_free_for_a_server)
        process, uri = local_metastore.start_metastore(self.state_dir, self.flavour, port=self.port)
        assert uri == self.uri
        self.pid = process.pid

    def stop(self) -> None:
        if self.pid is not None:
            stop_process(self.pid, "private Hive Metastore")
            self.pid = None
