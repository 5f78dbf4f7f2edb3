"""A reader whose transaction snapshot is older than its lock (Hive's Driver, every read-only query).

Hive's Driver opens the query's transaction and records its ValidTxnList in ``compile``, before it
locks, and a query that holds only SHARED_READ locks never takes it again (docs/safety.md, "Readers
whose snapshot is older than their lock"). If the last write a major vacuum compacted committed after
that snapshot, the reader lists after the rename, finds ``base_N`` not valid for its snapshot, and
reads the deltas the base replaced. Its lock is not in the lock snapshot, and it holds a SHARED_READ
lock by the time the cleaner checks, so the open-transaction wait scoped to lockless transactions
skips it. The pure rule :func:`older_snapshots_skip_output` makes a base wait for every transaction
open at the commit, as a ``_vT`` output already does.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule
from hypothesis_support import examples

from acidclean.consumers.rules.readiness import older_snapshots_skip_output, open_transactions_before
from acidclean.shared.acid import Listing, ValidWriteIdList, acid_state, base_name, delta_name, obsolete_dirs
from acidclean.shared.acid.write_ids import ValidCleanerWriteIdList
from acidclean.shared.errors import NotEnoughHistoryError
from acidclean.shared.metastore import LockInfo

from .fakes import LOCATION
from .test_histories_never_lose_a_reader import CleanerHistories, Opening, Reader, _Draws

pytestmark = [pytest.mark.rule1, pytest.mark.rule2]

DELTAS = [delta_name(i, i, 0) for i in (1, 2, 3)]
BEFORE = [base_name(1), DELTAS[1], DELTAS[2], base_name(3)]  # an older major's base_1, a new major's base_3


def table(names: list[str]) -> Listing:
    return Listing.from_paths(
        [f"{name}/bucket_00000" for name in names], data_formats={base_name(1): "compacted", base_name(3): "compacted"}
    )


def test_a_snapshot_older_than_the_last_compacted_write_skips_the_new_base_and_reads_what_it_replaced() -> None:
    # Compiled before write 3 began. (Had 3 been open, Hive would read base_3 anyway: a base at the
    # snapshot's min open write id is valid, the divergence test_acid_state_properties pins.)
    compiled_before_3 = ValidWriteIdList.from_ids(2)
    before = acid_state(table(BEFORE), compiled_before_3)
    assert before.current_directories == (base_name(1), DELTAS[1])
    claimed = obsolete_dirs(table(BEFORE), ValidCleanerWriteIdList.from_ids(3))
    assert set(claimed) == {base_name(1), DELTAS[1], DELTAS[2]}
    # The cleanup deletes the files the reader is reading; a reader listing afterwards has no base it
    # may use: Hive fails the read ("not enough history"), a reader without that check reads no rows.
    with pytest.raises(NotEnoughHistoryError):
        acid_state(table([base_name(3)]), compiled_before_3)


@pytest.mark.parametrize(
    ("new_directories", "waits"),
    [
        (["base_0000003"], True),  # a renamed major vacuum
        (["base_0000003_v0000009"], True),
        (["delta_0000001_0000003", "delete_delta_0000001_0000003"], False),  # renamed minor
        (["delta_0000001_0000003_v0000009"], True),
        (["not_an_acid_name"], True),  # in doubt, wait
    ],
)
def test_which_outputs_an_older_snapshot_may_skip(new_directories: list[str], waits: bool) -> None:
    assert older_snapshots_skip_output(new_directories) is waits


def _read_lock(txn: int, lock_id: int = 40) -> LockInfo:
    return LockInfo(lock_id, txn, "sales", "orders", None, "SHARED_READ", "ACQUIRED", "r", "h", 5_000, 5_000)


def test_a_base_waits_for_an_open_transaction_that_locked_after_the_lock_snapshot() -> None:
    # Txn 7 compiled (snapshot) before the commit and locked after it: it is open, below next_txn_id,
    # and holds a SHARED_READ lock, which the scoped wait takes as "locks before it lists".
    every = older_snapshots_skip_output(["base_0000003"])
    assert open_transactions_before(10, [7], [_read_lock(7)], visibility_commit=every) == (7,)
    minor = older_snapshots_skip_output(["delta_0000001_0000003"])
    assert open_transactions_before(10, [7], [_read_lock(7)], visibility_commit=minor) == ()
    assert open_transactions_before(10, [12], [], visibility_commit=every) == ()  # began after the commit


class HiveSelects(CleanerHistories):
    """The histories' world with Hive's read-only query as Hive's code runs it: the snapshot taken
    when the query compiled is kept after it locks, whatever committed meanwhile."""

    def select_locks_keeping_its_snapshot(self, opening: Opening) -> Reader:
        self.world.opening.remove(opening)
        lock_id = self.lock_for(opening.txn)
        reader = Reader(opening.txn, lock_id, self.needs(opening.write_ids, opening.txns))
        self.world.readers.append(reader)
        return reader


def _history_up_to_the_check() -> tuple[HiveSelects, Reader]:
    history = HiveSelects()
    history.committed_history(2)
    history.our_vacuum(major=True)  # base_0000002, cleaned at once: nobody reads
    assert history.world.rig.handle(history.world.pending.pop().event).kind == "cleaned"
    history.reader_opens_with_snapshot()  # a SELECT compiles
    history.start_write(delete=False)  # then write 3 begins and commits
    history.finish_write_id(3, abort=False)
    history.our_vacuum(major=True)  # renamed base_0000003, lock snapshot without the SELECT
    history.world.rig.clock.advance(10)
    reader = history.select_locks_keeping_its_snapshot(history.world.opening[0])
    assert reader.needs == {base_name(2)}  # base_3 is not valid for its snapshot
    history.world.rig.clock.advance(10)
    return history, reader


def test_a_hive_select_compiled_before_the_vacuum_keeps_what_a_renamed_base_replaced() -> None:
    history, _ = _history_up_to_the_check()
    outcome = history.world.rig.handle(history.world.pending[0].event)
    history.every_live_reader_still_has_its_directories()
    assert outcome.kind == "delayed"


def test_the_select_keeps_what_it_reads_until_it_ends_then_the_cleanup_runs() -> None:
    """The cleaner (its transaction rule asked through older_snapshots_skip_output) over the same
    history: the cleanup waits for the SELECT's transaction, then cleans."""
    history, _ = _history_up_to_the_check()
    outcome = history.world.rig.handle(history.world.pending[0].event)
    assert outcome.kind == "delayed"
    history.every_live_reader_still_has_its_directories()
    history.end_reader(_Draws())  # type: ignore[arg-type]
    assert history.world.rig.handle(outcome.event).kind == "cleaned"
    assert base_name(2) not in history.world.rig.fs.children(LOCATION)


