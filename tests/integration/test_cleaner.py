"""The cleaner against the real stack: Kafka, the Hive Metastore, real locks and real files.

Each test has its own topics (prefix), consumer group and table directories; the cleaner runs in a
thread of the test process with a 300 ms interval.
"""

from __future__ import annotations

import contextlib
import os
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.orc as pa_orc
import pytest
from cleaner_support import (
    OTHER_TENANT,
    TENANT,
    CountingMetastore,
    Table,
    Watcher,
    cleaner_settings,
    create_table,
    publish,
    running_cleaner,
    start_reader,
)

from acidclean.consumers.cleaner_process import CleanerOptions
from acidclean.consumers.rules.readiness import COMMIT_MARGIN
from acidclean.deploy.local.process import free_port
from acidclean.shared.acid.names import delta_name
from acidclean.shared.bus.bundle import unpack
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.settings import Settings

pytestmark = pytest.mark.integration
INTERVAL_S = 0.3


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def settings(kafka_bootstrap: str, metastore_uri: str, root: Path, unique_name: str) -> Settings:
    return cleaner_settings(kafka_bootstrap, metastore_uri, root, unique_name, interval_ms=int(INTERVAL_S * 1000))


@pytest.fixture
def watcher(settings: Settings) -> Iterator[Watcher]:
    watching = Watcher(settings)
    yield watching
    watching.close()


def readable(table: Table, names: list[str]) -> bool:
    """Every bucket file of ``names`` opens and reads as ORC."""
    for name in names:
        pa_orc.read_table(str(table.location / name / "bucket_00000"))
    return True


@pytest.mark.rule1
def test_seed_story_reader_before_the_vacuum_delays_then_the_cleanup_follows_its_release(
    metastore: HiveMetastore, root: Path, settings: Settings, watcher: Watcher, unique_name: str
) -> None:
    table = create_table(metastore, root, unique_name)
    singles = table.commit_deltas(3)
    reader = start_reader(metastore, table)  # locks before it lists, before the vacuum commits
    vacuum = table.minor_vacuum()
    assert [entry.lock_id for entry in vacuum.lock_snapshot] == [reader.lock_id]
    port = free_port()
    with running_cleaner(settings, CleanerOptions(cleaner_id="it-seed", metrics_port=port)):
        publish(settings, vacuum)
        watcher.wait_for(lambda: len(watcher.delays(vacuum)) >= 2, 20, "two requeues")
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:  # the reader's files stay readable the whole time
            assert readable(table, singles)
            time.sleep(0.1)
        assert watcher.done(vacuum) == []
        assert set(singles) <= set(table.children())
        released = time.time()
        reader.release()
        [done] = watcher.wait_for(lambda: watcher.done(vacuum), 10, "CleanupDone")
        gone_within = watcher.arrival(done.event_id) - released  # type: ignore[operator]
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert gone_within <= INTERVAL_S + 1.0, gone_within
    assert table.children() == [delta_name(min(table.write_ids), max(table.write_ids))]
    assert [(d.name, d.file_count) for d in done.directories_removed] == [(name, 2) for name in singles]
    assert all(d.bytes > 0 for d in done.directories_removed)
    assert done.attempts >= 2 and done.cleaner_id == "it-seed"
    assert [e.lock_id for e in watcher.delays(vacuum)[0].locks_held] == [reader.lock_id]
    assert 'acidclean_cleaner_events_total{outcome="cleaned"} 1.0' in metrics
    assert "acidclean_cleaner_lateness_seconds_bucket" in metrics


@pytest.mark.rule2
def test_reader_that_locked_after_the_vacuum_does_not_delay_the_cleanup(
    metastore: HiveMetastore, root: Path, settings: Settings, watcher: Watcher, unique_name: str
) -> None:
    table = create_table(metastore, root, unique_name)
    table.commit_deltas(3)
    vacuum = table.minor_vacuum()
    # Past the commit margin (clock skew): a reader locking within it is waited for too (rule 1).
    time.sleep(COMMIT_MARGIN.total_seconds() + 0.5)
    late_reader = start_reader(metastore, table)  # listed after the rename: reads the new delta
    try:
        with running_cleaner(settings):
            publish(settings, vacuum)
            [done] = watcher.wait_for(lambda: watcher.done(vacuum), 15, "CleanupDone")
        assert done.attempts == 1 and len(done.directories_removed) == 3
        assert watcher.delays(vacuum) == []
    finally:
        late_reader.release()


