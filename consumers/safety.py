"""What the cleaner may delete: DESIGN.md section 7, rules 3 and 4, as pure checks.

Rule 3: only directories that this vacuum's own commit made obsolete are deleted: its claimed list,
each checked by :func:`acidclean.shared.acid.claims.verify_claims` (superseded by this vacuum's new
directories, and still obsolete in the current listing, with a cleaner id list capped at the
vacuum's highest write id and the metastore's transaction list). Never the new directory, a newer
delta, an open transaction's delta, or a directory only a later vacuum made obsolete. The event's
``obsolete_directories`` is a claim to check, not an order: a claim the listing does not confirm
sends the event to the dead-letter topic.

Rule 4: every deleted path is a direct child of the table or partition location the *metastore*
gives (the event's location must be the same), matches the ACID directory grammar, is not a symbolic
link, and the location lies under the tenant's allowed roots (and not under another tenant's, when
roots nest). ``..`` anywhere is refused outright.

Nothing here performs I/O: callers pass listings, id lists and resolved paths, and get back a
:class:`CleanupPlan`, a :class:`Refusal` (dead letter, nothing deleted) or a :class:`NotYet` (wait).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlparse

from acidclean.schemas.events import RejectionCode, VacuumCommitted
from acidclean.shared.acid.claims import verify_claims
from acidclean.shared.acid.names import parse_directory_name
from acidclean.shared.acid.state import ListedFile, Listing
from acidclean.shared.acid.write_ids import (
    ValidCleanerTxnList,
    ValidCleanerWriteIdList,
    ValidIdList,
    ValidTxnList,
    ValidWriteIdList,
)
from acidclean.shared.errors import AcidLayoutError
from acidclean.shared.filesystem import Entry
from acidclean.shared.metastore import MetastoreKind
from acidclean.shared.vacuum_marker import VACUUM_MARKER, MarkerError, VacuumMarker


@dataclass(frozen=True)
class Refusal:
    """The event must not be acted on: it goes to the dead-letter topic with this reason."""

    code: RejectionCode
    reason: str


@dataclass(frozen=True)
class NotYet:
    """Cleaning now could remove something a live transaction may need: check again later."""

    reason: str


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


# -- locations and roots --------------------------------------------------------------------------


@dataclass(frozen=True)
class StoragePath:
    """A location as scheme, authority and a normalised absolute path, comparable across spellings
    (``file:/w/t``, ``file:///w/t`` and ``/w/t`` are the same; ``s3a://`` is ``s3://``)."""

    scheme: str
    authority: str
    path: str

    def is_under(self, root: StoragePath) -> bool:
        """Strictly below ``root`` (a location equal to a root is not inside it)."""
        if (self.scheme, self.authority) != (root.scheme, root.authority) or self.path == root.path:
            return False
        return root.path == "/" or self.path.startswith(root.path + "/")

    def __str__(self) -> str:
        if self.scheme == "file" and not self.authority:
            return self.path
        return f"{self.scheme}://{self.authority}{self.path}"


class UnsafeLocation(ValueError):
    """A location string that is not an absolute, ``..``-free path."""


_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "": "file"}


def storage_path(uri: str) -> StoragePath:
    """Parse a location; raises :class:`UnsafeLocation` for ``..``, a relative path, a NUL byte or
    anything ``urlparse`` cannot parse (e.g. ``hdfs://[nn/x``, an unclosed IPv6 bracket)."""
    if "\x00" in uri or not uri.strip():
        raise UnsafeLocation(f"location {uri!r} is empty or holds a NUL byte")
    try:
        parsed = urlparse(uri)
    except ValueError as error:  # a location nobody can resolve is refused like any other unsafe one
        raise UnsafeLocation(f"location {uri!r} is not a valid URI ({error})") from None
    scheme = parsed.scheme.lower()
    scheme = _SCHEME_ALIASES.get(scheme, scheme)
    authority = parsed.netloc.lower()
    if scheme == "file" and authority == "localhost":
        authority = ""
    raw_path = parsed.path
    if ".." in raw_path.split("/"):
        raise UnsafeLocation(f"location {uri!r} contains '..'")
    if not raw_path.startswith("/"):
        raise UnsafeLocation(f"location {uri!r} is not an absolute path")
    return StoragePath(scheme, authority, posixpath.normpath(raw_path).replace("//", "/"))


@dataclass(frozen=True)
class TenantRoots:
    """Every tenant's allowed roots, as declared and with symbolic links resolved."""

    tenant: str
    declared: Mapping[str, tuple[StoragePath, ...]]
    resolved: Mapping[str, tuple[StoragePath, ...]]

    @classmethod
    def build(
        cls, tenant: str, allowed_roots: Mapping[str, Sequence[str]], real_path: Callable[[str], str] = lambda p: p
    ) -> TenantRoots:
        """``real_path`` resolves a local root's symbolic links (identity elsewhere)."""
        declared: dict[str, tuple[StoragePath, ...]] = {}
        resolved: dict[str, tuple[StoragePath, ...]] = {}
        for name, roots in allowed_roots.items():
            paths = tuple(storage_path(root) for root in roots)
            declared[name] = paths
            resolved[name] = tuple(storage_path(real_path(p.path)) if p.scheme == "file" else p for p in paths)
        return cls(tenant, declared, resolved)

    def own(self) -> tuple[StoragePath, ...]:
        return self.declared.get(self.tenant, ())

    def check(self, location: StoragePath, real_location: StoragePath) -> Refusal | None:
        """Refuse a location outside this tenant's roots, or inside another tenant's narrower root,
        as written and with symbolic links resolved."""
        for roots, where, shown in ((self.declared, location, ""), (self.resolved, real_location, " (links resolved)")):
            refusal = self._check(roots, where, shown)
            if refusal is not None:
                return refusal
        return None

    def _check(self, roots: Mapping[str, tuple[StoragePath, ...]], where: StoragePath, shown: str) -> Refusal | None:
        best_own = _deepest(roots.get(self.tenant, ()), where)
        for other, other_roots in roots.items():
            if other == self.tenant:
                continue
            best_other = _deepest(other_roots, where)
            if best_other is not None and (best_own is None or len(best_other.path) > len(best_own.path)):
                return Refusal(
                    "other_tenant",
                    f"location {where}{shown} lies under {best_other}, an allowed root of tenant {other!r}, "
                    f"not of tenant {self.tenant!r}; nothing deleted",
                )
        if best_own is None:
            allowed = ", ".join(str(root) for root in roots.get(self.tenant, ())) or "none configured"
            return Refusal(
                "unsafe_path",
                f"location {where}{shown} is not under an allowed root of tenant {self.tenant!r} "
                f"({allowed}); nothing deleted",
            )
        return None


