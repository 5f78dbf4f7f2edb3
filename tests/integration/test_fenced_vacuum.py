"""Issue 49, items 1 and 2, on the real metastore, Kafka and Spark: a vacuum that lost its vacuum lock
never commits (fencing), a takeover is judged by one clock, and what a fenced or collided vacuum leaves
never stops another vacuum.

The interleavings are driven in-process and deterministically: a hook between the vacuum's write and
its commit does what the vacuum that takes over would do (release the paused vacuum's lock, commit).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from producers_support import DB, directories, make_settings, new_table, snapshot, vacuum, vacuum_events, write

import acidclean.producers.commit as commit_module
import acidclean.producers.exclusion as exclusion
import acidclean.producers.vacuum as vacuum_module
from acidclean.producers.exclusion import VACUUM_LOCK_SUFFIX, ExclusionSettings, exclusive_vacuum, vacuum_lock_component
from acidclean.producers.outbox import Outbox
from acidclean.shared.acid.id_lists import MetastoreKind
from acidclean.shared.acid.names import base_name, delta_name
from acidclean.shared.errors import VacuumBusyError, VacuumError
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.metastore]


@pytest.fixture(scope="module", autouse=True)
def database(metastore: HiveMetastore) -> None:
    metastore.create_database(DB)


@pytest.fixture
def host_a(metastore_uri: str, kafka_bootstrap: str, unique_name: str, tmp_path: Path) -> Settings:
    return make_settings(metastore_uri, kafka_bootstrap, unique_name, tmp_path / "host-a")


@pytest.fixture
def host_b(metastore_uri: str, kafka_bootstrap: str, unique_name: str, tmp_path: Path) -> Settings:
    return make_settings(metastore_uri, kafka_bootstrap, unique_name, tmp_path / "host-b")


def vacuum_locks(metastore: HiveMetastore, name: str) -> list[int]:
    resource = f"{name}{VACUUM_LOCK_SUFFIX}".lower()
    return [lock.lock_id for lock in metastore.show_locks(DB) if (lock.table or "").lower() == resource]


def take_over(metastore: HiveMetastore, name: str) -> None:
    """What a vacuum taking over a stale lock does to the paused holder: release its lock."""
    (held,) = vacuum_locks(metastore, name)
    metastore.unlock(held)


def staging_left(metastore: HiveMetastore, name: str) -> list[str]:
    return [d for d in directories(metastore, name) if d.startswith(commit_module.STAGING_PREFIX)]


def once_before(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, step: Callable[[], None]) -> None:
    """Run ``step`` the first time ``module.name`` is called, before the real call."""
    real = getattr(module, name)
    done: list[bool] = []

    def hooked(*args: Any, **kwargs: Any) -> Any:
        if not done:
            done.append(True)
            step()
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, hooked)


def once_after_write(monkeypatch: pytest.MonkeyPatch, step: Callable[[], None]) -> None:
    """Run ``step`` once, after the vacuum's tasks wrote its output and before its commit."""
    real = vacuum_module.finish_directories
    done: list[bool] = []

    def hooked(*args: Any, **kwargs: Any) -> Any:
        produced = real(*args, **kwargs)
        if not done:
            done.append(True)
            step()
        return produced

    monkeypatch.setattr(vacuum_module, "finish_directories", hooked)


def transaction_hosts(
    metastore: HiveMetastore, metastore_uri: str, kafka_bootstrap: str, prefix: str, tmp_path: Path, **extra: Any
) -> tuple[Settings, Settings]:
    """Two hosts whose vacuums commit through a transaction (skips on Hive 2, which cannot)."""
    if metastore.kind is MetastoreKind.HIVE2:
        pytest.skip("a transaction commit needs per-table write ids (Hive 3+)")
    txn = {"vacuum_commit": "visibility-txn", "vacuum_visibility_txn_on_hive3": True, **extra}
    host_a, host_b = (make_settings(metastore_uri, kafka_bootstrap, prefix, tmp_path / h, **txn) for h in "ab")
    return host_a, host_b


