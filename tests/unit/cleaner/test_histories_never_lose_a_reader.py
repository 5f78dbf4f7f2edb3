"""Randomised histories against the real planner and the real cleanup handler (over fakes).

Writers commit, abort or stay open; readers lock (or, lockless, only open a transaction) and list;
our vacuums (MINOR and MAJOR, planned by :func:`plan_compaction`) commit with their marker and lock
snapshot, several of one partition before any is cleaned, either by a rename or through a transaction T
(``_vT`` output written while T is open, then T commits or aborts); Hive's own compactor writes
``base_N_vT`` whose transaction commits, stays open or aborts; some readers take their transaction
snapshot when they open and lock later (Hive's Driver, which re-takes the snapshot after locking only when
a table's write ids changed); cleaner checks run in any order. After every step:
nothing any live reader's snapshot uses has been deleted, and no honest event was dead-lettered.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from hypothesis_support import examples

from acidclean.producers.plan import CompactionPlan, CompactionType, plan_compaction, with_visibility_txn
from acidclean.schemas.events import DelayEnvelope, VacuumCommitted
from acidclean.shared.acid.id_lists import MetastoreKind, reader_ids
from acidclean.shared.acid.names import base_name, delta_name
from acidclean.shared.acid.state import Listing, acid_state
from acidclean.shared.acid.write_ids import ValidTxnList
from acidclean.shared.errors import NotEnoughHistoryError, VacuumRefusedError
from acidclean.shared.metastore import LockInfo

from .fakes import LOCATION, T0, Rig
from .fakes import vacuum as make_vacuum

pytestmark = [pytest.mark.rule1, pytest.mark.rule3]

TABLE, PARTITION = "sales.orders", "ds=2025-03-14"


@dataclass
class Reader:
    txn: int
    lock_id: int | None  # None: a lockless reader (Hive 4, hive.txn.read.locks=false)
    needs: frozenset[str]


@dataclass
class Opening:
    """A reader that opened its transaction and took its snapshot, and has not locked yet."""

    txn: int
    write_ids: str
    txns: str


@dataclass
class TxnVacuum:
    """Our vacuum committing through transaction T: its ``_vT`` output is written, T is open."""

    txn: int
    plan: CompactionPlan


@dataclass
class Pending:
    event: VacuumCommitted | DelayEnvelope
    honest: bool = True


@dataclass
class World:
    rig: Rig
    next_txn: int = 1
    next_lock: int = 1
    next_write_id: int = 1
    open_writes: dict[int, int] = field(default_factory=dict)  # write id -> txn
    hive_compactions: dict[str, int] = field(default_factory=dict)  # base_N_vT -> T while T open
    readers: list[Reader] = field(default_factory=list)
    opening: list[Opening] = field(default_factory=list)
    txn_vacuums: list[TxnVacuum] = field(default_factory=list)
    pending: list[Pending] = field(default_factory=list)
    created: set[str] = field(default_factory=set)  # every directory ever written


class CleanerHistories(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        rig = Rig()
        rig.mark_vacuum_output = False  # only our simulated vacuum writes markers
        rig.metastore._kind = MetastoreKind.HIVE3
        rig.metastore.add_table(TABLE, "file:" + LOCATION, PARTITION)
        rig.metastore.high_watermark = 0
        rig.metastore.txn_high_watermark = 0
        rig.fs.add_dir(LOCATION)
        self.world = World(rig)

    # -- the metastore's bookkeeping --------------------------------------------------------------

    @property
    def metastore(self):  # type: ignore[no-untyped-def]
        return self.world.rig.metastore

    def open_txn(self) -> int:
        txn = self.world.next_txn
        self.world.next_txn += 1
        self.metastore.txn_high_watermark = txn
        self.metastore.open_txns.append(txn)
        return txn

    def end_txn(self, txn: int, aborted: bool = False) -> None:
        self.metastore.open_txns.remove(txn)
        if aborted:
            self.metastore.aborted_txns.append(txn)

    def listing(self) -> Listing:
        names = [n for n in self.world.rig.fs.children(LOCATION) if not n.startswith("_")]
        return Listing.from_paths([f"{name}/bucket_00000" for name in names], location=LOCATION)

    def add_dirs(self, names: Iterable[str]) -> None:
        self.world.created.update(names)
        self.world.rig.fs.add_acid_dirs(LOCATION, names)

    def listing_as_if_nothing_was_deleted(self) -> Listing:
        """What a reader listing now would see had no cleanup run: it must not need what a cleanup took."""
        return Listing.from_paths([f"{name}/bucket_00000" for name in sorted(self.world.created)], location=LOCATION)

    def txns(self) -> str:
        return self.metastore.valid_txn_list()

    # -- writers ----------------------------------------------------------------------------------

    @initialize(count=st.integers(2, 6))
    def committed_history(self, count: int) -> None:
        """Start from a few committed deltas, so vacuums have something to do from the first step."""
        for _ in range(count):
            self.start_write(delete=False)
            write_id = max(self.world.open_writes)
            self.finish_write_id(write_id, abort=False)

    @rule(delete=st.booleans())
    def start_write(self, delete: bool) -> None:
        txn = self.open_txn()
        write_id = self.world.next_write_id
        self.world.next_write_id += 1
        self.metastore.high_watermark = write_id
        self.metastore.open_ids.append(write_id)
        self.world.open_writes[write_id] = txn
        self.add_dirs([delta_name(write_id, write_id, 0, delete=delete)])

    @precondition(lambda self: self.world.open_writes)
    @rule(data=st.data(), abort=st.sampled_from([False, False, False, True]))
    def finish_write(self, data: st.DataObject, abort: bool) -> None:
        self.finish_write_id(data.draw(st.sampled_from(sorted(self.world.open_writes))), abort)

    def finish_write_id(self, write_id: int, abort: bool) -> None:
        txn = self.world.open_writes.pop(write_id)
        self.metastore.open_ids.remove(write_id)
        if abort:
            self.metastore.aborted_ids.append(write_id)
        self.end_txn(txn, aborted=abort)

    # -- readers ----------------------------------------------------------------------------------

    @rule(lockless=st.booleans())
    def start_reader(self, lockless: bool) -> None:
        txn = self.open_txn()
        lock_id = None if lockless else self.lock_for(txn)  # readers lock before they list (rule 2)
        needs = self.needs(self.metastore.valid_write_ids("sales", "orders"), self.txns())
        self.world.readers.append(Reader(txn, lock_id, needs))

    @rule()
    def reader_opens_with_snapshot(self) -> None:
        """A reader that takes its snapshot when its transaction opens and locks later."""
        txn = self.open_txn()
        self.world.opening.append(Opening(txn, self.metastore.valid_write_ids("sales", "orders"), self.txns()))

    @precondition(lambda self: self.world.opening)
    @rule(data=st.data(), seconds=st.integers(0, 5))
    def reader_locks_after_its_snapshot(self, data: st.DataObject, seconds: int = 0) -> None:
        """Some seconds later it locks, re-takes its snapshot only if the table's write ids changed since
        (Hive's ``isValidTxnListState``; a compaction's commit changes none), then lists."""
        self.world.rig.clock.advance(seconds)
        opening = data.draw(st.sampled_from(self.world.opening))
        self.world.opening.remove(opening)
        lock_id = self.lock_for(opening.txn)
        write_ids, txns = opening.write_ids, opening.txns
        if self.metastore.valid_write_ids("sales", "orders") != write_ids:
            write_ids, txns = self.metastore.valid_write_ids("sales", "orders"), self.txns()
        self.world.readers.append(Reader(opening.txn, lock_id, self.needs(write_ids, txns)))

    def lock_for(self, txn: int) -> int:
        lock_id = self.world.next_lock
        self.world.next_lock += 1
        db, name = TABLE.split(".")
        self.world.rig.clock.advance(1)
        acquired_ms = self.world.rig.clock.now_ms()
        self.metastore.locks.append(
            LockInfo(lock_id, txn, db, name, PARTITION, "SHARED_READ", "ACQUIRED", "r", "h", acquired_ms, 1)
        )
        return lock_id

    def needs(self, write_ids: str, txns: str) -> frozenset[str]:
        ids = reader_ids(write_ids, MetastoreKind.HIVE3)
        try:
            state = acid_state(self.listing_as_if_nothing_was_deleted(), ids, ValidTxnList.from_string(txns))
        except NotEnoughHistoryError:
            return frozenset()  # Hive refuses this read; it reads nothing
        return frozenset(state.current_directories)

    @precondition(lambda self: self.world.readers)
    @rule(data=st.data())
    def end_reader(self, data: st.DataObject) -> None:
        reader = data.draw(st.sampled_from(self.world.readers))
        self.world.readers.remove(reader)
        if reader.lock_id is not None:
            self.metastore.release(reader.lock_id)
        self.end_txn(reader.txn)

    # -- compactions ------------------------------------------------------------------------------

    def plan(self, compaction: CompactionType) -> CompactionPlan | None:
        try:
            plan = plan_compaction(
                self.listing(),
                self.metastore.valid_write_ids("sales", "orders"),
                MetastoreKind.HIVE3,
                compaction,
                table=TABLE,
                partition=PARTITION,
                valid_txns_text=self.txns(),
            )
        except VacuumRefusedError:
            return None
        return None if plan.existing_targets else plan  # run_vacuum: already committed

    @precondition(lambda self: not self.world.txn_vacuums)  # one vacuum of a partition at a time
    @rule(major=st.booleans())
    def our_vacuum(self, major: bool) -> None:
        plan = self.plan(CompactionType.MAJOR if major else CompactionType.MINOR)
        if plan is None:
            return
        self.world.rig.clock.advance(1)
        # Committed (renamed) with its marker, then the lock snapshot and next transaction id.
        self.add_dirs(plan.targets)
        self.publish(plan)

    @precondition(lambda self: not self.world.txn_vacuums)
    @rule(major=st.booleans())
    def our_vacuum_through_a_transaction(self, major: bool) -> None:
        """vacuum_commit=visibility-txn: open T, write the _vT output (readers skip it while T is open)."""
        plan = self.plan(CompactionType.MAJOR if major else CompactionType.MINOR)
        if plan is None:
            return
        txn = self.open_txn()
        plan = with_visibility_txn(plan, txn, self.txns())
        self.add_dirs(plan.targets)
        self.world.txn_vacuums.append(TxnVacuum(txn, plan))

    @precondition(lambda self: self.world.txn_vacuums)
    @rule(data=st.data(), abort=st.sampled_from([False, False, True]))
    def our_vacuum_transaction_ends(self, data: st.DataObject, abort: bool) -> None:
        """T commits (then the lock snapshot and the event) or aborts (its output stays, unused)."""
        vacuum = data.draw(st.sampled_from(self.world.txn_vacuums))
        self.world.txn_vacuums.remove(vacuum)
        self.world.rig.clock.advance(1)
        self.end_txn(vacuum.txn, aborted=abort)
        if not abort:
            self.publish(vacuum.plan)

    def publish(self, plan: CompactionPlan) -> None:
        snapshot = [entry for entry in self.metastore.show_locks("sales", "orders")]
        event = make_vacuum(
            event_id=uuid.uuid4(),
            compaction_type=plan.compaction_type.value,
            new_directories=list(plan.targets),
            obsolete_directories=list(plan.obsolete_after),
            highest_write_id=plan.highest_write_id,
            lock_snapshot=[_entry(lock) for lock in snapshot],
            next_txn_id=self.metastore.txn_high_watermark + 1,
            location=LOCATION,
            occurred_at=self.world.rig.clock.now(),
        )
        self.world.rig.fs.mark_vacuum_output(event)
        self.world.pending.append(Pending(event))

    @rule(outcome=st.sampled_from(["commit", "abort", "open"]))
    def hive_compaction(self, outcome: str) -> None:
        """Hive's own major compaction: base_N_vT, T a transaction of its own."""
        ids = self.metastore.valid_write_ids("sales", "orders")
        try:
            plan = plan_compaction(
                self.listing(), ids, MetastoreKind.HIVE3, CompactionType.MAJOR, table=TABLE, valid_txns_text=self.txns()
            )
        except VacuumRefusedError:
            return
        txn = self.open_txn()
        name = base_name(plan.highest_write_id, visibility_txn_id=txn)
        self.add_dirs([name])
        if outcome == "open":
            self.world.hive_compactions[name] = txn
        else:
            self.end_txn(txn, aborted=outcome == "abort")

    @precondition(lambda self: self.world.hive_compactions)
    @rule(data=st.data(), abort=st.booleans())
    def finish_hive_compaction(self, data: st.DataObject, abort: bool) -> None:
        name = data.draw(st.sampled_from(sorted(self.world.hive_compactions)))
        self.end_txn(self.world.hive_compactions.pop(name), aborted=abort)

    @precondition(lambda self: self.world.pending)
    @rule(data=st.data())
    def forge_an_event(self, data: st.DataObject) -> None:
        """A bad event: an honest one with claims widened to anything listed, sometimes with its lock
        snapshot dropped and its time moved earlier."""
        honest = data.draw(st.sampled_from(self.world.pending))
        vacuum = honest.event.vacuum if isinstance(honest.event, DelayEnvelope) else honest.event
        listed = [n for n in self.world.rig.fs.children(LOCATION) if n.startswith(("base_", "delta_", "delete_"))]
        extra = data.draw(st.lists(st.sampled_from(listed), max_size=3)) if listed else []
        claims = sorted({*vacuum.obsolete_directories, *extra} - set(vacuum.new_directories))
        update: dict[str, object] = {"obsolete_directories": claims}
        if data.draw(st.booleans()):  # the snapshot lost, and the event dated earlier to hide readers
            update.update(lock_snapshot=[], locks_observed=0, occurred_at=vacuum.occurred_at - timedelta(hours=1))
        forged = vacuum.model_copy(update=update)
        self.world.pending.append(Pending(forged, honest=False))
        self.cleaner_check(data, 0)  # often handled at once, while the honest one still waits

    # -- the cleaner ------------------------------------------------------------------------------

    @precondition(lambda self: self.world.pending)
    @rule(data=st.data(), seconds=st.integers(0, 5))
    def cleaner_check(self, data: st.DataObject, seconds: int) -> None:
        item = data.draw(st.sampled_from(self.world.pending))
        self.world.rig.clock.advance(seconds)
        outcome = self.world.rig.handle(item.event)
        event(f"cleaner check: {outcome.kind}" + (" (deleted something)" if outcome.removed else ""))
        if outcome.kind == "delayed":
            assert isinstance(outcome.event, DelayEnvelope)
            item.event = outcome.event
            return
        self.world.pending.remove(item)
        if item.honest:
            assert outcome.kind == "cleaned", f"an honest vacuum was {outcome.kind}: {outcome.event}"

    @precondition(lambda self: self.world.pending)
    @rule(data=st.data())
    def another_cleaner_check(self, data: st.DataObject) -> None:
        """Cleaner checks are as frequent as everything else together (rules are drawn uniformly)."""
        self.cleaner_check(data, 1)

    @precondition(lambda self: self.world.readers)
    @rule(data=st.data())
    def another_reader_ends(self, data: st.DataObject) -> None:
        self.end_reader(data)

    # -- what must always hold ---------------------------------------------------------------------

    @precondition(lambda self: self.world.opening)
    @rule(data=st.data())
    def an_opening_reader_ends(self, data: st.DataObject) -> None:
        opening = data.draw(st.sampled_from(self.world.opening))
        self.world.opening.remove(opening)
        self.end_txn(opening.txn)

    @invariant()
    def every_live_reader_still_has_its_directories(self) -> None:
        listed = set(self.world.rig.fs.children(LOCATION))
        for reader in self.world.readers:
            missing = reader.needs - listed
            assert not missing, f"reader (txn {reader.txn}, lock {reader.lock_id}) lost {sorted(missing)}"


