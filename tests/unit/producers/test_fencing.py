"""Fencing a vacuum that lost its lock, and judging a takeover by one clock (docs/design.md section 7, rule 7);
finding two vacuums' outputs over the same write ids (a late commit)."""

from __future__ import annotations

import pytest

from acidclean.producers.exclusion import VacuumLock
from acidclean.producers.takeover import TakeoverJudge
from acidclean.shared.acid.overlaps import conflicting_directories, overlapping_current
from acidclean.shared.errors import MetastoreError, VacuumFencedError
from acidclean.shared.metastore import LockInfo

pytestmark = pytest.mark.rule7

NOW_MS = 1_800_000_000_000


def holder(lock_id: int = 7, last_heartbeat_ms: int | None = NOW_MS, acquired_at_ms: int | None = NOW_MS) -> LockInfo:
    return LockInfo(lock_id, 0, "db", "t__acidclean_vacuum", None, "EXCLUSIVE", "ACQUIRED", "a", "host-a",
                    acquired_at_ms, last_heartbeat_ms)  # fmt: skip


def test_the_metastore_clock_alone_judges_a_holder_silent() -> None:
    judge = TakeoverJudge(stale_s=300)
    silent = holder(last_heartbeat_ms=NOW_MS - 301_000)
    live = holder(8, last_heartbeat_ms=NOW_MS - 30_000)
    (found,) = judge.stale([silent, live], metastore_now_ms=NOW_MS, monotonic_s=0.0)
    assert (found.lock.lock_id, found.clock, round(found.seconds)) == (7, "metastore", 301)


def test_a_fast_clock_on_the_takers_host_does_not_matter() -> None:
    # The taker's wall clock is never read: only the metastore's stamps, or the taker's monotonic time.
    judge = TakeoverJudge(stale_s=300)
    assert judge.stale([holder(last_heartbeat_ms=NOW_MS - 10_000)], NOW_MS, monotonic_s=10_000.0) == []


def test_without_a_metastore_stamp_the_heartbeat_must_stay_unchanged_for_the_window_of_the_takers_monotonic_clock() -> (
    None
):
    judge = TakeoverJudge(stale_s=300)
    old = holder(last_heartbeat_ms=NOW_MS - 10**9)  # ancient by the metastore's stamp, but no "now" stamp to compare
    assert judge.stale([old], None, monotonic_s=1000.0) == []  # first sight starts the window
    assert judge.stale([old], None, monotonic_s=1299.0) == []
    (found,) = judge.stale([old], None, monotonic_s=1300.5)
    assert found.clock == "monotonic" and found.seconds == pytest.approx(300.5)


def test_a_heartbeat_seen_changing_restarts_the_monotonic_window() -> None:
    judge = TakeoverJudge(stale_s=300)
    judge.stale([holder(last_heartbeat_ms=1)], None, monotonic_s=0.0)
    assert judge.stale([holder(last_heartbeat_ms=2)], None, monotonic_s=299.0) == []  # it beat: alive
    assert judge.stale([holder(last_heartbeat_ms=2)], None, monotonic_s=500.0) == []
    assert len(judge.stale([holder(last_heartbeat_ms=2)], None, monotonic_s=600.0)) == 1


class Beats:
    """A metastore whose lock heartbeat answers as told."""

    def __init__(self, error: str | None = None) -> None:
        self.error = error
        self.beats = 0

    def heartbeat(self, txn_id: int | None = None, lock_id: int | None = None) -> None:
        self.beats += 1
        if self.error:
            raise MetastoreError(self.error)


def test_a_held_lock_passes_the_fence_after_asking_the_metastore() -> None:
    metastore = Beats()
    VacuumLock(metastore, 7, "db.t").ensure_held("rename")  # type: ignore[arg-type]
    assert metastore.beats == 1


def test_a_lock_the_metastore_no_longer_has_fences_the_commit_for_good() -> None:
    metastore = Beats("heartbeat: NoSuchLockException(message='No such lock lockid:7')")
    held = VacuumLock(metastore, 7, "db.t")  # type: ignore[arg-type]
    with pytest.raises(VacuumFencedError, match="lost its vacuum lock 7") as fenced:
        held.ensure_held("rename its output into place")
    assert "\n" not in str(fenced.value) and held.lost
    metastore.error = None
    with pytest.raises(VacuumFencedError):
        held.ensure_held("rename its output into place")  # a loss is never forgotten


