"""Issue 10's findings, each as an attack on the cleaner: rule 3 (only what this vacuum's commit made
obsolete), ``_vT`` visibility, forged events, empty snapshots and readers that take no locks."""

from __future__ import annotations

from datetime import timedelta

import pytest

from acidclean.producers.plan import CompactionType, plan_compaction
from acidclean.schemas.events import CleanupRejected, DelayEnvelope
from acidclean.shared.acid.claims import verify_claims
from acidclean.shared.acid.id_lists import MetastoreKind
from acidclean.shared.acid.names import base_name, delta_name
from acidclean.shared.acid.state import Listing
from acidclean.shared.acid.write_ids import ValidCleanerWriteIdList, ValidTxnList

from .fakes import LOCATION, T0, TOPICS, Rig, lock, vacuum

BASE3, BASE5 = base_name(3), base_name(5)
D4, D5 = delta_name(4, 4, 0), delta_name(5, 5, 0)
D45 = delta_name(4, 5)
NOTHING_OPEN = 9223372036854775807


def hive3_rig() -> Rig:
    rig = Rig()
    rig.metastore._kind = MetastoreKind.HIVE3
    rig.metastore.add_table("sales.orders", "file:" + LOCATION, "ds=2025-03-14")
    return rig


def listed(rig: Rig) -> list[str]:
    return rig.fs.children(LOCATION)


def test_a_reader_between_two_vacuums_keeps_what_it_reads_until_it_releases() -> None:
    # The sequence: base_3, delta_4_4, delta_5_5; R1 locks; MINOR V1 -> delta_4_5 (snapshot
    # {R1}); R2 starts and reads base_3 + delta_4_5; MAJOR V2 -> base_5 (snapshot {R1, R2}).
    rig = hive3_rig()
    rig.fs.add_acid_dirs(LOCATION, [BASE3, D4, D5])
    rig.metastore.take_lock(1, "sales.orders", "ds=2025-03-14")
    rig.fs.add_acid_dirs(LOCATION, [D45])
    v1 = vacuum(new_directories=[D45], obsolete_directories=[D4, D5], highest_write_id=5, lock_snapshot=[lock(1)])
    rig.metastore.take_lock(2, "sales.orders", "ds=2025-03-14", acquired_at=T0 + timedelta(minutes=2))
    rig.fs.add_acid_dirs(LOCATION, [BASE5])
    v2 = vacuum(
        new_directories=[BASE5],
        compaction_type="MAJOR",
        obsolete_directories=[BASE3, D4, D45, D5],
        highest_write_id=5,
        lock_snapshot=[lock(1), lock(2)],
    )
    rig.metastore.release(1)  # R1 ends; R2 still reads base_3 + delta_4_5

    assert rig.handle(v1).kind == "cleaned"
    assert rig.deleted_names() == sorted([D4, D5])
    assert {BASE3, D45} <= set(listed(rig))  # R2's directories survive V1's cleanup
    assert rig.handle(v2).kind == "delayed"
    assert {BASE3, D45} <= set(listed(rig))

    rig.metastore.release(2)
    assert rig.handle(v2).kind == "cleaned"
    assert listed(rig) == [BASE5]


def test_an_event_claiming_what_only_a_later_vacuum_superseded_is_refused() -> None:
    rig = hive3_rig()
    rig.fs.add_acid_dirs(LOCATION, [BASE3, D4, D5, D45, BASE5])
    forged = vacuum(new_directories=[D45], obsolete_directories=[BASE3, D4, D5], highest_write_id=5, lock_snapshot=[])
    outcome = rig.handle(forged)
    assert outcome.kind == "dead_lettered"
    assert isinstance(outcome.event, CleanupRejected) and BASE3 in outcome.event.reason
    assert rig.fs.deleted == []


def _txns(open_txns: str = "", aborted: str = "", hwm: int = 100) -> ValidTxnList:
    min_open = open_txns.split(",")[0] if open_txns else str(NOTHING_OPEN)
    return ValidTxnList.from_string(f"{hwm}:{min_open}:{open_txns}:{aborted}")


def _cleaner_ids(cap: int) -> ValidCleanerWriteIdList:
    return ValidCleanerWriteIdList.from_ids(cap, (), ())


DELTAS_1_8 = [delta_name(i, i, 0) for i in range(1, 9)]
HIVE_BASE = base_name(8, visibility_txn_id=57)


def test_an_open_hive_compactions_base_supersedes_nothing() -> None:
    # Hive is still compacting into base_8_v57 (txn 57 open): an event naming it waits, and it never
    # makes deltas 1..8 obsolete for anyone.
    listing = Listing.from_paths([f"{name}/" for name in [*DELTAS_1_8, HIVE_BASE]])
    verdict = verify_claims([HIVE_BASE], DELTAS_1_8, listing, _cleaner_ids(8), _txns(open_txns="57"), 8)
    assert verdict.deletable == () and verdict.waiting is not None and "57" in verdict.waiting