def window_after_the_lock_check(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> dict[str, float]:
    """Record when the last lock check answered ("checked") and when ``module.name`` returned ("done")."""
    marks: dict[str, float] = {}
    real_check, real_step = exclusion.VacuumLock.ensure_held, getattr(module, name)

    def check(self: exclusion.VacuumLock, before: str) -> None:
        real_check(self, before)
        marks["checked"] = time.monotonic()

    def step(*args: Any) -> None:
        real_step(*args)
        marks["done"] = time.monotonic()

    monkeypatch.setattr(exclusion.VacuumLock, "ensure_held", check)
    monkeypatch.setattr(module, name, step)
    return marks


# -- rule 7: fencing ----------------------------------------------------------------------------------


@pytest.mark.rule7
def test_a_vacuum_that_lost_its_lock_after_planning_never_commits_and_no_row_is_duplicated(
    metastore: HiveMetastore,
    host_a: Settings,
    host_b: Settings,
    spark: Any,
    unique_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    new_table(metastore, unique_name)
    ids = [c.write_id for c in write(metastore, unique_name, rows=100, commits=3)]
    seen: dict[str, Any] = {}

    def paused_then_taken_over() -> None:
        take_over(metastore, unique_name)
        ids.append(write(metastore, unique_name, rows=100, delete_fraction=0.3)[0].write_id)
        seen["b"] = vacuum(metastore, host_b, spark, unique_name, allow_uncleaned=True)
        seen["rows"] = snapshot(metastore, unique_name).num_rows

    once_after_write(monkeypatch, paused_then_taken_over)
    with pytest.raises(VacuumError) as fenced:
        vacuum(metastore, host_a, spark, unique_name, full=True)
    message = str(fenced.value)
    assert "lost its vacuum lock" in message and "nothing was made visible" in message and "\n" not in message
    assert seen["b"].new_directories == (
        delta_name(ids[0], ids[-1], delete=True),
        delta_name(ids[0], ids[-1]),
    )
    assert base_name(ids[2]) not in directories(metastore, unique_name)
    assert snapshot(metastore, unique_name).num_rows == seen["rows"]
    assert Outbox(host_a.state_dir / "outbox").entries() == []
    assert [e.vacuum_job_id for e in vacuum_events(host_a)] == [seen["b"].job_id]


@pytest.mark.rule7
def test_a_live_vacuum_is_never_taken_over_by_a_host_whose_clock_runs_fast(
    metastore: HiveMetastore, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    new_table(metastore, unique_name)
    live = ExclusionSettings(stale_s=3, heartbeat_s=0.5)
    with exclusive_vacuum(metastore, DB, unique_name, None, live) as held:
        real_time = time.time
        monkeypatch.setattr(exclusion.time, "time", lambda: real_time() + 600)  # ten minutes fast
        with (
            pytest.raises(VacuumBusyError),
            exclusive_vacuum(metastore, DB, unique_name, None, ExclusionSettings(wait_s=6, stale_s=3)),
        ):
            pass
        monkeypatch.undo()
        assert vacuum_locks(metastore, unique_name) == [held.lock_id]
        held.ensure_held("commit")


@pytest.mark.rule7
def test_a_dead_vacuums_lock_is_taken_over_by_the_metastores_clock_even_from_a_host_whose_clock_runs_slow(
    metastore: HiveMetastore, unique_name: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    new_table(metastore, unique_name)
    dead = metastore.lock([vacuum_lock_component(DB, unique_name, None)])  # taken, then never heartbeated
    assert dead.acquired
    real_time = time.time
    monkeypatch.setattr(exclusion.time, "time", lambda: real_time() - 600)  # ten minutes slow
    started = time.monotonic()
    with exclusive_vacuum(metastore, DB, unique_name, None, ExclusionSettings(wait_s=20, stale_s=2)) as taker:
        took_s = time.monotonic() - started
        assert vacuum_locks(metastore, unique_name) == [taker.lock_id]
    assert took_s < 15, f"took {took_s:.1f} s to take over a lock silent for 2 s"
    # The metastore stamps the taker's own waiting lock, so its clock alone judged the silence.
    assert [r for r in caplog.records if "by the metastore clock" in r.getMessage()]


# -- rule 6: no wedge -----------------------------------------------------------------------------------


@pytest.mark.rule6
@pytest.mark.rule7
def test_two_vacuums_writing_the_same_name_leave_nothing_that_stops_another_vacuum(
    metastore: HiveMetastore,
    host_a: Settings,
    host_b: Settings,
    spark: Any,
    unique_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    new_table(metastore, unique_name)
    other = new_table(metastore, f"{unique_name}y").split(".")[1]
    ids = [c.write_id for c in write(metastore, unique_name, rows=50, commits=3)]
    write(metastore, other, rows=50, commits=2)
    seen: dict[str, Any] = {}

    def paused_then_taken_over() -> None:
        take_over(metastore, unique_name)
        seen["b"] = vacuum(metastore, host_b, spark, unique_name, full=True)  # the same base_N as A's

    once_after_write(monkeypatch, paused_then_taken_over)
    with pytest.raises(VacuumError) as fenced:
        vacuum(metastore, host_a, spark, unique_name, full=True)
    assert seen["b"].new_directories == (base_name(ids[-1]),)
    assert snapshot(metastore, unique_name).num_rows == 150

    # Host A's next vacuum, of another table, runs ...
    assert vacuum(metastore, host_a, spark, other).status == "committed"
    # ... and so does the next vacuum of the same table, from either host.
    later = [c.write_id for c in write(metastore, unique_name, rows=50, commits=2)]
    assert vacuum(metastore, host_a, spark, unique_name, allow_uncleaned=True).new_directories == (
        delta_name(later[0], later[-1]),
    )
    assert snapshot(metastore, unique_name).num_rows == 250
    # A stopped before its rename with one line, and its draft is gone.
    message = str(fenced.value)
    assert "\n" not in message and "lost its vacuum lock" in message
    assert Outbox(host_a.state_dir / "outbox").entries() == []


@pytest.mark.rule7
def test_a_vacuum_paused_after_its_last_lock_check_is_finished_by_the_vacuum_that_took_over_never_doubled(
    metastore: HiveMetastore,
    host_a: Settings,
    host_b: Settings,
    spark: Any,
    unique_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rename's residual window: A passed its lock check (its commit marker is written), then paused.
    The vacuum that takes over finishes A's commit before it plans, so it plans on top of it."""
    new_table(metastore, unique_name)
    ids = [c.write_id for c in write(metastore, unique_name, rows=50, commits=3)]
    seen: dict[str, Any] = {}

    def overtaken_after_the_last_lock_check() -> None:
        take_over(metastore, unique_name)
        ids.extend(c.write_id for c in write(metastore, unique_name, rows=50, commits=2))
        seen["b"] = vacuum(metastore, host_b, spark, unique_name, allow_uncleaned=True)

    once_before(monkeypatch, commit_module, "_rename_out", overtaken_after_the_last_lock_check)
    late = vacuum(metastore, host_a, spark, unique_name, full=True)
    assert seen["b"].earlier and seen["b"].earlier[0].event.vacuum_job_id == late.job_id  # B finished A's commit
    assert seen["b"].new_directories == (delta_name(ids[3], ids[4]),)  # and planned on top of it
    assert late.status == "committed" and late.new_directories == (base_name(ids[2]),)
    assert late.overlapping_directories == ()
    assert snapshot(metastore, unique_name).num_rows == 250
    assert staging_left(metastore, unique_name) == []


@pytest.mark.rule7
def test_a_late_transaction_commit_is_reported_in_its_event(
    metastore: HiveMetastore,
    metastore_uri: str,
    kafka_bootstrap: str,
    spark: Any,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The transaction commit's residual window (last lock check -> commit_txn): a late commit that
    slips through is found right after it and reported, and nothing is deleted for it."""
    host_a, host_b = transaction_hosts(metastore, metastore_uri, kafka_bootstrap, unique_name, tmp_path)
    new_table(metastore, unique_name)
    ids = [c.write_id for c in write(metastore, unique_name, rows=50, commits=3)]
    seen: dict[str, Any] = {}

    def overtaken_after_the_last_lock_check() -> None:
        take_over(metastore, unique_name)
        ids.append(write(metastore, unique_name, rows=50)[0].write_id)
        seen["b"] = vacuum(metastore, host_b, spark, unique_name, allow_uncleaned=True)

    once_before(monkeypatch, vacuum_module, "_commit_visibility_txn", overtaken_after_the_last_lock_check)
    late = vacuum(metastore, host_a, spark, unique_name, full=True)
    (overtaking,) = seen["b"].new_directories
    assert overtaking.startswith(delta_name(ids[0], ids[-1]))
    assert late.overlapping_directories == (overtaking,)
    assert late.publish is not None and late.publish.event.overlapping_directories == [overtaking]
    published = {e.vacuum_job_id: e for e in vacuum_events(host_a)}
    assert published[late.job_id].overlapping_directories == [overtaking]
    assert published[seen["b"].job_id].overlapping_directories == []


@pytest.mark.rule7
def test_the_window_between_the_last_lock_check_and_the_commit_is_the_commit_alone(
    metastore: HiveMetastore, host_a: Settings, spark: Any, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Measured: from the moment the metastore confirmed the lock to the end of the rename."""
    new_table(metastore, unique_name, buckets=4)
    write(metastore, unique_name, rows=2000, commits=3)
    marks = window_after_the_lock_check(monkeypatch, commit_module, "_rename_out")
    assert vacuum(metastore, host_a, spark, unique_name, full=True).status == "committed"
    window_ms = (marks["done"] - marks["checked"]) * 1000
    print(f"\nlast lock check -> rename done: {window_ms:.2f} ms")
    assert 0 < window_ms < 1000 * host_a.vacuum_lock_stale_s


@pytest.mark.rule7
def test_a_takeover_aborts_the_paused_vacuums_transaction_so_its_commit_fails_after_the_last_lock_check(
    metastore: HiveMetastore,
    metastore_uri: str,
    kafka_bootstrap: str,
    spark: Any,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The transaction commit's window closed: A passed its last lock check and paused before commit_txn;
    B finds A's lock silent by the metastore's clock, aborts A's registered transaction, takes the lock
    and commits. A's commit_txn then fails: its output stays invisible, no row is read twice."""
    host_a, host_b = transaction_hosts(
        metastore, metastore_uri, kafka_bootstrap, unique_name, tmp_path, vacuum_lock_stale_s=2
    )
    new_table(metastore, unique_name)
    ids = [c.write_id for c in write(metastore, unique_name, rows=50, commits=3)]
    seen: dict[str, Any] = {}
    real_beat = exclusion.VacuumLock.beat

    def paused_after_the_last_lock_check() -> None:
        monkeypatch.setattr(exclusion.VacuumLock, "beat", lambda self: None)  # A's heartbeats stop, as in SIGSTOP
        time.sleep(3)
        ids.append(write(metastore, unique_name, rows=50)[0].write_id)
        seen["b"] = vacuum(metastore, host_b, spark, unique_name, allow_uncleaned=True)
        seen["rows"] = snapshot(metastore, unique_name).num_rows
        monkeypatch.setattr(exclusion.VacuumLock, "beat", real_beat)

    once_before(monkeypatch, vacuum_module, "_commit_visibility_txn", paused_after_the_last_lock_check)
    with pytest.raises(VacuumError, match="did not commit"):
        vacuum(metastore, host_a, spark, unique_name, full=True)
    (overtaking,) = seen["b"].new_directories
    assert overtaking.startswith(delta_name(ids[0], ids[-1]))
    assert snapshot(metastore, unique_name).num_rows == seen["rows"] == 200
    assert Outbox(host_a.state_dir / "outbox").entries() == []
    assert [e.vacuum_job_id for e in vacuum_events(host_a)] == [seen["b"].job_id]


@pytest.mark.rule7
def test_the_window_between_the_last_lock_check_and_commit_txn_is_one_metastore_call(
    metastore: HiveMetastore,
    metastore_uri: str,
    kafka_bootstrap: str,
    spark: Any,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Measured: from the moment the metastore confirmed the lock to commit_txn's answer."""
    settings, _ = transaction_hosts(metastore, metastore_uri, kafka_bootstrap, unique_name, tmp_path)
    new_table(metastore, unique_name, buckets=4)
    write(metastore, unique_name, rows=2000, commits=3)
    marks = window_after_the_lock_check(monkeypatch, vacuum_module, "_commit_visibility_txn")
    assert vacuum(metastore, settings, spark, unique_name, full=True).status == "committed"
    window_ms = (marks["done"] - marks["checked"]) * 1000
    print(f"\nlast lock check -> commit_txn answered: {window_ms:.2f} ms")
    assert 0 < window_ms < 1000 * settings.vacuum_lock_stale_s