def test_a_loss_the_heartbeat_thread_saw_fences_without_asking_again() -> None:
    metastore = Beats("No such lock lockid:7")
    held = VacuumLock(metastore, 7, "db.t")  # type: ignore[arg-type]
    with pytest.raises(MetastoreError):
        held.beat()
    metastore.error, metastore.beats = None, 0
    with pytest.raises(VacuumFencedError, match="lost its vacuum lock"):
        held.ensure_held("commit its transaction 9")
    assert metastore.beats == 0


def test_a_lock_that_cannot_be_confirmed_fences_the_commit_fail_closed() -> None:
    held = VacuumLock(Beats("connection refused"), 7, "db.t")  # type: ignore[arg-type]
    with pytest.raises(VacuumFencedError, match="could not be confirmed"):
        held.ensure_held("rename")
    assert held.lost is None  # not known lost: a later vacuum may try again


def test_a_base_and_another_vacuums_delta_over_the_same_ids_overlap() -> None:
    current = ["base_0000003", "delta_0000001_0000005", "delete_delta_0000001_0000005", "delta_0000006_0000006_0000"]
    assert overlapping_current(current) == [("base_0000003", "delta_0000001_0000005")]


def test_what_hive_reads_together_by_design_is_no_overlap() -> None:
    current = ["base_0000005_v0000031", "delete_delta_0000006_0000007", "delta_0000006_0000007",
               "delta_0000008_0000008_0000", "delta_0000008_0000008_0001"]  # fmt: skip
    assert overlapping_current(current) == []


def test_a_commit_is_finished_only_when_nothing_but_its_inputs_covers_its_ids() -> None:
    targets = ["base_0000003"]
    inputs = ["delta_0000001_0000001_0000", "delta_0000002_0000002_0000", "delta_0000003_0000003_0000"]
    listing = [*inputs, "delta_0000004_0000004_0000", "_tmp_acidclean_x"]
    assert conflicting_directories(listing, targets, inputs) == []
    overtaken = [*listing, "delta_0000001_0000004", "delete_delta_0000001_0000004"]
    assert conflicting_directories(overtaken, targets, inputs) == [
        "delete_delta_0000001_0000004",
        "delta_0000001_0000004",
    ]


class TakeoverMetastore:
    """A metastore that stamps heartbeats with its own clock and records what a takeover calls."""

    def __init__(self, now_ms: int, holder_beat_ms: int) -> None:
        self.now_ms = now_ms
        self.calls: list[str] = []
        self.locks = [
            holder(7, last_heartbeat_ms=holder_beat_ms),
            LockInfo(9, 0, "db", "t__acidclean_vacuum", None, "EXCLUSIVE", "WAITING", "b", "host-b", None, None),
            LockInfo(8, 41, "db", "t__acidclean_vacuum_txn", None, "SHARED_READ", "ACQUIRED", "a", "host-a", 1, 0),
        ]

    def heartbeat(self, txn_id: int | None = None, lock_id: int | None = None) -> None:
        self.locks = [
            lock._replace(last_heartbeat_ms=self.now_ms) if lock.lock_id == lock_id else lock for lock in self.locks
        ]

    def show_locks(
        self, db: str | None = None, table: str | None = None, partition: str | None = None
    ) -> list[LockInfo]:
        return [lock for lock in self.locks if lock.table == table]

    def abort_txn(self, txn_id: int) -> None:
        self.calls.append(f"abort {txn_id}")

    def unlock(self, lock_id: int) -> None:
        self.calls.append(f"unlock {lock_id}")


def test_a_takeover_aborts_the_stale_vacuums_registered_transaction_before_it_releases_its_lock() -> None:
    from acidclean.producers.exclusion import _release_stale, vacuum_lock_component

    metastore = TakeoverMetastore(NOW_MS, holder_beat_ms=NOW_MS - 400_000)
    component = vacuum_lock_component("db", "t", None)
    assert _release_stale(metastore, [component], 9, TakeoverJudge(300), "db.t")  # type: ignore[arg-type]
    assert metastore.calls == ["abort 41", "unlock 7"]


def test_a_live_holder_by_the_metastores_clock_is_left_alone() -> None:
    from acidclean.producers.exclusion import _release_stale, vacuum_lock_component

    metastore = TakeoverMetastore(NOW_MS, holder_beat_ms=NOW_MS - 20_000)
    component = vacuum_lock_component("db", "t", None)
    assert not _release_stale(metastore, [component], 9, TakeoverJudge(300), "db.t")  # type: ignore[arg-type]
    assert metastore.calls == []
