"""Safety rule 1, fail closed: the metastore stops for 30 s while cleanups are pending.

This test starts its own Hive Metastore (the shared one must not be stopped), stops it by pid,
restarts it on the same port with the same Derby directory, and stops it again at the end.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cleaner_support import Watcher, cleaner_settings, create_table, publish, running_cleaner, start_reader

import acidclean.deploy.local.metastore as local_metastore
from acidclean.deploy.local.process import free_port, stop_process
from acidclean.shared.errors import StackError
from acidclean.shared.hive_metastore import HiveMetastore

pytestmark = [pytest.mark.integration, pytest.mark.rule1]
OUTAGE_S = 30.0


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
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.port = free_port()
        self.uri = f"thrift://127.0.0.1:{self.port}"
        self.pid: int | None = None

    def start(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(local_metastore, "ensure_port_free", _port_free_for_a_server)
        process, uri = local_metastore.start_metastore(self.state_dir, "hive2", port=self.port)
        assert uri == self.uri
        self.pid = process.pid

    def stop(self) -> None:
        if self.pid is not None:
            stop_process(self.pid, "private Hive Metastore")
            self.pid = None


@pytest.fixture
def private_metastore(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PrivateMetastore]:
    metastore = PrivateMetastore(tmp_path / "metastore-state")
    metastore.start(monkeypatch)
    try:
        yield metastore
    finally:
        metastore.stop()


def test_metastore_outage_deletes_nothing_and_every_pending_cleanup_completes_after_it_returns(
    private_metastore: PrivateMetastore,
    tmp_path: Path,
    kafka_bootstrap: str,
    unique_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = tmp_path / "data"
    settings = cleaner_settings(kafka_bootstrap, private_metastore.uri, root, unique_name, interval_ms=300)
    watcher = Watcher(settings)
    client = HiveMetastore(private_metastore.uri, 3.0)
    try:
        tables = [create_table(client, root, f"{unique_name}{i}") for i in range(3)]
        for table in tables:
            table.commit_deltas(3)
        reader = start_reader(client, tables[0])
        waiting = tables[0].minor_vacuum()  # waits for the reader, then for the outage
        ready = [table.minor_vacuum() for table in tables[1:]]  # nothing holds them but the outage
        before = {table.name: table.children() for table in tables}

        with running_cleaner(settings):
            publish(settings, waiting)
            watcher.wait_for(lambda: watcher.delays(waiting), 20, "the waiting vacuum's first delay")
            reader.release()
            private_metastore.stop()
            client.close()
            outage_started = time.monotonic()
            publish(settings, *ready)
            while time.monotonic() - outage_started < OUTAGE_S:
                assert {table.name: table.children() for table in tables} == before
                assert all(watcher.done(v) == [] for v in [waiting, *ready])
                time.sleep(0.5)
            failed_checks = [e for v in [waiting, *ready] for e in watcher.delays(v) if e.check_error]
            assert len(failed_checks) >= 3 and all("metastore" in e.check_error for e in failed_checks)

            private_metastore.start(monkeypatch)
            returned = time.monotonic()
            watcher.wait_for(lambda: all(watcher.done(v) for v in [waiting, *ready]), 30, "every CleanupDone")
            caught_up_s = time.monotonic() - returned
        for table, vacuum in zip(tables, [waiting, *ready], strict=True):
            [done] = watcher.done(vacuum)
            assert len(done.directories_removed) == 3
            assert table.children() == vacuum.new_directories
        assert caught_up_s < 10, caught_up_s
    finally:
        watcher.close()
        with contextlib.suppress(Exception):
            client.close()