def test_an_aborted_hive_compactions_base_is_refused_as_new_output() -> None:
    listing = Listing.from_paths([f"{name}/" for name in [*DELTAS_1_8, HIVE_BASE]])
    verdict = verify_claims([HIVE_BASE], DELTAS_1_8, listing, _cleaner_ids(8), _txns(aborted="57"), 8)
    assert verdict.deletable == () and verdict.refused is not None and "aborted" in verdict.refused


def test_a_committed_hive_compactions_base_supersedes_the_deltas() -> None:
    listing = Listing.from_paths([f"{name}/" for name in [*DELTAS_1_8, HIVE_BASE]])
    verdict = verify_claims([HIVE_BASE], DELTAS_1_8, listing, _cleaner_ids(8), _txns(), 8)
    assert verdict.refused is None and verdict.deletable == tuple(sorted(DELTAS_1_8))


def test_an_open_hive_compaction_in_the_listing_does_not_widen_another_vacuums_claims() -> None:
    # Our minor vacuum compacted deltas 1..3; Hive's base_8_v57 (open) must not make 4..8 ours.
    names = [*DELTAS_1_8, delta_name(1, 3), HIVE_BASE]
    listing = Listing.from_paths([f"{name}/" for name in names])
    claims = [*DELTAS_1_8[:3], DELTAS_1_8[5]]
    verdict = verify_claims([delta_name(1, 3)], claims, listing, _cleaner_ids(3), _txns(open_txns="57"), 3)
    assert verdict.refused is not None and DELTAS_1_8[5] in verdict.refused


def test_the_planner_ignores_an_open_hive_compactions_base_and_claims_an_aborted_one() -> None:
    paths = [f"{name}/bucket_00000" for name in [*DELTAS_1_8, HIVE_BASE]]
    listing = Listing.from_paths(paths, location="/w/t")
    ids = f"db.t:8:{NOTHING_OPEN}::"
    while_open = plan_compaction(
        listing, ids, MetastoreKind.HIVE3, CompactionType.MAJOR, table="db.t", valid_txns_text="60:57:57:"
    )
    assert while_open.state.base is None and while_open.insert_target == base_name(8)
    assert HIVE_BASE not in while_open.obsolete_after
    after_abort = plan_compaction(
        listing, ids, MetastoreKind.HIVE3, CompactionType.MAJOR, table="db.t", valid_txns_text=f"60:{NOTHING_OPEN}::57"
    )
    assert HIVE_BASE in after_abort.obsolete_after  # aborted: never read, removed by this vacuum's cleanup


def test_an_event_whose_new_directory_its_vacuum_never_wrote_is_refused() -> None:
    # An aborted insert overwrite left base_7; an event naming it would make committed deltas 1..6
    # (the only copy of their rows) look compacted.
    rig = hive3_rig()
    rig.mark_vacuum_output = False
    deltas = [delta_name(i, i, 0) for i in range(1, 7)]
    rig.fs.add_acid_dirs(LOCATION, [*deltas, base_name(7)])
    rig.metastore.aborted_ids = [7]
    forged = vacuum(
        new_directories=[base_name(7)], compaction_type="MAJOR", obsolete_directories=deltas, highest_write_id=7
    )
    rig.metastore.take_lock(7, "sales.orders")
    rig.metastore.release(7)
    outcome = rig.handle(forged)
    assert outcome.kind == "dead_lettered"
    assert isinstance(outcome.event, CleanupRejected) and outcome.event.reason_code == "invalid_event"
    assert rig.fs.deleted == []


def test_an_event_naming_another_vacuums_output_is_refused() -> None:
    rig = hive3_rig()
    rig.fs.add_acid_dirs(LOCATION, [BASE3, D4, D5, D45])
    real = vacuum(new_directories=[D45], obsolete_directories=[D4, D5], highest_write_id=5, lock_snapshot=[])
    rig.fs.mark_vacuum_output(real)
    rig.mark_vacuum_output = False
    other = vacuum(new_directories=[D45], obsolete_directories=[D4, D5], highest_write_id=5, lock_snapshot=[])
    outcome = rig.handle(other)
    assert outcome.kind == "dead_lettered" and rig.fs.deleted == []
    assert str(real.event_id) in outcome.event.reason  # type: ignore[union-attr]


@pytest.mark.rule1
def test_an_empty_lock_snapshot_without_the_vacuums_word_is_refused() -> None:
    rig = hive3_rig()
    rig.fs.add_acid_dirs(LOCATION, [D4, D5, D45])
    lost = vacuum(
        new_directories=[D45], obsolete_directories=[D4, D5], highest_write_id=5, lock_snapshot=[], locks_observed=None
    )
    outcome = rig.handle(lost)
    assert outcome.kind == "dead_lettered" and rig.fs.deleted == []
    assert "locks_observed" in outcome.event.reason  # type: ignore[union-attr]


