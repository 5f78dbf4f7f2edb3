"""Rule 3 (docs/design.md section 7): only directories that this vacuum's own commit made obsolete are
deleted: its claimed list, each checked by :func:`acidclean.shared.acid.claims.verify_claims`
(superseded by this vacuum's new directories, still obsolete in the current listing, with a cleaner
id list capped at the vacuum's highest write id and the metastore's transaction list). Never the new
directory, a newer delta, an open transaction's delta, or a directory only a later vacuum made
obsolete. The event's ``obsolete_directories`` is a claim to check, not an order: a claim the listing
does not confirm sends the event to the dead-letter topic, and so does a new directory without this
vacuum's marker. Pure: callers pass the listing, the markers' bytes and the id lists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from acidclean.consumers.rules.paths import plain_name_problem
from acidclean.consumers.rules.verdicts import NotYet, Refusal
from acidclean.schemas.events import VacuumCommitted
from acidclean.shared.acid.claims import verify_claims
from acidclean.shared.acid.id_lists import CleanerIds
from acidclean.shared.acid.names import parse_directory_name
from acidclean.shared.acid.state import ListedFile, Listing
from acidclean.shared.acid.write_ids import ValidTxnList
from acidclean.shared.errors import AcidLayoutError
from acidclean.shared.vacuum_marker import VACUUM_MARKER, MarkerError, VacuumMarker


class ListedChild(Protocol):
    """A direct child of the table's location as storage lists it."""

    @property
    def name(self) -> str: ...

    @property
    def is_dir(self) -> bool: ...

    @property
    def size(self) -> int: ...

    @property
    def is_symlink(self) -> bool: ...


@dataclass(frozen=True)
class KeptDirectory:
    """A child the rules call obsolete that the cleaner leaves alone, and why."""

    name: str
    reason: str


@dataclass(frozen=True)
class CleanupPlan:
    """The children to delete (names, sorted), the obsolete ones deliberately kept, and why, when
    there is nothing to do at all (``superseded``)."""

    delete: tuple[str, ...]
    kept: tuple[KeptDirectory, ...] = ()
    superseded: str | None = None

    def note(self) -> str | None:
        notes = [self.superseded] if self.superseded else []
        notes += [f"kept {item.name}: {item.reason}" for item in self.kept]
        return "; ".join(notes) if notes else None  # cut to fit by the CleanupDone that carries it


def check_claims(vacuum: VacuumCommitted) -> Refusal | None:
    """Static checks of the names an event carries, before anything is listed or asked."""
    new = set(vacuum.new_directories)
    for name in [*vacuum.new_directories, *vacuum.obsolete_directories]:
        problem = plain_name_problem(name)
        if problem is not None:
            return Refusal("unsafe_path", f"{problem}: it is not a direct child of {vacuum.location}")
        try:
            parsed = parse_directory_name(name)
        except AcidLayoutError as error:
            return Refusal("unsafe_path", f"{name!r} does not match the ACID directory grammar: {error}")
        if parsed is None:
            return Refusal(
                "unsafe_path", f"{name!r} does not match the ACID directory grammar (base_, delta_, delete_delta_)"
            )
        if name in new and parsed.max_write_id > vacuum.highest_write_id:
            return Refusal(
                "invalid_event",
                f"new directory {name} holds ids above the vacuum's highest write id {vacuum.highest_write_id}",
            )
        if name not in new and parsed.max_write_id > vacuum.highest_write_id:
            return Refusal(
                "not_obsolete",
                f"{name} is claimed obsolete but holds ids above the vacuum's highest write id "
                f"{vacuum.highest_write_id}",
            )
    if not vacuum.lock_snapshot and vacuum.locks_observed is None:
        return Refusal(
            "invalid_event",
            "the lock snapshot is empty but the event does not say the vacuum saw no locks (locks_observed "
            "is missing): a lost snapshot would let the cleaner delete under running readers; nothing deleted",
        )
    both = sorted(new.intersection(vacuum.obsolete_directories))
    if both:
        return Refusal("not_obsolete", f"{', '.join(both)} is both the vacuum's new directory and claimed obsolete")
    return None


