"""Safety rule 1, fail closed: the metastore stops for 30 s while cleanups are pending.

This test starts its own Hive Metastore (the shared one must not be stopped), stops it by pid,
restarts it on the same port with the same Derby directory, and stops it again at the end.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cleaner_support import Watcher, cleaner_settings, create_table, publish, running_cleaner, start_reader
from private_metastore import PrivateMetastore

from acidclean.shared.hive_metastore import HiveMetastore

pytestmark = [pytest.mark.integration, pytest.mark.rule1]
OUTAGE_S = 30.0


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
