"""Planning a vacuum: what is compacted into what, what it makes obsolete, and when it is refused."""

from __future__ import annotations

import pytest

from acidclean.producers.plan import CompactionType, describe_plan, plan_compaction
from acidclean.shared.acid.id_lists import MetastoreKind, compactor_ids, lowest_open_id, reader_ids
from acidclean.shared.acid.state import Listing
from acidclean.shared.acid.write_ids import (
    ValidCompactorTxnList,
    ValidCompactorWriteIdList,
    ValidTxnList,
    ValidWriteIdList,
)
from acidclean.shared.errors import VacuumRefusedError

NOTHING_OPEN = 9223372036854775807
SINGLE = ["delta_0000001_0000001_0000", "delta_0000002_0000002_0000", "delta_0000003_0000003_0000"]
MINOR, MAJOR = CompactionType.MINOR, CompactionType.MAJOR


def listing(*directories: str, buckets: tuple[int, ...] = (0,)) -> Listing:
    paths = []
    for directory in directories:
        paths.append(f"{directory}/_orc_acid_version")
        paths += [f"{directory}/bucket_{b:05d}" for b in buckets]
    return Listing.from_paths(paths, location="/warehouse/db.db/t")


def committed(hwm: int, open_ids: str = "", aborted: str = "", min_open: int | None = None) -> str:
    if min_open is None:
        min_open = int(open_ids.split(",")[0]) if open_ids else NOTHING_OPEN
    return f"db.t:{hwm}:{min_open}:{open_ids}:{aborted}"


def plan(directories: Listing, ids: str, compaction: CompactionType, kind: MetastoreKind = MetastoreKind.HIVE3):
    return plan_compaction(directories, ids, kind, compaction, table="db.t")


# -- the four cases of seed 000 --------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(MetastoreKind))
def test_seed_minor_vacuum_of_three_single_deltas(kind: MetastoreKind) -> None:
    result = plan(listing(*SINGLE), committed(3), MINOR, kind)
    assert result.targets == ("delta_0000001_0000003",)
    assert result.obsolete_after == tuple(SINGLE)
    assert result.highest_write_id == 3


@pytest.mark.parametrize("kind", list(MetastoreKind))
def test_seed_major_vacuum_of_three_single_deltas(kind: MetastoreKind) -> None:
    result = plan(listing(*SINGLE), committed(3), MAJOR, kind)
    assert result.targets == ("base_0000003",)
    assert result.obsolete_after == tuple(SINGLE)


def test_seed_major_after_minor_makes_the_minor_delta_obsolete_too() -> None:
    result = plan(listing(*SINGLE, "delta_0000001_0000003"), committed(3), MAJOR)
    assert result.inputs == ("delta_0000001_0000003",)
    assert result.targets == ("base_0000003",)
    assert result.obsolete_after == ("delta_0000001_0000001_0000", "delta_0000001_0000003", *SINGLE[1:])


def test_seed_minor_vacuum_with_a_delete_delta_writes_both_over_the_whole_range() -> None:
    four = [*SINGLE, "delta_0000004_0000004_0000", "delete_delta_0000004_0000004_0000"]
    result = plan(listing(*four), committed(4), MINOR)
    assert result.insert_target == "delta_0000001_0000004"
    assert result.delete_target == "delete_delta_0000001_0000004"
    assert result.targets == ("delete_delta_0000001_0000004", "delta_0000001_0000004")  # Hive's rename order
    assert set(result.obsolete_after) == set(four)


# -- ids ----------------------------------------------------------------------------------------------


def test_only_ids_below_the_lowest_open_one_are_compacted() -> None:
    four = listing(*SINGLE, "delta_0000004_0000004_0000")
    result = plan(four, committed(4, open_ids="3"), MINOR)
    assert result.targets == ("delta_0000001_0000002",)
    assert result.held_back == ("delta_0000003_0000003_0000", "delta_0000004_0000004_0000")
    assert result.held_back_by == 3
    assert "delta_0000003_0000003_0000" not in result.obsolete_after


def test_an_open_transaction_below_every_delta_is_refused_naming_it() -> None:
    with pytest.raises(VacuumRefusedError, match="write id 1 is open and lies below every delta"):
        plan(listing(*SINGLE[1:]), committed(3, open_ids="1"), MINOR)
    with pytest.raises(VacuumRefusedError, match="transaction 1 is open"):
        plan(listing(*SINGLE[1:]), committed(3, open_ids="1"), MAJOR, MetastoreKind.HIVE2)


def test_a_wholly_aborted_delta_is_left_out_and_a_partly_aborted_one_is_compacted() -> None:
    directories = listing("delta_0000001_0000002", "delta_0000003_0000003_0000", "delta_0000004_0000004_0000")
    result = plan(directories, committed(4, aborted="2,3"), MINOR)
    assert result.inputs == ("delta_0000001_0000002", "delta_0000004_0000004_0000")
    assert result.targets == ("delta_0000001_0000004",)
    assert result.valid_ids.aborted_ids == (2, 3)  # rows of 2 are dropped while reading


def test_a_major_vacuum_compacts_base_deltas_and_deletes_into_one_base() -> None:
    directories = listing("base_0000005", "delta_0000006_0000006_0000", "delete_delta_0000007_0000007_0000")
    result = plan(directories, committed(7), MAJOR)
    assert result.inputs == ("base_0000005", "delta_0000006_0000006_0000", "delete_delta_0000007_0000007_0000")
    assert result.targets == ("base_0000007",)
    assert result.obsolete_after == ("base_0000005", "delete_delta_0000007_0000007_0000", "delta_0000006_0000006_0000")