def _entry(lock: LockInfo):  # type: ignore[no-untyped-def]
    from acidclean.shared.lock_entries import snapshot_entry

    return snapshot_entry(lock)


CleanerHistories.TestCase.settings = settings(
    max_examples=examples(400),
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_cleaner_histories_never_lose_a_readers_directory = CleanerHistories.TestCase

assert T0  # the fakes' clock starts at the factories' T0


class _Draws:
    """Stands in for hypothesis' ``data`` in a scripted history: always the first choice."""

    def draw(self, strategy):  # type: ignore[no-untyped-def]
        return strategy.example() if not hasattr(strategy, "elements") else strategy.elements[0]


def test_reader_with_an_older_snapshot_keeps_what_a_transaction_commit_superseded() -> None:
    """The history the state machine must never allow, scripted: a reader takes its snapshot, our
    vacuum commits base_N_vT through T, the lock snapshot is taken, and only then does the reader lock
    (its write ids did not change, so it keeps the snapshot in which T is open and reads the old deltas).
    Its lock is not in the snapshot; only waiting for every transaction open at T's commit saves it."""
    history = CleanerHistories()
    history.committed_history(3)
    history.reader_opens_with_snapshot()
    history.our_vacuum_through_a_transaction(major=True)
    history.our_vacuum_transaction_ends(_Draws(), abort=False)  # type: ignore[arg-type]
    history.world.rig.clock.advance(10)
    history.reader_locks_after_its_snapshot(_Draws())  # type: ignore[arg-type]
    reader = history.world.readers[0]
    assert {"delta_0000001_0000001_0000", "delta_0000003_0000003_0000"} <= reader.needs
    history.world.rig.clock.advance(10)
    outcome = history.world.rig.handle(history.world.pending[0].event)
    assert outcome.kind == "delayed"
    history.every_live_reader_still_has_its_directories()
    history.end_reader(_Draws())  # type: ignore[arg-type]
    assert history.world.rig.handle(outcome.event).kind == "cleaned"
