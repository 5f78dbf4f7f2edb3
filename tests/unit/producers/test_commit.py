"""Committing by rename, finishing interrupted commits, and the outbox that keeps unpublished events."""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from acidclean.producers.commit import (
    COMMIT_MARKER,
    SET_ASIDE_MARKER,
    CommitCollision,
    commit,
    finish_directories,
    recover_commits,
    remove_abandoned_staging,
    staging_name,
)
from acidclean.producers.outbox import DRAFT, READY, Outbox
from acidclean.producers.publish import Publisher, complete_event, flush_outbox, publish_committed
from acidclean.schemas.events import VacuumCommitted
from acidclean.shared.bus.memory import InMemoryBus
from acidclean.shared.errors import VacuumFencedError
from acidclean.shared.metastore import LockInfo
from acidclean.shared.settings import load_settings
from acidclean.shared.vacuum_marker import VACUUM_MARKER, VacuumMarker

FS = pafs.LocalFileSystem()
TARGETS = ["delete_delta_0000001_0000004", "delta_0000001_0000004"]


def stage(location: Path, job: str = "job-1") -> str:
    staging = location / staging_name(job)
    for target in TARGETS:
        (staging / target).mkdir(parents=True)
        (staging / target / "bucket_00000").write_bytes(b"orc")
    return str(staging)


def draft(location: Path, **changes: object) -> dict[str, object]:
    return {
        "event_id": str(uuid.uuid4()),
        "tenant": "default",
        "table": "db.t",
        "partition": None,
        "location": str(location),
        "compaction_type": "MINOR",
        "new_directories": TARGETS,
        "obsolete_directories": ["delta_0000001_0000001_0000"],
        "highest_write_id": 4,
        "vacuum_job_id": "local-1-job",
        "staging_dir": staging_name("job-1"),
        **changes,
    }


def test_staging_names_are_hidden_from_readers() -> None:
    assert staging_name("local-1700/x y") == "_tmp_acidclean_local-1700-x-y"


