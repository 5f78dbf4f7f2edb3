"""The four worked layouts of seed 000 (docs/design.md section 6): exactly the seed's obsolete lists.

Each directory holds what the seed's listing shows: an ``_orc_acid_version`` side file and one bucket
file. The cleaner's snapshot is capped at the vacuum's highest write id, as in Hive's cleaner.
"""

from __future__ import annotations

import pytest

from acidclean.shared.acid import (
    Listing,
    ValidCleanerWriteIdList,
    ValidWriteIdList,
    acid_state,
    obsolete_dirs,
)


def seed_listing(*directories: str) -> Listing:
    paths = []
    for directory in directories:
        paths += [f"{directory}/_orc_acid_version", f"{directory}/bucket_00000"]
    return Listing.from_paths(paths, location="/user/hive/warehouse/table_txn_001")


SINGLE_DELTAS = ("delta_0000001_0000001_0000", "delta_0000002_0000002_0000", "delta_0000003_0000003_0000")

CASES = {
    "minor vacuum of 3 single deltas": (
        (*SINGLE_DELTAS, "delta_0000001_0000003"),
        3,
        None,
        ["delta_0000001_0000003"],
        list(SINGLE_DELTAS),
    ),
    "major vacuum of 3 single deltas": (
        (*SINGLE_DELTAS, "base_0000003"),
        3,
        "base_0000003",
        [],
        list(SINGLE_DELTAS),
    ),
    "major, then minor, over the same 3 deltas": (
        (*SINGLE_DELTAS, "base_0000003", "delta_0000001_0000003"),
        3,
        "base_0000003",
        [],
        ["delta_0000001_0000003", *SINGLE_DELTAS],
    ),
    "minor vacuum with a delete delta, ids 1-4": (
        (
            *SINGLE_DELTAS,
            "delta_0000004_0000004_0000",
            "delete_delta_0000004_0000004_0000",
            "delta_0000001_0000004",
            "delete_delta_0000001_0000004",
        ),
        4,
        None,
        ["delete_delta_0000001_0000004", "delta_0000001_0000004"],
        [*SINGLE_DELTAS, "delta_0000004_0000004_0000", "delete_delta_0000004_0000004_0000"],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_seed_layout_obsoletes_exactly_the_seeds_directories(case: str) -> None:
    directories, highest_write_id, base, current, obsolete = CASES[case]
    listing = seed_listing(*directories)
    for valid_ids in (ValidWriteIdList.from_ids(highest_write_id), ValidCleanerWriteIdList.from_ids(highest_write_id)):
        state = acid_state(listing, valid_ids)
        assert (state.base.name if state.base else None) == base
        assert [d.name for d in state.deltas] == current
        assert sorted(state.obsolete) == sorted(obsolete)
        assert state.aborted == () and state.original_files == ()
    assert obsolete_dirs(listing, ValidCleanerWriteIdList.from_ids(highest_write_id)) == tuple(sorted(obsolete))


@pytest.mark.parametrize("case", list(CASES))
def test_seed_layout_new_directory_is_never_obsolete(case: str) -> None:
    directories, highest_write_id, base, current, _ = CASES[case]
    new = {base} if base else set(current)
    state = acid_state(seed_listing(*directories), ValidCleanerWriteIdList.from_ids(highest_write_id))
    assert not new & set(state.obsolete)


def test_seed_minor_vacuum_leaves_a_later_delta_alone() -> None:
    # A delta committed after the vacuum (write id 4 > highest write id 3) is neither read nor obsolete
    # for the cleaner's snapshot.
    listing = seed_listing(*SINGLE_DELTAS, "delta_0000001_0000003", "delta_0000004_0000004_0000")
    state = acid_state(listing, ValidCleanerWriteIdList.from_ids(3))
    assert "delta_0000004_0000004_0000" not in state.obsolete
    assert sorted(state.obsolete) == list(SINGLE_DELTAS)