def _deepest(roots: Sequence[StoragePath], where: StoragePath) -> StoragePath | None:
    containing = [root for root in roots if where.is_under(root)]
    return max(containing, key=lambda root: len(root.path)) if containing else None


# -- the event's claims -----------------------------------------------------------------------------


def _plain_name_problem(name: str) -> str | None:
    if "/" in name or "\\" in name or "\x00" in name or name in (".", "..") or ".." in name:
        return f"{name!r} is not a plain directory name (a path separator or '..')"
    return None


def check_claims(vacuum: VacuumCommitted) -> Refusal | None:
    """Static checks of the names an event carries, before anything is listed or asked."""
    new = set(vacuum.new_directories)
    for name in [*vacuum.new_directories, *vacuum.obsolete_directories]:
        problem = _plain_name_problem(name)
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
    return None


def check_location(
    vacuum: VacuumCommitted, table_location: str, real_table_location: str, roots: TenantRoots
) -> Refusal | None:
    """The event's location must be the metastore's, and under the tenant's allowed roots."""
    try:
        claimed = storage_path(vacuum.location)
        actual = storage_path(table_location)
        real = storage_path(real_table_location)
    except UnsafeLocation as error:
        return Refusal("unsafe_path", f"{error}; nothing deleted")
    if claimed != actual:
        return Refusal(
            "unsafe_path",
            f"the event's location {vacuum.location} is not the metastore's location {table_location} of "
            f"{vacuum.table}{'/' + vacuum.partition if vacuum.partition else ''}; nothing deleted",
        )
    return roots.check(actual, real)


# -- the cleaner id list ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CleanerIds:
    """The metastore's current id list capped at the vacuum's highest write id.

    Open and aborted ids above the cap are dropped: nothing above it is visible to the cleaner.
    """

    kind: MetastoreKind
    cap: int
    open_ids: tuple[int, ...]
    aborted_ids: tuple[int, ...]
    table_name: str | None = None

    def relevant_open_ids(self, children: Sequence[Entry]) -> tuple[int, ...]:
        """Open ids that matter for this directory. On Hive 3+ write ids are per table, so every open
        id at or below the cap is this table's. On Hive 2 transaction ids are global: an open
        transaction matters only if a listed delta's range holds it (Hive 2's own Cleaner ignores
        open transactions altogether); otherwise one long transaction on another table would stop
        every cleanup."""
        if self.kind is not MetastoreKind.HIVE2:
            return self.open_ids
        ranges = []
        for entry in children:
            try:
                parsed = parse_directory_name(entry.name)
            except AcidLayoutError:
                continue
            if parsed is not None and not parsed.is_base:
                ranges.append((parsed.min_write_id, parsed.max_write_id))
        return tuple(i for i in self.open_ids if any(low <= i <= high for low, high in ranges))

    def valid_ids(self) -> ValidIdList:
        """The cleaner list, once no relevant id is open (a clean waits while one is)."""
        if self.kind is MetastoreKind.HIVE2:
            return ValidCleanerTxnList(self.cap, (), self.aborted_ids)
        return ValidCleanerWriteIdList(self.cap, (), self.aborted_ids, None, self.table_name)


def cleaner_ids(kind: MetastoreKind, valid_ids_text: str, highest_write_id: int) -> CleanerIds:
    """Parse the metastore's id list (``db.t:hwm:minOpen:open:aborted``) and cap it at the vacuum's
    highest write id. On a Hive 2 metastore the ids are transaction ids and Hive 2's base rules apply."""
    current = ValidWriteIdList.from_string(valid_ids_text)
    cap = min(current.high_watermark, highest_write_id)
    return CleanerIds(
        kind=kind,
        cap=cap,
        open_ids=tuple(i for i in current.open_ids if i <= cap),
        aborted_ids=tuple(i for i in current.aborted_ids if i <= cap),
        table_name=current.table_name,
    )


# -- the plan -------------------------------------------------------------------------------------


def plan_cleanup(
    vacuum: VacuumCommitted,
    children: Sequence[Entry],
    ids: CleanerIds,
    valid_txns: ValidTxnList | None = None,
) -> CleanupPlan | Refusal | NotYet:
    """What to delete among ``children`` (the location's direct children, listed now).

    Only the vacuum's own claims are candidates, each kept only if this vacuum's commit made it
    obsolete and it is still obsolete now (:func:`~acidclean.shared.acid.claims.verify_claims`);
    ``valid_txns`` (the metastore's transaction list) decides whether a ``_vT`` directory counts.
    Any violation refuses the whole event, so nothing at all is deleted for it.
    """
    open_ids = ids.relevant_open_ids(children)
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
        problem = _plain_name_problem(name)
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