@pytest.mark.rule1
def test_a_table_level_reader_holds_back_every_partition_and_one_show_locks_serves_them_all(
    metastore: HiveMetastore, root: Path, settings: Settings, watcher: Watcher, unique_name: str
) -> None:
    partitions = [create_table(metastore, root, unique_name, partition="ds=1")]
    for value in (2, 3):
        uri = metastore.add_partition(partitions[0].db, unique_name, f"ds={value}")
        location = Path(uri.removeprefix("file:"))
        location.mkdir(parents=True, exist_ok=True)
        partitions.append(Table(metastore, partitions[0].db, unique_name, location, f"ds={value}"))
    for table in partitions:
        table.commit_deltas(2)
    reader = start_reader(metastore, partitions[0])  # one lock on the whole table
    vacuums = [table.minor_vacuum() for table in partitions]
    counting = CountingMetastore(settings.metastore_uris)
    with running_cleaner(settings, metastore_factory=counting.client):
        publish(settings, *vacuums)
        watcher.wait_for(lambda: all(len(watcher.delays(v)) >= 4 for v in vacuums), 30, "four rounds of checks")
        assert all(watcher.done(v) == [] for v in vacuums)
        reader.release()
        watcher.wait_for(lambda: all(watcher.done(v) for v in vacuums), 15, "three CleanupDone")
    rounds = max(envelope.attempt for v in vacuums for envelope in watcher.delays(v)) + 1
    assert counting.calls["show_locks"] <= rounds + 2, (counting.calls, rounds)  # not 3 per round
    for table in partitions:
        assert table.children() == [delta_name(min(table.write_ids), max(table.write_ids))]


def test_a_waiting_table_never_blocks_another_tables_cleanup(
    metastore: HiveMetastore, root: Path, settings: Settings, watcher: Watcher, unique_name: str
) -> None:
    waiting = create_table(metastore, root, unique_name + "w")
    waiting.commit_deltas(2)
    reader = start_reader(metastore, waiting)
    blocked = waiting.minor_vacuum()
    free = create_table(metastore, root, unique_name + "f")
    free.commit_deltas(2)
    try:
        with running_cleaner(settings):
            publish(settings, blocked)
            watcher.wait_for(lambda: watcher.delays(blocked), 15, "a delay")
            vacuum = free.minor_vacuum()
            published = time.time()
            publish(settings, vacuum)
            [done] = watcher.wait_for(lambda: watcher.done(vacuum), 10, "the free table's CleanupDone")
            # Blocked would mean never (the reader holds its lock to the end); on a loaded 2-core box
            # a few hundred ms of scheduling noise is normal, hence the margin.
            assert watcher.arrival(done.event_id) - published < 3.0  # type: ignore[operator]
            assert watcher.done(blocked) == []
    finally:
        reader.release()