def test_a_major_vacuum_of_original_files_converts_them_into_a_base() -> None:
    directories = Listing.from_paths(["000000_0", "000001_0"], location="/t")
    result = plan(directories, committed(0), MAJOR)
    assert result.targets == ("base_0000000",)
    assert result.buckets == (0, 1)
    # Original files are not ACID directories: the cleaner never deletes them, so they are not claimed.
    assert result.obsolete_after == ()


def test_buckets_files_and_bytes_of_the_inputs_are_counted() -> None:
    directories = Listing.from_paths(
        [f"{d}/bucket_{b:05d}" for d in SINGLE for b in (0, 3)] + [f"{d}/_orc_acid_version" for d in SINGLE],
        location="/t",
    )
    sized = Listing(tuple(type(f)(f.path, 100) for f in directories.files), (), {}, "/t")
    result = plan(sized, committed(3), MINOR)
    assert result.buckets == (0, 3)
    assert (result.input_files, result.input_bytes) == (6, 600)


def test_targets_that_already_exist_are_reported() -> None:
    pair = listing("delete_delta_0000001_0000003", "delta_0000001_0000003")
    result = plan(pair, committed(3), MINOR)
    assert result.existing_targets == result.targets


# -- refusals -------------------------------------------------------------------------------------


def test_a_minor_vacuum_of_a_single_delta_is_refused() -> None:
    with pytest.raises(VacuumRefusedError, match=r"only one current delta \(delta_0000001_0000003\).*--full"):
        plan(listing("delta_0000001_0000003", *SINGLE), committed(3), MINOR)


def test_a_major_vacuum_with_only_a_base_is_refused() -> None:
    with pytest.raises(VacuumRefusedError, match="base_0000003 already holds every committed row"):
        plan(listing("base_0000003", *SINGLE), committed(3), MAJOR)


def test_an_empty_table_is_refused() -> None:
    with pytest.raises(VacuumRefusedError, match="has no committed delta"):
        plan(Listing(location="/t"), committed(0), MAJOR)


def test_the_dry_run_description_names_inputs_targets_obsolete_and_what_waits() -> None:
    result = plan(listing(*SINGLE, "delta_0000004_0000004_0000"), committed(4, open_ids="4"), MINOR)
    text = "\n".join(describe_plan(result, MetastoreKind.HIVE3))
    assert "MINOR vacuum of db.t" in text
    assert "into       delta_0000001_0000003" in text
    assert "waits      delta_0000004_0000004_0000 (above the open write id 4)" in text
    streaming = plan(listing("delta_0000001_0000003", "delta_0000004_0000004"), committed(4, aborted="2"), MINOR)
    assert "ids        write ids up to 4, dropping the rows of aborted 2" in "\n".join(
        describe_plan(streaming, MetastoreKind.HIVE3)
    )


# -- id lists -------------------------------------------------------------------------------------


def test_compactor_list_stops_below_the_lowest_open_id_and_keeps_aborted_ids_below_it() -> None:
    ids = compactor_ids("db.t:10:4:4,9:2,7", MetastoreKind.HIVE3)
    assert isinstance(ids, ValidCompactorWriteIdList)
    assert (ids.high_watermark, ids.aborted_ids, ids.open_ids) == (3, (2,), ())
    unblocked = compactor_ids("db.t:10:4:4,9:2,7", MetastoreKind.HIVE3, ignore_open=True)
    assert (unblocked.high_watermark, unblocked.aborted_ids) == (10, (2, 7))


def test_hive2_lists_are_transaction_lists() -> None:
    text = "db.t:10:4:4:2"
    assert isinstance(compactor_ids(text, MetastoreKind.HIVE2), ValidCompactorTxnList)
    reader = reader_ids(text, MetastoreKind.HIVE2)
    assert isinstance(reader, ValidTxnList)
    assert (reader.high_watermark, reader.open_ids, reader.aborted_ids) == (10, (4,), (2,))
    assert isinstance(reader_ids(text, MetastoreKind.HIVE3), ValidWriteIdList)
    assert lowest_open_id(text, MetastoreKind.HIVE2) == 4
    assert lowest_open_id(committed(3), MetastoreKind.HIVE3) is None


def test_pending_cleanup_names_what_an_earlier_vacuum_left_obsolete_and_not_aborted_directories() -> None:
    from acidclean.producers.plan import pending_cleanup

    done = listing(*SINGLE, "delta_0000001_0000003", "delta_0000004_0000004_0000")
    assert pending_cleanup(done, committed(4), MetastoreKind.HIVE3) == tuple(SINGLE)
    clean = listing("delta_0000001_0000003", "delta_0000004_0000004_0000", "delta_0000005_0000005_0000")
    assert pending_cleanup(clean, committed(5, aborted="5"), MetastoreKind.HIVE3) == ()
    # Hive's own compaction, still open: it has made nothing obsolete yet.
    hive = listing(*SINGLE, "base_0000003_v0000009")
    assert pending_cleanup(hive, committed(3), MetastoreKind.HIVE3, valid_txns_text="9:9:9:") == ()
    assert pending_cleanup(hive, committed(3), MetastoreKind.HIVE3, valid_txns_text=f"9:{NOTHING_OPEN}::") == tuple(
        SINGLE
    )
