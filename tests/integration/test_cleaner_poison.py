"""No poison event loops the cleaner group, on the real stack (issue 10, item 6).

Each test puts a bad record in front of a good one on a one-partition topic: the bad one must end
(dead letter, a delay that fits, a clamped due time) and the good one behind it must be cleaned
exactly once, with the group's offset past both.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from cleaner_support import (
    Watcher,
    cleaner_settings,
    create_table,
    publish,
    running_cleaner,
    start_reader,
)
from confluent_kafka import Consumer, TopicPartition

from acidclean.consumers.cleaner_process import CleanerProcess, cleaner_group_id
from acidclean.consumers.rules.readiness import Readiness
from acidclean.consumers.scheduling import delay_envelope
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.settings import Settings
from acidclean.shared.storage import StorageError, open_location

pytestmark = [pytest.mark.integration, pytest.mark.rule5]
INTERVAL_S = 0.3


@pytest.fixture
def settings(kafka_bootstrap: str, metastore_uri: str, tmp_path: Path, unique_name: str) -> Settings:
    # One partition per topic: the good record is behind the bad one in the same partition.
    return cleaner_settings(
        kafka_bootstrap, metastore_uri, tmp_path, unique_name, interval_ms=int(INTERVAL_S * 1000), partitions=1
    )


@pytest.fixture
def watcher(settings: Settings) -> Iterator[Watcher]:
    watching = Watcher(settings)
    yield watching
    watching.close()


def committed_offset(settings: Settings, topic_name: str) -> int:
    """The cleaner group's committed offset on partition 0 of a topic (read after the cleaner stopped)."""
    consumer = Consumer({"bootstrap.servers": settings.bootstrap_servers, "group.id": cleaner_group_id(settings)})
    try:
        [committed] = consumer.committed([TopicPartition(settings.topic(topic_name), 0)], timeout=10)
        return int(committed.offset)
    finally:
        consumer.close()