@pytest.mark.rule4
def test_unsafe_or_invalid_events_go_to_the_dead_letter_topic_and_delete_nothing(
    metastore: HiveMetastore, root: Path, settings: Settings, watcher: Watcher, unique_name: str
) -> None:
    outside = root / "outside" / "victim"
    outside.mkdir(parents=True)
    (outside / "precious").write_text("keep me")
    cases: dict[str, tuple[Any, Table]] = {}

    traversal = create_table(metastore, root, unique_name + "a")
    traversal.commit_deltas(3)
    cases["unsafe_path"] = (traversal.minor_vacuum(obsolete=[delta_name(1, 1, 0) + "/../../../outside"]), traversal)

    other = create_table(metastore, root, unique_name + "b", tenant=OTHER_TENANT)
    other.commit_deltas(3)
    other.tenant = "acme"  # an acme event pointing into globex's root
    cases["other_tenant"] = (other.minor_vacuum(), other)

    linked = create_table(metastore, root, unique_name + "c")
    singles = linked.commit_deltas(3)
    os.rename(linked.location / singles[1], root / "outside" / "moved")
    os.symlink(outside, linked.location / singles[1])  # a delta that leads out of the table
    cases["symlink"] = (linked.minor_vacuum(), linked)

    unknown = create_table(metastore, root, unique_name + "d")
    unknown.commit_deltas(3)
    cases["unknown_table"] = (unknown.minor_vacuum(table=f"{unknown.db}.{unique_name}zz"), unknown)

    uncovered = create_table(metastore, root, unique_name + "e")
    uncovered.commit_deltas(3)
    event = uncovered.minor_vacuum()
    (uncovered.location / event.new_directories[0]).rename(uncovered.location / "_tmp_lost")  # nothing covers them
    cases["not_obsolete"] = (event, uncovered)

    before = {name: table.children() for name, (_, table) in cases.items()}
    with running_cleaner(settings):
        publish(settings, *(event for event, _ in cases.values()))
        watcher.wait_for(lambda: all(watcher.rejected(e) for e, _ in cases.values()), 20, "five dead letters")
    codes = {name: watcher.rejected(e)[0].reason_code for name, (e, _) in cases.items()}
    assert codes == {
        "unsafe_path": "unsafe_path",
        "other_tenant": "other_tenant",
        "symlink": "unsafe_path",
        "unknown_table": "unknown_table",
        "not_obsolete": "not_obsolete",
    }
    assert "symbolic link" in watcher.rejected(cases["symlink"][0])[0].reason
    for name, (e, table) in cases.items():
        assert table.children() == before[name], name
        assert watcher.done(e) == []
    assert (outside / "precious").read_text() == "keep me"


def test_a_table_dropped_meanwhile_reports_done_with_nothing_removed(
    metastore: HiveMetastore, root: Path, settings: Settings, watcher: Watcher, unique_name: str
) -> None:
    table = create_table(metastore, root, unique_name)
    table.commit_deltas(2)
    vacuum = table.minor_vacuum()
    metastore.drop_table(table.db, table.name, delete_data=True)
    if table.location.exists():  # the metastore removes a managed table's data; make sure
        import shutil

        shutil.rmtree(table.location)
    with running_cleaner(settings):
        publish(settings, vacuum)
        [done] = watcher.wait_for(lambda: watcher.done(vacuum), 15, "CleanupDone")
    assert done.directories_removed == [] and "dropped" in (done.note or "")
    assert watcher.rejected(vacuum) == []


def test_a_vacuum_waiting_past_the_max_wait_is_reported_stuck_and_keeps_waiting(
    metastore: HiveMetastore, root: Path, kafka_bootstrap: str, metastore_uri: str, watcher: Watcher, unique_name: str
) -> None:
    settings = cleaner_settings(kafka_bootstrap, metastore_uri, root, unique_name, interval_ms=300, max_wait_s=1.0)
    table = create_table(metastore, root, unique_name)
    singles = table.commit_deltas(2)
    reader = start_reader(metastore, table)
    vacuum = table.minor_vacuum()
    port = free_port()
    with running_cleaner(settings, CleanerOptions(cleaner_id="it-stuck", metrics_port=port)):
        publish(settings, vacuum)
        stuck = watcher.wait_for(lambda: [e for e in watcher.delays(vacuum) if e.stuck], 15, "a stuck envelope")
        time.sleep(1.0)
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert set(singles) <= set(table.children())  # a live reader's lock is never overridden
        reader.release()
        [done] = watcher.wait_for(lambda: watcher.done(vacuum), 10, "CleanupDone after the release")
    holder = stuck[0].locks_held[0]
    assert (holder.lock_id, holder.user, holder.host) == (reader.lock_id, metastore.user, metastore.hostname)
    assert stuck[0].stuck_since is not None and all(e.stuck_since == stuck[0].stuck_since for e in stuck)
    assert "acidclean_cleaner_stuck_events 1.0" in metrics
    assert len(done.directories_removed) == 2