class HiveSelectHistories(CleanerHistories):
    """The cleaner histories of test_histories_never_lose_a_reader with Hive's reader as Hive's code
    runs it (a read-only query keeps its compile-time snapshot after it locks)."""

    @initialize(count=st.integers(2, 6))
    def committed_history(self, count: int) -> None:
        """Committed deltas, then a major vacuum, cleaned: a base that older snapshots can still use."""
        super().committed_history(count)
        self.our_vacuum(major=True)
        assert self.world.rig.handle(self.world.pending.pop().event).kind == "cleaned"

    @precondition(lambda self: not self.world.txn_vacuums)
    @rule()
    def select_compiles_then_a_write_commits_and_a_major_vacuum_renames(self) -> None:
        """The steps of the hole in one rule, so short histories reach it; the rest is left to chance."""
        self.reader_opens_with_snapshot()
        self.start_write(delete=False)
        self.finish_write_id(max(self.world.open_writes), abort=False)
        self.our_vacuum(major=True)

    @precondition(lambda self: self.world.opening)
    @rule(data=st.data(), seconds=st.integers(0, 5))
    def reader_locks_after_its_snapshot(self, data: st.DataObject, seconds: int = 0) -> None:
        self.world.rig.clock.advance(seconds)
        opening = data.draw(st.sampled_from(self.world.opening))
        self.world.opening.remove(opening)
        lock_id = self.lock_for(opening.txn)
        self.world.readers.append(Reader(opening.txn, lock_id, self.needs(opening.write_ids, opening.txns)))


HiveSelectHistories.TestCase.settings = settings(
    max_examples=examples(40),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_hive_selects_keep_their_snapshot_and_lose_nothing = HiveSelectHistories.TestCase
