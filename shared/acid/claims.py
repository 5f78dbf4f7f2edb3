"""Which directories one vacuum's own commit made obsolete: docs/design.md section 7, rule 3, as ACID rules.

A vacuum claims the directories its commit superseded. The cleaner deletes a claimed directory only
if the claim holds on two counts:

* **made obsolete by this vacuum**: Hive's rules (:func:`~acidclean.shared.acid.state.acid_state`)
  over the vacuum's new directories and its claims alone call it obsolete (or aborted). A directory
  that only a *later* vacuum's output supersedes (a ``base_3`` that a later ``base_5`` covers, while
  this vacuum only wrote ``delta_4_5``) fails this test: readers that started between the two
  vacuums still read it, and only the later vacuum's lock snapshot covers them;
* **still obsolete at clean time**: the same rules over the whole current listing do not call it
  current (a new directory that is gone or unusable cannot supersede anything).

Both use the cleaner's id list capped at the vacuum's highest write id and the metastore's
transaction list, so a ``_vT`` directory whose transaction T is open or aborted is never a base or
delta that makes anything obsolete. Pure: listings and id lists in, a verdict out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from acidclean.shared.acid.names import BASE_PREFIX, parse_directory_name
from acidclean.shared.acid.state import COMPACTED_DATA_FORMAT, AcidState, Listing, acid_state
from acidclean.shared.acid.write_ids import ValidIdList, ValidTxnList
from acidclean.shared.errors import AcidLayoutError, NotEnoughHistoryError


@dataclass(frozen=True)
class ClaimVerdict:
    """What the cleaner may do with one vacuum's claims.

    ``deletable`` are claimed directories, present now, that this vacuum's commit made obsolete (or
    that belong to aborted transactions, which no reader uses) and that are not current now.
    ``refused`` says why the event must not be acted on at all; ``waiting``
    why nothing may be deleted yet; ``superseded`` why there is nothing left for this event to do.
    """

    deletable: tuple[str, ...] = ()
    gone: tuple[str, ...] = ()
    refused: str | None = None
    waiting: str | None = None
    superseded: str | None = None


def _top_level(listing: Listing) -> set[str]:
    names = {d.partition("/")[0] for d in listing.directories}
    names.update(f.path.partition("/")[0] for f in listing.files if "/" in f.path)
    return names


def _max_id(name: str) -> int:
    try:
        parsed = parse_directory_name(name)
    except AcidLayoutError:
        return -1
    return parsed.max_write_id if parsed is not None else -1


def _compacted_bases(names: Sequence[str]) -> dict[str, str]:
    """The vacuum wrote its base as a compactor does, whatever marker files it left."""
    return {name: COMPACTED_DATA_FORMAT for name in names if name.startswith(BASE_PREFIX)}


def _missing_new_directories(
    missing: Sequence[str], listing: Listing, valid_ids: ValidIdList, highest: int
) -> ClaimVerdict:
    """The vacuum's new directory is gone. That is normal once a later vacuum superseded it and that
    vacuum's cleanup removed it (its lock snapshot covered every reader still running): there is
    nothing left for this event to do. A new directory that nothing listed covers was never
    committed: the event is refused. Coverage is judged with every id committed (a later base lies
    above this vacuum's cap); either answer deletes nothing."""
    with_missing = replace(
        listing,
        directories=listing.directories + tuple(missing),
        data_formats={**listing.data_formats, **_compacted_bases(missing)},
    )
    state = acid_state(with_missing, type(valid_ids).all_committed())
    uncovered = [name for name in missing if name not in state.obsolete]
    if uncovered:
        return ClaimVerdict(
            refused=f"the vacuum's new directory {', '.join(uncovered)} does not exist and no later directory "
            "covers it: the event names output its vacuum never committed; nothing deleted"
        )
    newer = sorted(name for name in _top_level(listing) if _max_id(name) > highest)
    later = f" (later: {', '.join(newer[:5])})" if newer else ""
    return ClaimVerdict(
        superseded=f"superseded: {', '.join(missing)} was already removed by a later vacuum's cleanup{later}; "
        "what this vacuum made obsolete is covered by that vacuum, whose cleanup removes it; nothing deleted here"
    )


def superseded_by_own_output(
    new_directories: Sequence[str],
    candidates: Sequence[str],
    valid_ids: ValidIdList,
    valid_txns: ValidTxnList | None,
    location: str = "",
) -> tuple[str, ...]:
    """The ``candidates`` that a vacuum's new directories supersede by Hive's rules, or that are aborted
    (never read), each judged beside the new directories alone: a candidate base can never lend its
    coverage to another candidate. The vacuum claims from it; the cleaner checks claims against it.
    Raises :class:`NotEnoughHistoryError` when the new base is not yet valid for ``valid_ids``."""
    superseded = []
    for candidate in candidates:
        own_listing = Listing(
            directories=(*new_directories, candidate),
            data_formats=_compacted_bases(new_directories),
            location=location,
        )
        state = acid_state(own_listing, valid_ids, valid_txns)
        if candidate in state.obsolete or candidate in state.aborted:
            superseded.append(candidate)
    return tuple(superseded)


def own_output_state(
    new_directories: Sequence[str], valid_ids: ValidIdList, valid_txns: ValidTxnList | None, location: str = ""
) -> AcidState:
    """Hive's rules over a vacuum's new directories alone (raises :class:`NotEnoughHistoryError`)."""
    listing = Listing(
        directories=tuple(new_directories), data_formats=_compacted_bases(new_directories), location=location
    )
    return acid_state(listing, valid_ids, valid_txns)


def verify_claims(
    new_directories: Sequence[str],
    claims: Sequence[str],
    listing: Listing,
    valid_ids: ValidIdList,
    valid_txns: ValidTxnList | None,
    highest_write_id: int,
) -> ClaimVerdict:
    """Check a vacuum's claims against the current ``listing`` (see the module docstring).

    ``valid_ids`` must be the cleaner list capped at ``highest_write_id`` with no open id that a
    listed delta holds (the caller waits while one is open).
    """
    listed = _top_level(listing)
    missing_new = [name for name in new_directories if name not in listed]
    if missing_new:
        return _missing_new_directories(missing_new, listing, valid_ids, highest_write_id)
    present = [name for name in claims if name in listed]
    gone = tuple(sorted(name for name in claims if name not in listed))
    try:
        own = own_output_state(new_directories, valid_ids, valid_txns, listing.location)
        superseded = set(superseded_by_own_output(new_directories, present, valid_ids, valid_txns, listing.location))
    except NotEnoughHistoryError as error:
        return ClaimVerdict(waiting=f"the vacuum's new base is not yet valid for the cleaner's snapshot: {error}")
    problem = _new_directories_problem(new_directories, own, valid_txns)
    if problem is not None:
        return problem
    not_covered = [name for name in present if name not in superseded]
    if not_covered:
        return ClaimVerdict(
            refused=f"{', '.join(not_covered)} is claimed obsolete but this vacuum's new directories "
            f"({', '.join(new_directories)}) do not supersede it (Hive's rules at highest write id "
            f"{highest_write_id}); only the vacuum whose output covers it may clean it; nothing deleted"
        )
    full_listing = replace(listing, data_formats={**listing.data_formats, **_compacted_bases(new_directories)})
    try:
        full: AcidState | None = acid_state(full_listing, valid_ids, valid_txns)
    except NotEnoughHistoryError:
        full = None  # a base above the highest write id: what this vacuum covered, it covers too
    if full is not None:
        current = [name for name in present if name in full.current_directories]
        if current:
            return ClaimVerdict(
                refused=f"{', '.join(current)} is claimed obsolete but is current in the listing now "
                f"(current: {', '.join(full.current_directories)}); nothing deleted"
            )
    return ClaimVerdict(deletable=tuple(sorted(present)), gone=gone)


def _new_directories_problem(
    new_directories: Sequence[str], own: AcidState, valid_txns: ValidTxnList | None
) -> ClaimVerdict | None:
    """Every new directory must be something a reader uses now: committed, not aborted."""
    current = set(own.current_directories)
    for name in new_directories:
        if name in current:
            continue
        if name in own.aborted:
            return ClaimVerdict(
                refused=f"the vacuum's new directory {name} belongs to an aborted transaction: it supersedes "
                "nothing; nothing deleted"
            )
        parsed = parse_directory_name(name)
        visibility = parsed.visibility_txn_id if parsed is not None else 0
        if visibility and valid_txns is not None and not valid_txns.is_txn_valid(visibility):
            return ClaimVerdict(
                waiting=f"the vacuum's new directory {name} is not visible yet: transaction {visibility} is "
                "not committed"
            )
        return ClaimVerdict(
            refused=f"the vacuum's new directory {name} is not current by Hive's rules over its own output "
            f"(current: {', '.join(own.current_directories) or 'none'}); nothing deleted"
        )
    return None
