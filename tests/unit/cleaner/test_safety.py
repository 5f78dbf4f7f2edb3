"""Rules 3 and 4 of docs/design.md section 7: what the cleaner may delete, tried from every side."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis_support import examples

from acidclean.consumers.rules.obsolete import CleanupPlan, check_claims, plan_cleanup
from acidclean.consumers.rules.paths import StoragePath, TenantRoots, check_location, storage_path
from acidclean.consumers.rules.verdicts import NotYet, Refusal
from acidclean.shared.acid.id_lists import MetastoreKind, cleaner_ids
from acidclean.shared.acid.names import base_name, delta_name, parse_directory_name
from acidclean.shared.errors import UnsafePathError
from acidclean.shared.storage import Entry

from .fakes import LOCATION, vacuum

LONG_MAX = 9223372036854775807
D1, D2, D3, D4 = (delta_name(i, i, 0) for i in (1, 2, 3, 4))
ROOTS = {"acme": ["/warehouse"], "globex": ["/warehouse/globex", "hdfs://nn1/globex"]}


def dirs(*names: str) -> list[Entry]:
    return [Entry(name, True, 0) for name in names]


def ids(hwm: int = 100, open_ids: str = "", aborted: str = "", kind: MetastoreKind = MetastoreKind.HIVE2, cap: int = 3):
    min_open = min((int(i) for i in open_ids.split(",") if i), default=LONG_MAX)
    return cleaner_ids(kind, f"sales.orders:{hwm}:{min_open}:{open_ids}:{aborted}", cap)


def plan(
    event_dirs: list[str],
    new: list[str],
    claimed: list[str],
    children: list[Entry],
    highest: int,
    kind: MetastoreKind = MetastoreKind.HIVE2,
    **id_args: str,
) -> CleanupPlan | Refusal | NotYet:
    event = vacuum(new_directories=new, obsolete_directories=claimed, highest_write_id=highest)
    return plan_cleanup(event, children, ids(kind=kind, cap=highest, **id_args))


# -- the seed's four cases ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [MetastoreKind.HIVE2, MetastoreKind.HIVE3])
@pytest.mark.parametrize(
    ("listing", "new", "highest", "obsolete"),
    [
        ([D1, D2, D3, delta_name(1, 3)], [delta_name(1, 3)], 3, [D1, D2, D3]),
        ([D1, D2, D3, base_name(3)], [base_name(3)], 3, [D1, D2, D3]),
        ([D1, D2, D3, base_name(3), delta_name(1, 3)], [base_name(3)], 3, [delta_name(1, 3), D1, D2, D3]),
        (
            [D1, D2, D3, D4, delta_name(4, 4, 0, delete=True), delta_name(1, 4), delta_name(1, 4, delete=True)],
            [delta_name(1, 4), delta_name(1, 4, delete=True)],
            4,
            [delta_name(4, 4, 0, delete=True), D1, D2, D3, D4],
        ),
    ],
    ids=["minor", "major", "major-then-minor", "minor-with-delete-delta"],
)
@pytest.mark.rule3
def test_seed_cases_delete_exactly_the_obsolete_directories(
    listing: list[str], new: list[str], highest: int, obsolete: list[str], kind: MetastoreKind
) -> None:
    result = plan(listing, new, obsolete, dirs(*listing), highest, kind=kind)
    assert isinstance(result, CleanupPlan)
    assert sorted(result.delete) == sorted(obsolete)


# -- rule 3 ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [MetastoreKind.HIVE2, MetastoreKind.HIVE3])
@pytest.mark.rule3
def test_newer_deltas_above_the_highest_write_id_are_never_deleted(kind: MetastoreKind) -> None:
    # A later minor vacuum (delta_1_5) already exists: with the cap at 3 it is invisible, so the
    # deltas it covers beyond this vacuum's range stay, and delta_4_4/delta_5_5 are not touched.
    children = dirs(D1, D2, D3, D4, delta_name(5, 5, 0), delta_name(1, 3), delta_name(1, 5))
    result = plan([], [delta_name(1, 3)], [D1, D2, D3], children, 3, kind=kind)
    assert isinstance(result, CleanupPlan)
    assert sorted(result.delete) == [D1, D2, D3]
    assert result.kept == ()  # delta_1_3 stays current: the later delta_1_5 is not visible at the cap


@pytest.mark.rule3
def test_the_new_directory_and_what_only_a_later_vacuum_superseded_are_never_deleted() -> None:
    # minor (delta_1_3) committed first, major (base_3) after: delta_1_3 is obsolete by the rules now,
    # but only the major vacuum made it so, and readers that started between the two commits read it.
    children = dirs(D1, D2, D3, delta_name(1, 3), base_name(3))
    result = plan([], [delta_name(1, 3)], [D1, D2, D3], children, 3)
    assert isinstance(result, CleanupPlan)
    assert sorted(result.delete) == [D1, D2, D3]


@pytest.mark.parametrize("kind", [MetastoreKind.HIVE2, MetastoreKind.HIVE3])
@pytest.mark.parametrize("later_cleanup_ran", [False, True])
def test_a_minor_vacuum_superseded_by_a_later_major_one_deletes_only_its_own_claims(
    kind: MetastoreKind, later_cleanup_ran: bool
) -> None:
    # minor vacuum to delta_1_3 (highest 3); a major vacuum to base_5 followed before the minor one
    # was cleaned. Its capped snapshot has no usable base any more ("not enough history"), which once
    # made the event wait for ever. Its own claims are still its to clean; the rest is base_5's.
    D5 = delta_name(5, 5, 0)
    before = [D1, D2, D3, delta_name(1, 3), delta_name(4, 4, 0), D5, base_name(5)]
    children = dirs(base_name(5)) if later_cleanup_ran else dirs(*before)
    result = plan([], [delta_name(1, 3)], [D1, D2, D3], children, 3, kind=kind)
    assert isinstance(result, CleanupPlan), result  # never NotYet: that wait could not end
    if later_cleanup_ran:
        assert result.delete == ()
        assert "superseded" in (result.note() or "") and base_name(5) in (result.note() or "")
    else:
        assert sorted(result.delete) == [D1, D2, D3]


def test_not_enough_history_without_a_newer_base_still_waits() -> None:
    # An insert-only history read through a base the snapshot cannot use, with no later vacuum to
    # take over, is not ours to resolve: the event waits (and is reported stuck if it lasts).
    children = dirs(D1, base_name(2, visibility_txn_id=90))
    result = plan([], [base_name(2, visibility_txn_id=90)], [D1], children, 2, open_ids="90")
    assert not isinstance(result, CleanupPlan) or result.superseded is None


@pytest.mark.parametrize("kind", [MetastoreKind.HIVE2, MetastoreKind.HIVE3])
@pytest.mark.rule3
def test_an_open_transaction_whose_delta_is_listed_means_wait(kind: MetastoreKind) -> None:
    result = plan([], [delta_name(1, 3)], [D1, D2, D3], dirs(D1, D2, D3, delta_name(1, 3)), 3, open_ids="2", kind=kind)
    assert isinstance(result, NotYet) and "2" in result.reason


def test_hive2_open_transaction_of_another_table_does_not_block_the_cleanup() -> None:
    # Hive 2 transaction ids are global: txn 2 is open but wrote nothing here (no delta holds it).
    children = dirs(D1, D3, base_name(3))
    result = plan([], [base_name(3)], [D1, D3], children, 3, open_ids="2")
    assert isinstance(result, CleanupPlan) and sorted(result.delete) == [D1, D3]


def test_hive3_open_write_id_of_this_table_blocks_even_without_a_delta_yet() -> None:
    # Write ids are per table: write id 2 belongs to a live writer of this table that may not have
    # flushed its delta yet.
    children = dirs(D1, D3, base_name(3))
    result = plan([], [base_name(3)], [D1, D3], children, 3, open_ids="2", kind=MetastoreKind.HIVE3)
    assert isinstance(result, NotYet)


def test_open_transactions_above_the_highest_write_id_do_not_matter() -> None:
    result = plan([], [base_name(3)], [D1, D2, D3], dirs(D1, D2, D3, base_name(3)), 3, open_ids="7,9")
    assert isinstance(result, CleanupPlan) and sorted(result.delete) == [D1, D2, D3]


def test_a_new_directory_that_does_not_exist_and_nothing_covers_is_refused() -> None:
    # The new delta_1_3 is missing, so nothing covers delta_2_2: it is still read.
    result = plan([], [delta_name(1, 3)], [D2], dirs(D1, D2, D3), 3)
    assert isinstance(result, Refusal) and result.code == "not_obsolete"
    assert delta_name(1, 3) in result.reason and "does not exist" in result.reason


@pytest.mark.rule3
def test_a_claim_that_the_vacuums_own_output_does_not_cover_is_refused() -> None:
    # delta_2_3 covers delta_2_2 and delta_3_3, not delta_1_1: a claim of it is not this vacuum's.
    result = plan([], [delta_name(2, 3)], [D1, D2], dirs(D1, D2, D3, delta_name(2, 3)), 3)
    assert isinstance(result, Refusal) and result.code == "not_obsolete"
    assert D1 in result.reason and D2 not in result.reason


def test_a_claimed_directory_already_gone_is_fine_after_a_crash() -> None:
    result = plan([], [delta_name(1, 3)], [D1, D2, D3], dirs(D3, delta_name(1, 3)), 3)
    assert isinstance(result, CleanupPlan) and list(result.delete) == [D3]


def test_claims_above_the_highest_write_id_or_equal_to_the_new_directory_are_refused() -> None:
    above = check_claims(vacuum(obsolete_directories=[D4], highest_write_id=3))
    assert above is not None and above.code == "not_obsolete"
    same = check_claims(vacuum(obsolete_directories=[delta_name(1, 3)]))
    assert same is not None and same.code == "not_obsolete"
    new_above = check_claims(vacuum(new_directories=[delta_name(1, 9)], highest_write_id=3))
    assert new_above is not None and new_above.code == "invalid_event"


def test_original_files_made_obsolete_by_a_base_are_left_alone() -> None:
    children = [*dirs(D1, base_name(3)), Entry("000000_0", False, 10)]
    result = plan([], [base_name(3)], [D1], children, 3)
    assert isinstance(result, CleanupPlan) and list(result.delete) == [D1]
    # Never claimed (the vacuum claims directories only), so never a candidate.
    assert "000000_0" not in result.delete


def test_aborted_directories_are_not_deleted() -> None:
    children = dirs(D1, D2, D3, delta_name(1, 3))
    result = plan([], [delta_name(1, 3)], [D1, D3], children, 3, aborted="2")
    assert isinstance(result, CleanupPlan) and D2 not in result.delete


def test_a_malformed_acid_name_in_the_directory_refuses_instead_of_guessing() -> None:
    result = plan([], [delta_name(1, 3)], [], dirs(D1, "delta_x_y", delta_name(1, 3)), 3)
    assert isinstance(result, Refusal) and result.code == "other"


# -- rule 4 ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["delta_0000001_0000001/../../etc", "../delta_0000001_0000001_0000", "a/b", "..", "delta_1_1\\x", "x\x00"],
)
@pytest.mark.rule4
def test_path_traversal_in_a_claimed_name_is_refused(name: str) -> None:
    refusal = check_claims(vacuum(obsolete_directories=[name]))
    assert refusal is not None and refusal.code == "unsafe_path"


@pytest.mark.parametrize("name", ["not_acid", "_tmp_delta_0000001_0000003", ".hive-staging", "base_x"])
@pytest.mark.rule4
def test_names_outside_the_acid_grammar_are_refused(name: str) -> None:
    refusal = check_claims(vacuum(obsolete_directories=[name]))
    assert refusal is not None and refusal.code == "unsafe_path"


@pytest.mark.rule4
def test_a_symbolic_link_among_the_obsolete_directories_refuses_the_whole_event() -> None:
    children = [*dirs(D1, D3, delta_name(1, 3)), Entry(D2, True, 0, is_symlink=True)]
    result = plan([], [delta_name(1, 3)], [D1, D2, D3], children, 3)
    assert isinstance(result, Refusal) and result.code == "unsafe_path" and "symbolic link" in result.reason


def roots(tenant: str = "acme") -> TenantRoots:
    return TenantRoots.build(tenant, ROOTS)


@pytest.mark.rule4
def test_location_spellings_compare_equal_and_dotdot_is_refused() -> None:
    assert storage_path("file:/warehouse/t") == storage_path("file:///warehouse/t/") == storage_path("/warehouse//t")
    assert storage_path("s3a://bucket/w") == StoragePath("s3", "bucket", "/w")
    for bad in ("/warehouse/../etc", "relative/path", "file:/w/./../x", ""):
        with pytest.raises(UnsafePathError):
            storage_path(bad)


@pytest.mark.rule4
def test_the_event_location_must_be_the_metastores() -> None:
    event = vacuum(location="/warehouse/sales.db/other")
    refusal = check_location(event, LOCATION, LOCATION, roots())
    assert refusal is not None and refusal.code == "unsafe_path" and "metastore" in refusal.reason
    assert check_location(vacuum(location="file:" + LOCATION), LOCATION, LOCATION, roots()) is None


@pytest.mark.rule4
def test_another_tenants_path_is_refused_even_inside_our_root() -> None:
    where = "/warehouse/globex/db/t"
    refusal = check_location(vacuum(location=where), where, where, roots())
    assert refusal is not None and refusal.code == "other_tenant"


@pytest.mark.rule4
def test_a_location_outside_every_allowed_root_is_refused() -> None:
    for where in ("/tmp/x/t", "/warehousex/t", "/warehouse", "hdfs://nn1/warehouse/t"):
        refusal = check_location(vacuum(location=where), where, where, roots())
        assert refusal is not None and refusal.code in ("unsafe_path", "other_tenant"), where


@pytest.mark.rule4
def test_a_location_whose_links_resolve_outside_the_roots_is_refused() -> None:
    refusal = check_location(vacuum(), LOCATION, "/etc/important", roots())
    assert refusal is not None and refusal.code == "unsafe_path" and "links resolved" in refusal.reason


@pytest.mark.rule4
def test_a_tenant_with_roots_elsewhere_never_gets_our_paths() -> None:
    refusal = check_location(vacuum(), LOCATION, LOCATION, roots("globex"))
    assert refusal is not None and refusal.code == "other_tenant" and "'acme'" in refusal.reason


# -- property: whatever the listing, only safe names are deleted --------------------------------------


directory_names = st.one_of(
    st.builds(
        lambda a, b, s: delta_name(min(a, b), max(a, b), s),
        st.integers(1, 12),
        st.integers(1, 12),
        st.one_of(st.none(), st.integers(0, 2)),
    ),
    st.builds(lambda a, b: delta_name(min(a, b), max(a, b), 0, delete=True), st.integers(1, 12), st.integers(1, 12)),
    st.builds(base_name, st.integers(1, 12)),
    st.sampled_from(["000000_0", "_tmp_x", "subdir"]),
)


@settings(max_examples=examples(300), deadline=None)
@given(
    listing=st.sets(directory_names, min_size=1, max_size=12),
    highest=st.integers(1, 12),
    open_ids=st.sets(st.integers(1, 14), max_size=2),
    aborted=st.sets(st.integers(1, 14), max_size=2),
    links=st.sets(st.integers(0, 11), max_size=2),
    kind=st.sampled_from([MetastoreKind.HIVE2, MetastoreKind.HIVE3]),
)
@pytest.mark.rule3
def test_only_acid_directories_at_or_below_the_highest_write_id_are_ever_deleted(
    listing: set[str], highest: int, open_ids: set[int], aborted: set[int], links: set[int], kind: MetastoreKind
) -> None:
    names = sorted(listing)
    acid = [n for n in names if parse_directory_name(n) is not None and not n.startswith("_")]
    assume(acid)
    new = acid[-1]
    assume(parse_directory_name(new).max_write_id <= highest)  # type: ignore[union-attr]
    aborted -= open_ids
    children = [Entry(n, n != "000000_0", 1, is_symlink=i in links) for i, n in enumerate(names)]
    min_open = min(open_ids, default=LONG_MAX)
    id_list = cleaner_ids(
        kind,
        f"db.t:14:{min_open}:{','.join(map(str, sorted(open_ids)))}:{','.join(map(str, sorted(aborted)))}",
        highest,
    )
    result = plan_cleanup(
        vacuum(new_directories=[new], obsolete_directories=[], highest_write_id=highest), children, id_list
    )
    if not isinstance(result, CleanupPlan):
        return
    by_name = {entry.name: entry for entry in children}
    for name in result.delete:
        parsed = parse_directory_name(name)
        assert parsed is not None and parsed.max_write_id <= highest
        assert name != new and "/" not in name
        assert by_name[name].is_dir and not by_name[name].is_symlink
        if parsed.kind.value != "base":
            assert not any(parsed.min_write_id <= i <= parsed.max_write_id for i in open_ids if i <= highest)
