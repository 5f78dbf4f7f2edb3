"""What a snapshot of an ACID table directory reads, and what it no longer needs.

:func:`acid_state` is Hive's ``AcidUtils.getAcidState`` over a listing: it picks the best base,
the deltas to read on top of it in read order, and names what is obsolete (covered by the base or by
a wider delta), what is aborted, and which original (pre-ACID) files are still read. It is the rule
every deletion of acidclean rests on, so it follows Hive step for step, including the choices that
look odd (an invalid base is not obsolete; a lower base is obsolete even if it would be invalid).
Pure: the listing is a value, built from storage by :func:`acidclean.shared.orc.reader.list_table_dir`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from acidclean.shared.acid.names import (
    BASE_PREFIX,
    DELETE_DELTA_PREFIX,
    DELTA_PREFIX,
    LONG_MIN,
    ParsedDirectory,
    is_hidden,
    parse_base,
    parse_delta,
)
from acidclean.shared.acid.write_ids import RangeResponse, ValidIdList, ValidTxnList
from acidclean.shared.errors import NotEnoughHistoryError

COMPACTED_DATA_FORMAT = "compacted"


@dataclass(frozen=True)
class ListedFile:
    """A file under the table or partition directory; ``path`` is relative to it, ``/``-separated."""

    path: str
    size: int = 0


@dataclass(frozen=True)
class Listing:
    """A recursive listing of one table or partition directory.

    ``files`` are every file below the directory (relative paths), ``directories`` every directory
    (so empty ones count too). ``data_formats`` maps a base directory name to the ``dataFormat`` of
    its ``_metadata_acid`` file (``compacted``, ``truncated``...), which before Hive 4 is what tells a
    compactor's base from an insert overwrite's. ``location`` is only used in messages.
    """

    files: tuple[ListedFile, ...] = ()
    directories: tuple[str, ...] = ()
    data_formats: Mapping[str, str] = field(default_factory=dict, hash=False)
    location: str = ""

    @classmethod
    def from_paths(
        cls, paths: Iterable[str], *, data_formats: Mapping[str, str] | None = None, location: str = ""
    ) -> Listing:
        """A listing from relative paths: ``base_5/bucket_0`` is a file in ``base_5``, a trailing
        ``/`` marks a directory (``delta_1_1/``), a bare name is a file of the directory itself."""
        files: list[ListedFile] = []
        directories: list[str] = []
        for path in paths:
            if path.endswith("/"):
                directories.append(path.rstrip("/"))
            else:
                files.append(ListedFile(path))
        return cls(tuple(files), tuple(directories), dict(data_formats or {}), location)

    def path_of(self, name: str) -> str:
        return f"{self.location.rstrip('/')}/{name}" if self.location else name


@dataclass(frozen=True)
class AcidState:
    """The result of :func:`acid_state`, named as in Hive's ``AcidDirectory``.

    ``deltas`` are the current insert and delete deltas in read order. ``obsolete`` and ``aborted``
    are names of children of the directory, in Hive's order (bases as listed, then original files and
    directories, then deltas in read order). ``original_files`` are the pre-ACID files still read
    (none once there is a base), sorted by path, which is the order their row ids are assigned in.
    """

    base: ParsedDirectory | None
    deltas: tuple[ParsedDirectory, ...]
    obsolete: tuple[str, ...]
    aborted: tuple[str, ...]
    original_files: tuple[ListedFile, ...]
    aborted_write_ids: tuple[int, ...] = ()
    uncompacted_aborts: bool = False
    base_is_compacted: bool = False

    @property
    def delete_deltas(self) -> tuple[ParsedDirectory, ...]:
        return tuple(d for d in self.deltas if d.is_delete_delta)

    @property
    def insert_deltas(self) -> tuple[ParsedDirectory, ...]:
        return tuple(d for d in self.deltas if not d.is_delete_delta)

    @property
    def current_directories(self) -> tuple[str, ...]:
        """The names of the base (if any) and current deltas: what a reader opens."""
        return ((self.base.name,) if self.base else ()) + tuple(d.name for d in self.deltas)


def _children(listing: Listing) -> dict[str, bool]:
    """Direct children of the listed directory: name -> is a directory."""
    children: dict[str, bool] = {}
    for listed in listing.files:
        head, slash, _ = listed.path.partition("/")
        children[head] = children.get(head, False) or bool(slash)
    for directory in listing.directories:
        children[directory.partition("/")[0]] = True
    return children


def _original_files(
    listing: Listing, top_level_files: set[str], original_directories: set[str], ignore_empty_files: bool
) -> tuple[ListedFile, ...]:
    found = []
    for listed in listing.files:
        parts = listed.path.split("/")
        if parts[0] not in top_level_files and parts[0] not in original_directories:
            continue
        if any(is_hidden(part) for part in parts) or (ignore_empty_files and listed.size == 0):
            continue
        found.append(listed)
    return tuple(sorted(found, key=lambda f: f.path))


class _StateBuilder:
    """One pass of Hive's ``getChildState`` / ``processBaseDir`` / ``processDeltaDir``."""

    def __init__(self, listing: Listing, valid_ids: ValidIdList, valid_txns: ValidTxnList | None) -> None:
        self.listing = listing
        self.valid_ids = valid_ids
        self.valid_txns = valid_txns
        self.base: ParsedDirectory | None = None
        self.base_compacted = False
        self.oldest_base: ParsedDirectory | None = None
        self.oldest_base_compacted = False
        self.obsolete: list[str] = []
        self.aborted: list[str] = []
        self.aborted_write_ids: set[int] = set()
        self.candidates: list[ParsedDirectory] = []
        self.uncompacted_aborts = False

    def is_usable(self, name: str, visibility_txn_id: int) -> bool:
        """``isDirUsable``: a ``_vT`` directory counts only once T committed; if T aborted, the
        directory is aborted. Without a transaction list every T counts as committed."""
        if self.valid_txns is None or self.valid_txns.is_txn_valid(visibility_txn_id):
            return True
        if self.valid_txns.is_txn_aborted(visibility_txn_id):
            self.aborted.append(name)
        return False

    def is_compacted(self, parsed: ParsedDirectory) -> bool:
        if self.valid_ids.hive2_base_rules:
            return True  # Hive 2 had no insert-overwrite bases
        return parsed.visibility_txn_id > 0 or self.listing.data_formats.get(parsed.name) == COMPACTED_DATA_FORMAT

    def is_valid_base(self, parsed: ParsedDirectory, compacted: bool) -> bool:
        write_id = parsed.write_id
        if write_id == LONG_MIN:
            return True  # the first compaction after converting a table to ACID
        if self.valid_ids.hive2_base_rules:
            return self.valid_ids.is_valid_base(write_id)
        min_open = self.valid_ids.min_open_write_id
        # HIVE-29601: the "at or below the min open id" shortcut holds only at or below the watermark.
        # A min open id can lie above it (a cleaner's list capped at the vacuum's highest write id, or
        # a list whose watermark came from NEXT_WRITE_ID); unbounded, a later vacuum's base, or an
        # aborted insert overwrite's, became the best base and everything below it obsolete.
        if min_open is not None and write_id <= min_open and write_id <= self.valid_ids.high_watermark:
            return True
        if compacted:
            return self.valid_ids.is_valid_base(write_id)
        # An insert overwrite's base is a delta that hides everything before it: visible once committed.
        return self.valid_ids.is_write_id_valid(write_id)

    def add_base(self, name: str) -> None:
        parsed = parse_base(name)
        if not self.is_usable(name, parsed.visibility_txn_id):
            return
        compacted = self.is_compacted(parsed)
        if self.oldest_base is None or self.oldest_base.write_id > parsed.write_id:
            self.oldest_base, self.oldest_base_compacted = parsed, compacted
        if self.valid_ids.is_write_id_aborted(parsed.write_id) and not compacted:
            self.aborted.append(name)  # an aborted insert overwrite
            self.aborted_write_ids.add(parsed.write_id)
            return
        base = self.base
        visible_txn = self.valid_txns is None or self.valid_txns.is_txn_valid(parsed.visibility_txn_id)
        if (
            base is None
            or base.write_id < parsed.write_id
            # The compactor's base beats an insert overwrite's of the same write id once committed.
            or (base.write_id == parsed.write_id and compacted and visible_txn)
        ):
            # A base that is not valid for this snapshot is skipped, but it is not obsolete.
            if self.is_valid_base(parsed, compacted):
                if base is not None:
                    self.obsolete.append(base.name)
                self.base, self.base_compacted = parsed, compacted
        else:
            self.obsolete.append(name)

    def add_delta(self, name: str) -> None:
        parsed = parse_delta(name)
        if not self.is_usable(name, parsed.visibility_txn_id):
            return
        aborted = self.valid_ids.is_write_id_range_aborted(parsed.min_write_id, parsed.max_write_id)
        if aborted is RangeResponse.ALL:
            self.aborted.append(name)
            self.aborted_write_ids.update(range(parsed.min_write_id, parsed.max_write_id + 1))
            return
        if aborted is RangeResponse.SOME:
            self.uncompacted_aborts = True
        # A delta with no valid id is ignored, not obsolete: its ids may become visible later.
        if self.valid_ids.is_write_id_range_valid(parsed.min_write_id, parsed.max_write_id) is not RangeResponse.NONE:
            self.candidates.append(parsed)

    def best_working_deltas(self) -> list[ParsedDirectory]:
        """``findBestWorkingDeltas``: walk the sorted candidates greedily from the base's write id."""
        kept: list[ParsedDirectory] = []
        current = self.base.write_id if self.base is not None else 0
        last_statement = -1
        previous: ParsedDirectory | None = None
        kept_ranges: dict[tuple[int, int, int, bool], int] = {}  # a kept range -> its visibility txn
        for delta in sorted(self.candidates, key=ParsedDirectory.sort_key):
            same = (delta.min_write_id, delta.max_write_id, delta.statement_order, delta.is_delete_delta)
            if same in kept_ranges and kept_ranges[same] != delta.visibility_txn_id:
                # Two compactions of one range (a duplicate compaction job, HIVE-29210): the one with the
                # higher visibility transaction, sorted first, is read; the other is obsolete. (The same
                # range padded differently, without _v, is still read twice, as Hive does.)
                self.obsolete.append(delta.name)
                continue
            if delta.max_write_id > current:
                # Kept only if it brings an id this snapshot cares about.
                if self.valid_ids.is_write_id_range_valid(current + 1, delta.max_write_id) is not RangeResponse.NONE:
                    kept.append(delta)
                    kept_ranges[same] = delta.visibility_txn_id
                    current, last_statement, previous = delta.max_write_id, delta.statement_order, delta
            elif delta.max_write_id == current and last_statement >= 0:
                # Another statement of the same multi-statement transaction.
                kept.append(delta)
                kept_ranges[same] = delta.visibility_txn_id
                previous = delta
            elif (
                previous is not None
                and delta.min_write_id == previous.min_write_id
                and delta.max_write_id == previous.max_write_id
                and delta.statement_order == previous.statement_order
            ):
                # The delete_delta_x_y / delta_x_y pair of one range (or the same range padded differently).
                kept.append(delta)
                kept_ranges[same] = delta.visibility_txn_id
                previous = delta
            else:
                # Covered by the base, by a wider delta, or a per-statement delta already minor-compacted.
                self.obsolete.append(delta.name)
        return kept

    def not_enough_history(self) -> NotEnoughHistoryError:
        assert self.oldest_base is not None
        exceptions = self.valid_ids.exceptions
        first = str(exceptions[0]) if exceptions else "x"
        return NotEnoughHistoryError(
            f"Not enough history available for ({self.valid_ids.high_watermark},{first}).  "
            f"Oldest available base: {self.listing.path_of(self.oldest_base.name)}",
            oldest_base=self.oldest_base.name,
        )