def check_markers(vacuum: VacuumCommitted, markers: Mapping[str, bytes | None]) -> Refusal | None:
    """Each listed new directory must hold the marker of this very vacuum (``markers``: the present new
    directories and their marker's bytes, None if absent). Without it a forged or mistaken event could
    make committed deltas look compacted by a directory no vacuum wrote (an aborted insert's base)."""
    for name, data in sorted(markers.items()):
        if data is None:
            return Refusal(
                "invalid_event",
                f"{name} holds no {VACUUM_MARKER}: it was not committed by an acidclean vacuum, so this event "
                "cannot claim it superseded anything; nothing deleted",
            )
        try:
            marker = VacuumMarker.parse(data)
        except MarkerError as error:
            return Refusal("invalid_event", f"{name}/{VACUUM_MARKER} is unreadable ({error}); nothing deleted")
        if marker.event_id != str(vacuum.event_id):
            return Refusal(
                "invalid_event",
                f"{name} was committed by vacuum {marker.event_id} (job {marker.vacuum_job_id}), not by this "
                f"event's vacuum {vacuum.event_id} (job {vacuum.vacuum_job_id}); nothing deleted",
            )
        if (marker.vacuum_job_id, marker.highest_write_id) != (vacuum.vacuum_job_id, vacuum.highest_write_id):
            return Refusal(
                "invalid_event",
                f"{name} was committed by job {marker.vacuum_job_id} up to write id {marker.highest_write_id}; "
                f"the event says job {vacuum.vacuum_job_id} up to {vacuum.highest_write_id}: it was altered; "
                "nothing deleted",
            )
    return None


def plan_cleanup(
    vacuum: VacuumCommitted,
    children: Sequence[ListedChild],
    ids: CleanerIds,
    valid_txns: ValidTxnList | None = None,
) -> CleanupPlan | Refusal | NotYet:
    """What to delete among ``children`` (the location's direct children, listed now).

    Only the vacuum's own claims are candidates, each kept only if this vacuum's commit made it
    obsolete and it is still obsolete now (:func:`~acidclean.shared.acid.claims.verify_claims`);
    ``valid_txns`` (the metastore's transaction list) decides whether a ``_vT`` directory counts.
    Any violation refuses the whole event, so nothing at all is deleted for it.
    """
    open_ids = ids.relevant_open_ids(entry.name for entry in children if entry.is_dir)
    if open_ids:
        open_text = ", ".join(str(i) for i in open_ids[:10])
        return NotYet(
            f"transaction or write id(s) {open_text} at or below the vacuum's highest write id "
            f"{vacuum.highest_write_id} are still open; their directories must not be touched"
        )
    by_name = {entry.name: entry for entry in children}
    listing = Listing(
        files=tuple(ListedFile(entry.name, entry.size) for entry in children if not entry.is_dir),
        directories=tuple(entry.name for entry in children if entry.is_dir),
        location=vacuum.location,
    )
    try:
        verdict = verify_claims(
            vacuum.new_directories,
            vacuum.obsolete_directories,
            listing,
            ids.valid_ids(),
            valid_txns,
            vacuum.highest_write_id,
        )
    except AcidLayoutError as error:
        return Refusal("other", f"the table directory does not follow Hive's ACID layout: {error}; nothing deleted")
    if verdict.refused is not None:
        return Refusal("not_obsolete", verdict.refused)
    if verdict.waiting is not None:
        return NotYet(verdict.waiting)
    if verdict.superseded is not None:
        return CleanupPlan((), superseded=verdict.superseded)

    kept = [KeptDirectory(name, "already removed") for name in verdict.gone]
    delete: list[str] = []
    for name in verdict.deletable:
        entry = by_name[name]
        problem = plain_name_problem(name)
        if problem is not None:
            return Refusal("unsafe_path", f"{problem}; nothing deleted")
        if entry.is_symlink:
            return Refusal(
                "unsafe_path",
                f"{name} under {vacuum.location} is a symbolic link; the cleaner never deletes through links "
                "(it could lead out of the table); nothing deleted",
            )
        if not entry.is_dir:
            kept.append(KeptDirectory(name, "not a directory; left alone"))
            continue
        delete.append(name)
    return CleanupPlan(tuple(delete), tuple(kept))