def wait_assigned(cleaner: CleanerProcess, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while len(cleaner.loop.states) < 2:  # the vacuum and the delay topic's one partition
        assert time.monotonic() < deadline, "the cleaner was not assigned its partitions"
        time.sleep(0.05)


def test_a_poison_location_is_dead_lettered_once_and_the_vacuum_behind_it_is_cleaned_once(
    metastore: HiveMetastore, tmp_path: Path, settings: Settings, watcher: Watcher, unique_name: str
) -> None:
    poisoned = create_table(metastore, tmp_path, unique_name + "p")
    poisoned.commit_deltas(2)
    poison = poisoned.minor_vacuum(location="hdfs://[nn/x")  # urlparse: ValueError "Invalid IPv6 URL"
    before = poisoned.children()
    good = create_table(metastore, tmp_path, unique_name + "g")
    good.commit_deltas(2)
    valid = good.minor_vacuum()
    with running_cleaner(settings):
        publish(settings, poison, valid)
        [rejected] = watcher.wait_for(lambda: watcher.rejected(poison), 15, "the poison's dead letter")
        watcher.wait_for(lambda: watcher.done(valid), 15, "the valid vacuum's CleanupDone")
        time.sleep(10 * INTERVAL_S)  # the bug rewound the partition every interval, republishing each time
    assert rejected.reason_code == "unsafe_path" and "hdfs://[nn/x" in rejected.reason
    assert len(watcher.rejected(poison)) == 1
    assert len(watcher.done(valid)) == 1 and len(watcher.started(valid)) == 1
    assert poisoned.children() == before
    assert good.children() == valid.new_directories
    assert committed_offset(settings, "vacuum_committed") == 2


@dataclass
class FailingDeletes:
    """The real local storage, except that deleting fails while ``failing`` is set."""

    failing: bool = True

    def fail(self, path: str) -> None:
        if self.failing:
            raise StorageError(f"cannot delete {path}: permission denied (injected by the test)")

    def open(self, uri: str) -> Any:
        location = open_location(uri)
        outer = self

        class Fs:
            def __getattr__(self, name: str) -> Any:
                return getattr(location.fs, name)

            def delete_dir(self, path: str) -> None:
                outer.fail(path)
                location.fs.delete_dir(path)

            def delete_files(self, directory: str, names: Any) -> None:  # the cleaner's deletes (rule 9)
                outer.fail(directory)
                location.fs.delete_files(directory, names)

        class Location:
            fs = Fs()
            path = location.path

            def child(self, name: str) -> str:
                return location.child(name)

        return Location()


def test_forty_failed_deletes_delay_the_vacuum_with_an_error_text_that_fits(
    metastore: HiveMetastore, tmp_path: Path, settings: Settings, watcher: Watcher, unique_name: str
) -> None:
    table = create_table(metastore, tmp_path, unique_name)
    singles = table.commit_deltas(40)
    vacuum = table.minor_vacuum()
    storage = FailingDeletes()
    with running_cleaner(settings, open_storage=storage.open):
        publish(settings, vacuum)
        delays = watcher.wait_for(lambda: watcher.delays(vacuum), 20, "a delay envelope after the failed deletes")
        assert set(singles) <= set(table.children())
        storage.failing = False
        [done] = watcher.wait_for(lambda: watcher.done(vacuum), 15, "CleanupDone once deletes work")
        time.sleep(5 * INTERVAL_S)
    error = delays[0].check_error
    assert error is not None and error.startswith("delete failed: ") and len(error) <= 4096
    assert "characters cut]" in error
    assert len(watcher.done(vacuum)) == 1 and watcher.rejected(vacuum) == []
    assert sorted(d.name for d in done.directories_removed) == sorted(singles)
    assert table.children() == vacuum.new_directories
    assert committed_offset(settings, "vacuum_committed") == 1


def test_an_envelope_due_a_day_ahead_does_not_hold_the_vacuum_behind_it(
    metastore: HiveMetastore,
    tmp_path: Path,
    settings: Settings,
    watcher: Watcher,
    unique_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    skewed_table = create_table(metastore, tmp_path, unique_name + "s")
    skewed_table.commit_deltas(2)
    reader = start_reader(metastore, skewed_table)  # keeps the skewed one waiting after its early re-check
    skewed_vacuum = skewed_table.minor_vacuum()
    good = create_table(metastore, tmp_path, unique_name + "g")
    good.commit_deltas(2)
    valid = good.minor_vacuum()
    try:
        with caplog.at_level(logging.WARNING, logger="acidclean.cleaner"), running_cleaner(settings) as cleaner:
            wait_assigned(cleaner)
            now = datetime.now(timezone.utc)
            skewed = delay_envelope(
                skewed_vacuum,
                Readiness(False, tuple(skewed_vacuum.lock_snapshot)),
                now=now,
                interval_ms=settings.cleanup_interval_ms,
                max_wait_s=3600,
                due=now + timedelta(hours=24),  # a clock 24 h ahead, or a bad record
            )
            behind = delay_envelope(
                valid,
                Readiness(False, ()),
                now=now,
                interval_ms=settings.cleanup_interval_ms,
                max_wait_s=3600,
            )
            published = time.time()
            publish(settings, skewed, behind)
            [done] = watcher.wait_for(lambda: watcher.done(valid), 15, "the CleanupDone of the vacuum behind")
            waited = watcher.arrival(done.event_id) - published  # type: ignore[operator]
            rechecked = watcher.wait_for(
                lambda: [e for e in watcher.delays(skewed_vacuum) if e.attempt == 2], 10, "the early re-check"
            )
        # Due one interval after publishing; a few intervals, not a day (scheduling noise on a 2-core box).
        assert waited < INTERVAL_S + 3.0, waited
        assert good.children() == valid.new_directories
        assert set(skewed_table.children()) > set(skewed_vacuum.new_directories)  # its reader still reads
        assert rechecked[0].due_at - rechecked[0].occurred_at == timedelta(seconds=INTERVAL_S)
        clamped = [r for r in caplog.records if "clamped" in r.getMessage()]
        assert clamped, "no warning about the clamped due time"
        fields = clamped[0].acidclean_fields  # type: ignore[attr-defined]
        assert fields["event_id"] == skewed.event_id and fields["due_at"] == skewed.due_at.isoformat()
        assert "clamped_to" in fields
        assert committed_offset(settings, "cleanup_delay") == 2
    finally:
        reader.release()