@pytest.mark.rule1
def test_readers_without_locks_are_waited_for_through_their_open_transactions() -> None:
    rig = hive3_rig()
    rig.fs.add_acid_dirs(LOCATION, [D4, D5, D45])
    rig.metastore.open_txns = [48, 75]  # 48 began before the vacuum committed, 75 after
    event = vacuum(
        new_directories=[D45], obsolete_directories=[D4, D5], highest_write_id=5, lock_snapshot=[], next_txn_id=60
    )
    outcome = rig.handle(event)
    assert outcome.kind == "delayed" and rig.fs.deleted == []
    [envelope] = rig.published(TOPICS.cleanup_delay)
    assert isinstance(envelope, DelayEnvelope) and envelope.open_txns == [48]
    rig.metastore.open_txns = [75]
    assert rig.handle(envelope).kind == "cleaned"
    assert rig.deleted_names() == sorted([D4, D5])


def test_the_open_transaction_rule_can_be_turned_off_where_every_reader_locks() -> None:
    rig = hive3_rig()
    rig.handler.config = type(rig.handler.config)(**{**rig.handler.config.__dict__, "wait_for_open_txns": False})
    rig.fs.add_acid_dirs(LOCATION, [D4, D5, D45])
    rig.metastore.open_txns = [48]
    event = vacuum(
        new_directories=[D45], obsolete_directories=[D4, D5], highest_write_id=5, lock_snapshot=[], next_txn_id=60
    )
    assert rig.handle(event).kind == "cleaned"


@pytest.mark.rule1
def test_a_transaction_commit_waits_for_older_transactions_even_with_the_rule_turned_off() -> None:
    # The setting is for rename commits where every reader locks. A vacuum committed through T
    # (delta_4_5_v59) is skipped by any reader whose snapshot predates T, locked or not: wait for them.
    rig = hive3_rig()
    rig.handler.config = type(rig.handler.config)(**{**rig.handler.config.__dict__, "wait_for_open_txns": False})
    committed_through_59 = D45 + "_v0000059"
    rig.fs.add_acid_dirs(LOCATION, [D4, D5, committed_through_59])
    rig.metastore.open_txns = [48]
    reader = rig.metastore.take_lock(31, "sales.orders", acquired_at=T0 + timedelta(seconds=30))
    rig.metastore.locks = [reader._replace(txn_id=48)]  # it locked after the snapshot
    event = vacuum(
        new_directories=[committed_through_59],
        obsolete_directories=[D4, D5],
        highest_write_id=5,
        lock_snapshot=[],
        next_txn_id=60,
    )
    outcome = rig.handle(event)
    assert outcome.kind == "delayed" and rig.fs.deleted == []
    rig.metastore.open_txns, rig.metastore.locks = [], []
    assert rig.handle(outcome.event).kind == "cleaned"
    assert rig.deleted_names() == sorted([D4, D5])


@pytest.mark.rule1
def test_a_reader_locked_on_another_table_does_not_hold_this_tables_cleanup() -> None:
    # Hive's rule would wait for every older open transaction (HIVE-26704); a transaction holding a
    # SHARED_READ lock reads with locks on, so it would have locked this table too before listing it.
    rig = hive3_rig()
    rig.fs.add_acid_dirs(LOCATION, [D4, D5, D45])
    rig.metastore.open_txns = [48, 49]
    reader_elsewhere = rig.metastore.take_lock(31, "other.table")
    rig.metastore.locks = [reader_elsewhere._replace(txn_id=48)]
    event = vacuum(
        new_directories=[D45], obsolete_directories=[D4, D5], highest_write_id=5, lock_snapshot=[], next_txn_id=60
    )
    outcome = rig.handle(event)  # 49 holds no read lock: a lockless reader, waited for
    assert outcome.kind == "delayed" and outcome.event.open_txns == [49]  # type: ignore[union-attr]
    rig.metastore.open_txns = [48]
    assert rig.handle(outcome.event).kind == "cleaned"


@pytest.mark.rule3
def test_an_event_altered_after_its_vacuum_wrote_the_marker_is_refused() -> None:
    rig = hive3_rig()
    rig.fs.add_acid_dirs(LOCATION, [BASE3, D4, D5, D45])
    real = vacuum(new_directories=[D45], obsolete_directories=[D4, D5], highest_write_id=5, lock_snapshot=[])
    rig.fs.mark_vacuum_output(real)
    rig.mark_vacuum_output = False
    altered = real.model_copy(update={"highest_write_id": 9})
    outcome = rig.handle(altered)
    assert outcome.kind == "dead_lettered" and rig.fs.deleted == []
    assert "altered" in outcome.event.reason  # type: ignore[union-attr]