def acid_state(
    listing: Listing | Iterable[str],
    valid_ids: ValidIdList,
    valid_txns: ValidTxnList | None = None,
    *,
    ignore_empty_files: bool = False,
) -> AcidState:
    """Hive's ``AcidUtils.getAcidState`` over a listing.

    ``valid_ids`` is the snapshot (reader, compactor or cleaner list; a Hive 2 transaction list for
    tables whose names carry transaction ids). ``valid_txns`` decides whether the transaction of a
    ``_vT`` directory committed; without it every such transaction counts as committed (Hive 3,
    whose names carry no ``_v``). A plain iterable of paths is read with :meth:`Listing.from_paths`.

    Children are processed in name order, which is the order HDFS lists them in; only which lower
    bases are obsolete can depend on it. Raises :class:`NotEnoughHistoryError` when there are
    compacted bases but none is valid for the snapshot, and :class:`AcidLayoutError` for a
    ``base_``/``delta_`` directory whose name does not parse.
    """
    if not isinstance(listing, Listing):
        listing = Listing.from_paths(listing)
    builder = _StateBuilder(listing, valid_ids, valid_txns)
    top_level_files: set[str] = set()
    original_directories: list[str] = []
    top_level_order: list[str] = []
    for name, is_directory in sorted(_children(listing).items()):
        if is_hidden(name):
            continue
        if not is_directory:
            top_level_files.add(name)
            top_level_order.append(name)
        elif name.startswith(BASE_PREFIX):
            builder.add_base(name)
        elif name.startswith((DELTA_PREFIX, DELETE_DELTA_PREFIX)):
            builder.add_delta(name)
        else:
            original_directories.append(name)
            top_level_order.append(name)

    original_files: tuple[ListedFile, ...] = ()
    if builder.base is not None:
        # A base holds every original row (rewritten with ACID identities): the originals are obsolete.
        sizes = {f.path: f.size for f in listing.files}
        files = [n for n in top_level_order if n in top_level_files]
        if ignore_empty_files:
            files = [n for n in files if sizes.get(n, 0) != 0]
        builder.obsolete.extend(files)
        builder.obsolete.extend(original_directories)
    else:
        original_files = _original_files(listing, top_level_files, set(original_directories), ignore_empty_files)

    deltas = builder.best_working_deltas()
    if builder.oldest_base is not None and builder.base is None and builder.oldest_base_compacted:
        raise builder.not_enough_history()
    return AcidState(
        base=builder.base,
        deltas=tuple(deltas),
        obsolete=tuple(builder.obsolete),
        aborted=tuple(builder.aborted),
        original_files=original_files,
        aborted_write_ids=tuple(sorted(builder.aborted_write_ids)),
        uncompacted_aborts=builder.uncompacted_aborts,
        base_is_compacted=builder.base_compacted,
    )


def obsolete_dirs(
    listing: Listing | Iterable[str],
    valid_ids: ValidIdList,
    valid_txns: ValidTxnList | None = None,
    *,
    include_aborted: bool = False,
) -> tuple[str, ...]:
    """The sorted names of the children a cleaner may remove: the obsolete directories (and the
    original files once a base exists), plus the aborted ones with ``include_aborted`` (as Hive 4's
    cleaner does). Build ``valid_ids`` capped at the vacuum's highest write id, preferably a
    :class:`~acidclean.shared.acid.write_ids.ValidCleanerWriteIdList`, so nothing above it is touched."""
    state = acid_state(listing, valid_ids, valid_txns)
    names = set(state.obsolete)
    if include_aborted:
        names.update(state.aborted)
    return tuple(sorted(names))