def test_commit_renames_every_target_into_place_and_removes_staging(tmp_path: Path) -> None:
    staging = stage(tmp_path)
    assert finish_directories(FS, staging, TARGETS) == TARGETS
    commit(FS, str(tmp_path), staging, TARGETS, draft(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == TARGETS
    assert (tmp_path / TARGETS[1] / "_orc_acid_version").read_text() == "2"


@pytest.mark.rule10
@pytest.mark.parametrize("base", ["base_0000004", "base_0000004_v0000009"])
def test_a_base_gets_hives_compacted_marker_and_a_minor_vacuums_deltas_only_the_version_file(
    tmp_path: Path, base: str
) -> None:
    """As Hive 3.1's compactor (CompactorOutputCommitter: ``_orc_acid_version`` in every directory,
    ``_metadata_acid`` when major). Hive 4's compactor writes the version file only (its ``_vT`` name
    marks the base compacted), and its readers honour the marker."""
    staging = stage(tmp_path)
    (Path(staging) / base).mkdir()
    finish_directories(FS, staging, [*TARGETS, base])
    for delta in TARGETS:
        assert sorted(p.name for p in (Path(staging) / delta).iterdir()) == ["_orc_acid_version", "bucket_00000"]
    assert (Path(staging) / base / "_metadata_acid").read_bytes() == b'{"thisFileVersion":"0","dataFormat":"compacted"}'
    assert (Path(staging) / base / "_orc_acid_version").read_bytes() == b"2"


def test_an_insert_target_without_rows_still_commits_and_a_delete_target_without_events_does_not(
    tmp_path: Path,
) -> None:
    staging = str(tmp_path / staging_name("j"))
    assert finish_directories(FS, staging, ["delete_delta_0000001_0000002", "base_0000002"]) == ["base_0000002"]
    assert sorted(p.name for p in (tmp_path / staging_name("j") / "base_0000002").iterdir()) == [
        "_metadata_acid",
        "_orc_acid_version",
    ]


@pytest.mark.rule6
def test_a_commit_interrupted_between_two_renames_is_finished_by_the_next_run(tmp_path: Path) -> None:
    staging = stage(tmp_path)
    content = draft(tmp_path)
    (Path(staging) / COMMIT_MARKER).write_text(json.dumps({**content, "targets": TARGETS}))
    FS.move(f"{staging}/{TARGETS[0]}", f"{tmp_path}/{TARGETS[0]}")  # the crash came after the first rename
    (recovered,) = recover_commits(FS, str(tmp_path))
    assert recovered.draft["event_id"] == content["event_id"]
    assert sorted(p.name for p in tmp_path.iterdir()) == TARGETS


def test_a_staging_directory_without_a_commit_marker_is_left_alone(tmp_path: Path) -> None:
    stage(tmp_path)
    assert recover_commits(FS, str(tmp_path)) == []
    assert [p.name for p in tmp_path.iterdir()] == [staging_name("job-1")]


def test_a_marker_naming_anything_but_acid_directories_renames_nothing_outside(tmp_path: Path) -> None:
    staging = Path(stage(tmp_path))
    (staging / "evil").mkdir()
    marker = {"event_id": "x", "targets": ["../../evil", "evil", "delta_0000001_0000004"]}
    (staging / COMMIT_MARKER).write_text(json.dumps(marker))
    recover_commits(FS, str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["delta_0000001_0000004"]


@pytest.mark.rule6
def test_a_target_committed_by_another_vacuum_sets_the_commit_aside_with_one_line_and_renames_nothing(
    tmp_path: Path,
) -> None:
    staging = stage(tmp_path)
    (tmp_path / TARGETS[1]).mkdir()  # the second target: a collision is found before the first rename
    with pytest.raises(CommitCollision) as collided:
        commit(FS, str(tmp_path), staging, TARGETS, draft(tmp_path))
    message = str(collided.value)
    assert "\n" not in message and TARGETS[1] in message and staging in message and "set aside" in message
    assert not (tmp_path / TARGETS[0]).exists(), "half a vacuum was committed"
    assert not (Path(staging) / COMMIT_MARKER).exists() and (Path(staging) / SET_ASIDE_MARKER).exists()
    assert recover_commits(FS, str(tmp_path)) == [], "a set-aside commit is never finished"


@pytest.mark.rule7
def test_a_fenced_commit_is_set_aside_before_any_rename(tmp_path: Path) -> None:
    staging = stage(tmp_path)

    def fence() -> None:
        raise VacuumFencedError("lost its vacuum lock 7")

    with pytest.raises(VacuumFencedError):
        commit(FS, str(tmp_path), staging, TARGETS, draft(tmp_path), fence=fence)
    assert sorted(p.name for p in tmp_path.iterdir()) == [staging_name("job-1")]
    note = json.loads((Path(staging) / SET_ASIDE_MARKER).read_text())
    assert "fenced" in note["reason"] and not (Path(staging) / COMMIT_MARKER).exists()


@pytest.mark.rule6
def test_an_interrupted_commit_whose_target_another_vacuum_committed_is_set_aside_not_a_wedge(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    staging = stage(tmp_path)
    content = draft(tmp_path)
    (Path(staging) / COMMIT_MARKER).write_text(json.dumps({**content, "targets": TARGETS}))
    for target in TARGETS:
        (tmp_path / target).mkdir()  # the vacuum that took over committed the same names
        other = VacuumMarker.from_draft(draft(tmp_path, vacuum_job_id="the-other-vacuum"))
        (tmp_path / target / VACUUM_MARKER).write_bytes(other.to_bytes())
    assert recover_commits(FS, str(tmp_path)) == []
    assert recover_commits(FS, str(tmp_path)) == [], "the next run finds nothing left to finish"
    assert len([r for r in caplog.records if "setting aside" in r.message]) == 1
    assert (Path(staging) / SET_ASIDE_MARKER).exists()
    outbox, bus = Outbox(tmp_path / "outbox"), InMemoryBus()
    outbox.save_draft(content)
    report = flush_outbox(outbox, LocksOnly(), publisher(bus))  # type: ignore[arg-type]
    assert report.dropped == [content["event_id"]], "the same names are another vacuum's, not this draft's"
    shutil.rmtree(staging)  # once the set-aside staging is removed, the markers still tell
    outbox.save_draft(content)
    report = flush_outbox(outbox, LocksOnly(), publisher(bus))  # type: ignore[arg-type]
    assert report.dropped == [content["event_id"]] and bus.records == {}


@pytest.mark.rule7
def test_an_interrupted_commit_over_write_ids_another_vacuum_compacted_since_is_set_aside(tmp_path: Path) -> None:
    staging = stage(tmp_path)  # delta_1_4 (+ its delete delta), planned over delta_1_1_0000
    content = draft(tmp_path)
    (Path(staging) / COMMIT_MARKER).write_text(json.dumps({**content, "targets": TARGETS}))
    (tmp_path / "delta_0000001_0000001_0000").mkdir()
    (tmp_path / "base_0000003").mkdir()  # a vacuum that took over compacted ids 1-3 meanwhile
    assert recover_commits(FS, str(tmp_path)) == []
    note = json.loads((Path(staging) / SET_ASIDE_MARKER).read_text())
    assert "base_0000003" in note["reason"] and "twice" in note["reason"]
    assert not (tmp_path / TARGETS[1]).exists()


def test_the_flush_of_another_tables_leftovers_never_raises(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    outbox, bus = Outbox(tmp_path / "outbox"), InMemoryBus()
    broken = {**draft(tmp_path), "location": "nosuchscheme://x/y"}  # its storage cannot be opened
    fine = draft(tmp_path)
    outbox.save_draft(broken)
    outbox.save_draft(fine)
    report = flush_outbox(outbox, LocksOnly(), publisher(bus))  # type: ignore[arg-type]
    assert report.skipped == [broken["event_id"]] and report.dropped == [fine["event_id"]]
    assert [r for r in caplog.records if "left for later" in r.message]


# -- outbox and publishing -------------------------------------------------------------------------


class LocksOnly:
    """The part of the metastore the event needs: ``show_locks`` and the transaction list."""

    def __init__(self, locks: list[LockInfo] | None = None, txn_high_watermark: int = 41) -> None:
        self.locks = locks or []
        self.txn_high_watermark = txn_high_watermark

    def valid_txn_list(self) -> str:
        return f"{self.txn_high_watermark}:{2**63 - 1}::"

    def show_locks(
        self, db: str | None = None, table: str | None = None, partition: str | None = None
    ) -> list[LockInfo]:
        return [lock for lock in self.locks if lock.table == table]

    def get_all_tables(self, db: str) -> list[str]:
        return []  # no other table shares the directory (tests/unit/producers/test_shared_locations.py)


READER = LockInfo(12, 7, "db", "t", None, "SHARED_READ", "ACQUIRED", "alice", "host-1", 1_700_000_000_000, None)
OTHER_TABLE = LockInfo(13, 8, "db", "u", None, "SHARED_READ", "ACQUIRED", "bob", "host-2", 1_700_000_000_000, None)


def publisher(bus: InMemoryBus) -> Publisher:
    return Publisher(load_settings(environ={}), bus)


@pytest.mark.rule2
def test_the_event_carries_the_locks_held_on_its_table_after_the_commit(tmp_path: Path) -> None:
    event = complete_event(draft(tmp_path), LocksOnly([READER, OTHER_TABLE]))  # type: ignore[arg-type]
    assert [lock.lock_id for lock in event.lock_snapshot] == [12]
    assert event.lock_snapshot[0].describe() == "lock 12 (SHARED_READ, txn 7) by alice@host-1"
    assert event.correlation_id == event.event_id


def test_an_acknowledged_event_leaves_nothing_in_the_outbox(tmp_path: Path) -> None:
    outbox, bus, content = Outbox(tmp_path / "outbox"), InMemoryBus(), draft(tmp_path)
    event = complete_event(content, LocksOnly())  # type: ignore[arg-type]
    outbox.save_event(content, event)
    outcome = publish_committed(content, event, publisher(bus), outbox)
    assert outcome.published
    assert outbox.entries() == []
    assert [e.event_id for e in bus.events("acid.vacuum.committed")] == [event.event_id]


@pytest.mark.rule6
def test_an_unacknowledged_event_stays_in_the_outbox_and_a_flush_publishes_it_once(tmp_path: Path) -> None:
    outbox, bus, content = Outbox(tmp_path / "outbox"), InMemoryBus(), draft(tmp_path)
    event = complete_event(content, LocksOnly())  # type: ignore[arg-type]
    bus.fail_next()
    outcome = publish_committed(content, event, publisher(bus), outbox)
    assert not outcome.published and "did not acknowledge" in (outcome.error or "")
    (entry,) = outbox.entries()
    assert entry.state == READY and entry.event == event and entry.last_error == outcome.error

    report = flush_outbox(outbox, LocksOnly(), publisher(bus))  # type: ignore[arg-type]
    assert [o.event.event_id for o in report.published] == [event.event_id]
    assert outbox.entries() == []
    published = bus.events("acid.vacuum.committed")
    assert len(published) == 1 and isinstance(published[0], VacuumCommitted) and published[0] == event


def test_a_draft_whose_directories_exist_is_completed_with_a_fresh_lock_snapshot(tmp_path: Path) -> None:
    for target in TARGETS:
        (tmp_path / target).mkdir()
    outbox, bus = Outbox(tmp_path / "outbox"), InMemoryBus()
    content = draft(tmp_path)
    outbox.save_draft(content)
    assert outbox.entries()[0].state == DRAFT
    report = flush_outbox(outbox, LocksOnly([READER]), publisher(bus))  # type: ignore[arg-type]
    (outcome,) = report.published
    assert str(outcome.event.event_id) == content["event_id"]
    assert [lock.lock_id for lock in outcome.event.lock_snapshot] == [12]


def test_a_draft_whose_vacuum_never_committed_is_dropped(tmp_path: Path) -> None:
    outbox, bus = Outbox(tmp_path / "outbox"), InMemoryBus()
    content = draft(tmp_path)
    outbox.save_draft(content)
    report = flush_outbox(outbox, LocksOnly(), publisher(bus))  # type: ignore[arg-type]
    assert report.dropped == [content["event_id"]] and report.published == []
    assert outbox.entries() == [] and bus.records == {}


@pytest.mark.rule6
def test_a_draft_with_a_marked_staging_directory_waits_for_its_tables_vacuum_then_is_published(tmp_path: Path) -> None:
    staging = stage(tmp_path)
    content = draft(tmp_path)
    (Path(staging) / COMMIT_MARKER).write_text(json.dumps({**content, "targets": TARGETS}))
    outbox, bus = Outbox(tmp_path / "outbox"), InMemoryBus()
    outbox.save_draft(content)
    # The flush holds no vacuum lock of that table: finishing the rename there could commit it over the
    # output of a vacuum that took over meanwhile. The table's next vacuum finishes it under its lock.
    report = flush_outbox(outbox, LocksOnly(), publisher(bus))  # type: ignore[arg-type]
    assert report.waiting == [content["event_id"]] and report.published == []
    assert Path(staging).exists()
    (recovered,) = recover_commits(FS, str(tmp_path))
    assert recovered.draft["event_id"] == content["event_id"]
    report = flush_outbox(outbox, LocksOnly(), publisher(bus))  # type: ignore[arg-type]
    assert len(report.published) == 1
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "outbox") == TARGETS


@pytest.mark.rule6
def test_an_unreadable_outbox_entry_is_set_aside_with_one_line_and_the_rest_still_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    outbox = Outbox(tmp_path)
    good = draft(tmp_path)
    outbox.save_draft(good)
    (tmp_path / "vacuum-broken.json").write_text("{not json")
    assert [entry.event_id for entry in outbox.entries()] == [good["event_id"]]
    assert (tmp_path / "vacuum-broken.json.unreadable").exists()
    assert [r.message for r in caplog.records if "cannot be read" in r.message]


@pytest.mark.rule6
def test_abandoned_staging_is_removed_once_quiet_for_the_window(tmp_path: Path) -> None:
    old = stage(tmp_path, "died-an-hour-ago")
    running = stage(tmp_path, "still-writing")
    marked = stage(tmp_path, "crashed-while-renaming")
    (Path(marked) / COMMIT_MARKER).write_text(json.dumps(draft(tmp_path)))
    hour_ago = time.time() - 3700
    for staging in (old, marked):
        for path in [Path(staging), *Path(staging).rglob("*")]:
            os.utime(path, (hour_ago, hour_ago))
    (tmp_path / "delta_0000005_0000005_0000").mkdir()

    removed = remove_abandoned_staging(FS, str(tmp_path), older_than_s=3600)

    assert removed == [old]
    assert not Path(old).exists()
    assert Path(running).exists(), "a staging directory written recently may belong to a running vacuum"
    assert Path(marked).exists(), "a marked staging directory holds a commit to finish, not garbage"
    assert (tmp_path / "delta_0000005_0000005_0000").exists()


def test_one_fresh_file_keeps_an_old_staging_directory(tmp_path: Path) -> None:
    staging = stage(tmp_path, "slow-writer")
    hour_ago = time.time() - 3700
    for path in [Path(staging), *Path(staging).rglob("*")]:
        os.utime(path, (hour_ago, hour_ago))
    (Path(staging) / TARGETS[1] / "bucket_00001").write_bytes(b"just written")
    assert remove_abandoned_staging(FS, str(tmp_path), older_than_s=3600) == []


class TxnsOf(LocksOnly):
    """A metastore whose transaction list is given as Hive's string."""

    def __init__(self, txns: str) -> None:
        super().__init__()
        self.txns = txns

    def valid_txn_list(self) -> str:
        return self.txns


@pytest.mark.rule6
@pytest.mark.parametrize(
    ("txns", "published", "dropped", "kept"),
    [
        ("50:9223372036854775807::", 1, 0, 0),  # T=45 committed: publish, the draft leaves the outbox
        ("50:45:45:", 0, 0, 1),  # T still open (a vacuum running, or dead until housekeeping aborts T)
        ("50:9223372036854775807::45", 0, 1, 0),  # T aborted: its output is unused; drop the draft
    ],
)
def test_a_transaction_commit_draft_is_published_kept_or_dropped_by_its_transactions_state(
    tmp_path: Path, txns: str, published: int, dropped: int, kept: int
) -> None:
    targets = ["delete_delta_0000001_0000004_v0000045", "delta_0000001_0000004_v0000045"]
    for target in targets:
        (tmp_path / target).mkdir()  # written in place: present whatever T's state
    outbox, bus = Outbox(tmp_path / "outbox"), InMemoryBus()
    content = draft(tmp_path, new_directories=targets, staging_dir=None, visibility_txn_id=45)
    outbox.save_draft(content)
    report = flush_outbox(outbox, TxnsOf(txns), publisher(bus))  # type: ignore[arg-type]
    assert (len(report.published), len(report.dropped), len(report.waiting)) == (published, dropped, kept)
    assert len(outbox.entries()) == kept
    assert len(bus.events("acid.vacuum.committed")) == published