@pytest.mark.rule4
def test_a_tenants_cleaner_skips_other_tenants_events_on_shared_topics_and_never_touches_their_paths(
    metastore: HiveMetastore, root: Path, settings: Settings, watcher: Watcher, unique_name: str
) -> None:
    ours = create_table(metastore, root, unique_name + "a")
    ours.commit_deltas(2)
    theirs = create_table(metastore, root, unique_name + "g", tenant=OTHER_TENANT)
    theirs.commit_deltas(2)
    our_vacuum, their_vacuum = ours.minor_vacuum(), theirs.minor_vacuum()
    before = theirs.children()
    with running_cleaner(settings):  # tenant acme
        publish(settings, their_vacuum, our_vacuum)
        watcher.wait_for(lambda: watcher.done(our_vacuum), 15, "acme's CleanupDone")
        time.sleep(1.0)
        assert theirs.children() == before
        assert watcher.done(their_vacuum) == [] and watcher.rejected(their_vacuum) == []
        globex = settings.model_copy(update={"tenant": OTHER_TENANT})
        with running_cleaner(globex):  # its own group (…cleaner.globex) on the same topics
            watcher.wait_for(lambda: watcher.done(their_vacuum), 15, "globex's CleanupDone")
    assert theirs.children() == their_vacuum.new_directories
    assert len(watcher.done(our_vacuum)) == 1


def bundled_keys(watcher: Watcher) -> list[set[bytes]]:
    """The member keys of each bundle the watcher read, in order."""
    keys = []
    for record in list(watcher.bundles):
        bundle = unpack(record)
        assert bundle is not None, record
        keys.append({member.key or b"" for member in bundle.members})
    return keys


@pytest.mark.rule1
def test_many_waiting_tables_go_on_in_bundles_and_each_is_cleaned_when_its_own_reader_leaves(
    kafka_bootstrap: str, metastore_uri: str, metastore: HiveMetastore, root: Path, unique_name: str
) -> None:
    """Eight tables of one delay partition, two vacuums each, every one behind its own reader: their
    records go on in one bundle (produced to that partition, read back by the real consumer); a
    released reader's table leaves the bundle and is cleaned, while the others' files stay.

    The bundle spread is the whole interval: the default 10 ms packs only tables checked within 10 ms
    of each other, and on a slow machine eight checks take longer than that. The spread is also how
    long the loop gathers due records of one table each: tables first checked in separate batches (a
    slow first fetch) are then checked again in one batch and meet in one bundle."""
    settings = cleaner_settings(
        kafka_bootstrap,
        metastore_uri,
        root,
        unique_name,
        interval_ms=500,
        partitions=1,
        threads=1,
        bundle_min=4,
        bundle_spread_ms=500,
    )
    watcher = Watcher(settings)
    tables = [create_table(metastore, root, f"{unique_name}b{index}") for index in range(8)]
    keys = {f"{TENANT}/{table.full_name}".encode() for table in tables}
    readers, vacuums = [], []
    try:
        for table in tables:
            table.commit_deltas(2)
            readers.append(start_reader(metastore, table))
            first = table.minor_vacuum()
            table.commit_deltas(1)
            vacuums.append([first, table.minor_vacuum()])
        with running_cleaner(settings):
            publish(settings, *[vacuum for pair in vacuums for vacuum in pair])
            watcher.wait_for(lambda: keys in bundled_keys(watcher), 30, "one bundle of all eight tables")
            assert all(record.partition == 0 for record in watcher.bundles)
            readers[3].release()
            for vacuum in vacuums[3]:
                watcher.wait_for(lambda vacuum=vacuum: watcher.done(vacuum), 30, "the released table's cleanup")
            rest = keys - {f"{TENANT}/{tables[3].full_name}".encode()}
            watcher.wait_for(lambda: bundled_keys(watcher)[-1] == rest, 30, "a bundle of the seven others")
            for index, pair in enumerate(vacuums):
                if index != 3:
                    assert all(watcher.done(vacuum) == [] for vacuum in pair)
                    assert set(pair[0].obsolete_directories) <= set(tables[index].children())
    finally:
        for reader in readers:
            with contextlib.suppress(Exception):  # released above, or by the test's end anyway
                reader.release()
        watcher.close()
