"""What a vacuum compacts into what: the pure planning step of the vacuum job.

Given the listing of a table or partition directory and the metastore's valid id list, a plan names
the input directories, the directories to write, the highest write id compacted, the buckets to
process and the directories the vacuum will make obsolete. It follows Hive's compactor:

* ids are compacted only below the lowest open one (the compactor list of :mod:`.id_lists`), so an
  open transaction can never commit into a range already compacted;
* MINOR (``VACUUM TABLE t``) rewrites the current deltas as one ``delta_MIN_MAX`` and the current
  delete deltas as one ``delete_delta_MIN_MAX`` (same range, as Hive writes them), and needs at
  least two current deltas;
* MAJOR (``VACUUM TABLE t FULL``) rewrites the base, the current deltas and any original files as
  ``base_MAX`` with the deletes applied, and needs at least one delta or original file.

When there is nothing to do the plan is refused with the reason. No I/O: the listing is a value.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from acidclean.shared.acid.claims import superseded_by_own_output
from acidclean.shared.acid.id_lists import MetastoreKind, compactor_ids, id_name, lowest_open_id
from acidclean.shared.acid.names import DirectoryKind, base_name, delta_name, parse_directory_name
from acidclean.shared.acid.state import AcidState, Listing, acid_state
from acidclean.shared.acid.write_ids import ValidIdList, ValidTxnList
from acidclean.shared.errors import AcidLayoutError, NotEnoughHistoryError, NothingToCompactError
from acidclean.shared.orc.reader import snapshot_files


class CompactionType(str, enum.Enum):
    MINOR = "MINOR"  # VACUUM TABLE t
    MAJOR = "MAJOR"  # VACUUM TABLE t FULL


@dataclass(frozen=True)
class CompactionPlan:
    """One vacuum, decided. ``state`` is what the compaction reads (for MINOR: the deltas only);
    ``insert_target`` is ``base_N`` or ``delta_M_N``, ``delete_target`` the ``delete_delta_M_N`` of a
    MINOR plan that has delete deltas to carry (None otherwise)."""

    compaction_type: CompactionType
    table: str
    partition: str | None
    listing: Listing
    valid_ids: ValidIdList
    state: AcidState
    insert_target: str
    delete_target: str | None
    lowest_write_id: int
    highest_write_id: int
    buckets: tuple[int, ...]
    input_files: int
    input_bytes: int
    obsolete_after: tuple[str, ...]
    held_back: tuple[str, ...] = ()
    held_back_by: int | None = None

    @property
    def inputs(self) -> tuple[str, ...]:
        """Input directory names (base first, deltas in read order), then original files."""
        directories = tuple(d.name for d in ((self.state.base,) if self.state.base else ()) + self.state.deltas)
        return directories + tuple(f.path for f in self.state.original_files)

    @property
    def targets(self) -> tuple[str, ...]:
        """The directories to commit, in commit order: the delete delta first, as Hive's
        ``CompactorOutputCommitter`` renames them (in name order)."""
        return ((self.delete_target,) if self.delete_target else ()) + (self.insert_target,)

    @property
    def existing_targets(self) -> tuple[str, ...]:
        present = set(top_level_directories(self.listing))
        return tuple(name for name in self.targets if name in present)


def top_level_directories(listing: Listing) -> list[str]:
    names = {d.partition("/")[0] for d in listing.directories}
    names.update(f.path.partition("/")[0] for f in listing.files if "/" in f.path)
    return sorted(names)


def _with_directories(listing: Listing, names: tuple[str, ...]) -> Listing:
    return replace(listing, directories=listing.directories + names)


def _enough(state: AcidState, compaction_type: CompactionType) -> bool:
    if compaction_type is CompactionType.MINOR:
        return len(state.deltas) > 1
    return bool(state.deltas) or bool(state.original_files)


def _describe_table(table: str, partition: str | None) -> str:
    return f"{table} partition {partition}" if partition else table


def _nothing_to_compact(state: AcidState, compaction_type: CompactionType, where: str) -> NothingToCompactError:
    if compaction_type is CompactionType.MINOR and len(state.deltas) == 1:
        return NothingToCompactError(
            f"nothing to compact in {where}: only one current delta ({state.deltas[0].name}); a minor vacuum "
            "needs at least two (a full vacuum, --full, would rewrite it as a base)"
        )
    if state.base is not None:
        return NothingToCompactError(
            f"nothing to compact in {where}: {state.base.name} already holds every committed row and no delta "
            "follows it"
        )
    return NothingToCompactError(f"nothing to compact in {where}: it has no committed delta")


def plan_compaction(
    listing: Listing,
    valid_ids_text: str,
    kind: MetastoreKind,
    compaction_type: CompactionType,
    *,
    table: str,
    partition: str | None = None,
    valid_txns_text: str | None = None,
) -> CompactionPlan:
    """Decide one vacuum, or raise :class:`VacuumRefusedError` saying why there is none.

    ``valid_txns_text`` is the metastore's transaction list: a ``_vT`` directory (Hive's own
    compactor output) counts only once T committed. Without it every such T counts as committed.
    """
    where = _describe_table(table, partition)
    valid_ids = compactor_ids(valid_ids_text, kind)
    valid_txns = ValidTxnList.from_string(valid_txns_text) if valid_txns_text is not None else None
    full_state = acid_state(listing, valid_ids, valid_txns)
    if not _enough(full_state, compaction_type):
        unblocked = acid_state(listing, compactor_ids(valid_ids_text, kind, ignore_open=True), valid_txns)
        lowest_open = lowest_open_id(valid_ids_text, kind)
        if _enough(unblocked, compaction_type) and lowest_open is not None:
            waiting = ", ".join(d.name for d in unblocked.deltas if d.max_write_id >= lowest_open)
            raise NothingToCompactError(
                f"nothing can be compacted in {where} yet: {id_name(kind)} {lowest_open} is open and lies below "
                f"every delta it would compact ({waiting}); vacuum again once it commits or aborts"
            )
        raise _nothing_to_compact(full_state, compaction_type, where)

    if compaction_type is CompactionType.MINOR:
        state = replace(full_state, base=None, original_files=())
        lowest = min(d.min_write_id for d in state.deltas)
        highest = max(d.max_write_id for d in state.deltas)
        insert_target = delta_name(lowest, highest)
        delete_target = delta_name(lowest, highest, delete=True) if state.delete_deltas else None
    else:
        state = full_state
        lowest = 0
        highest = max([d.max_write_id for d in state.deltas] + ([state.base.write_id] if state.base else [0]))
        insert_target = base_name(highest)
        delete_target = None

    files = snapshot_files(listing, state)
    sizes = {f.path: f.size for f in listing.files}
    targets = ((delete_target,) if delete_target else ()) + (insert_target,)
    obsolete_after = _claims_of_output(listing, targets, valid_ids, valid_txns, highest)
    unblocked_state = acid_state(listing, compactor_ids(valid_ids_text, kind, ignore_open=True), valid_txns)
    held_back = tuple(d.name for d in unblocked_state.deltas if d.max_write_id > valid_ids.high_watermark)
    return CompactionPlan(
        compaction_type=compaction_type,
        table=table,
        partition=partition,
        listing=listing,
        valid_ids=valid_ids,
        state=state,
        insert_target=insert_target,
        delete_target=delete_target,
        lowest_write_id=lowest,
        highest_write_id=highest,
        buckets=tuple(sorted({f.bucket_id for f in files if f.bucket_id is not None})),
        input_files=len(files),
        input_bytes=sum(sizes.get(f.relative_path, 0) for f in files),
        obsolete_after=obsolete_after,
        held_back=held_back,
        held_back_by=lowest_open_id(valid_ids_text, kind) if held_back else None,
    )


def with_visibility_txn(plan: CompactionPlan, txn_id: int, valid_txns_text: str) -> CompactionPlan:
    """The plan committed through transaction ``txn_id`` instead of a rename: its targets named
    ``base_N_vT`` / ``delta_X_Y_vT`` / ``delete_delta_X_Y_vT`` (Hive 4's compactor output), and its claims
    decided as they will stand once T commits. ``valid_txns_text`` is the transaction list read after T
    was opened (T is open in it)."""
    if txn_id <= 0:
        raise ValueError(f"a visibility transaction id is positive, not {txn_id}")
    committed = ValidTxnList.from_string(valid_txns_text).as_committed(txn_id)
    insert_target = _with_suffix(plan.insert_target, txn_id)
    delete_target = _with_suffix(plan.delete_target, txn_id) if plan.delete_target else None
    targets = ((delete_target,) if delete_target else ()) + (insert_target,)
    return replace(
        plan,
        insert_target=insert_target,
        delete_target=delete_target,
        obsolete_after=_claims_of_output(plan.listing, targets, plan.valid_ids, committed, plan.highest_write_id),
    )


def _with_suffix(name: str, txn_id: int) -> str:
    parsed = parse_directory_name(name)
    if parsed is None or parsed.visibility_txn_id:
        raise ValueError(f"{name} is not a plain ACID directory name")
    if parsed.kind is DirectoryKind.BASE:
        return base_name(parsed.max_write_id, txn_id)
    return delta_name(
        parsed.min_write_id,
        parsed.max_write_id,
        delete=parsed.kind is DirectoryKind.DELETE_DELTA,
        statement_id=parsed.statement_id,
        visibility_txn_id=txn_id,
    )


def _claims_of_output(
    listing: Listing,
    targets: tuple[str, ...],
    valid_ids: ValidIdList,
    valid_txns: ValidTxnList | None,
    highest: int,
) -> tuple[str, ...]:
    after = acid_state(_with_directories(listing, targets), valid_ids, valid_txns)
    return _claims(targets, after, valid_ids, valid_txns, highest)


def pending_cleanup(
    listing: Listing, valid_ids_text: str, kind: MetastoreKind, *, valid_txns_text: str | None = None
) -> tuple[str, ...]:
    """ACID directories the current listing already calls obsolete: an earlier vacuum's (or Hive's own
    compaction's) cleanup has not run yet. Hive's compaction queue refuses a new compaction of a
    partition that is still ready for cleaning; so does the vacuum, unless told otherwise. Aborted
    directories do not count: no reader uses them and no cleanup of a vacuum is waiting on them."""
    valid_txns = ValidTxnList.from_string(valid_txns_text) if valid_txns_text is not None else None
    try:
        state = acid_state(listing, compactor_ids(valid_ids_text, kind), valid_txns)
    except NotEnoughHistoryError:
        return ()
    return tuple(sorted(name for name in state.obsolete if _is_acid_directory(name)))


def _claims(
    targets: tuple[str, ...], after: AcidState, valid_ids: ValidIdList, valid_txns: ValidTxnList | None, highest: int
) -> tuple[str, ...]:
    """What this vacuum's commit supersedes: the directories its own output covers (not what an
    earlier compaction, say Hive's own, made obsolete: that one's cleanup owns it), plus aborted
    directories, which no reader uses. Only ids at or below the highest write id (docs/design.md section 7,
    rule 3); ACID directories only (original files stay where they are)."""
    candidates = sorted(
        name for name in {*after.obsolete, *after.aborted} if _is_acid_directory(name) and _at_or_below(name, highest)
    )
    try:
        return superseded_by_own_output(targets, candidates, valid_ids, valid_txns)
    except NotEnoughHistoryError:
        return ()  # the new base is not valid for the compactor's list: it claims nothing


def _is_acid_directory(name: str) -> bool:
    try:
        return parse_directory_name(name) is not None
    except AcidLayoutError:
        return False


def _at_or_below(name: str, highest: int) -> bool:
    """Only directories whose ids are all at or below the vacuum's highest write id may be claimed
    obsolete (docs/design.md section 7, rule 3); original files count as id 0."""
    parsed = parse_directory_name(name)
    return parsed is None or parsed.max_write_id <= highest


def describe_plan(plan: CompactionPlan, kind: MetastoreKind) -> list[str]:
    """The plan as lines for an operator (``--dry-run`` prints these)."""
    # Only the aborted ids inside a compacted delta matter here (their rows are dropped); on Hive 2
    # the list holds every aborted transaction of the metastore.
    deltas = plan.state.deltas
    aborted = [a for a in plan.valid_ids.aborted_ids if any(d.min_write_id <= a <= d.max_write_id for d in deltas)]
    lines = [
        f"{plan.compaction_type.value} vacuum of {_describe_table(plan.table, plan.partition)}",
        f"  location   {plan.listing.location}",
        f"  ids        {id_name(kind)}s up to {plan.valid_ids.high_watermark}"
        + (f", dropping the rows of aborted {', '.join(map(str, aborted))}" if aborted else ""),
        f"  compacts   {', '.join(plan.inputs)} ({plan.input_files} files, {format_bytes(plan.input_bytes)}, "
        f"{len(plan.buckets)} buckets)",
        f"  into       {', '.join(plan.targets)}",
        f"  obsolete   {', '.join(plan.obsolete_after) or '(none)'}",
    ]
    if plan.held_back:
        lines.append(f"  waits      {', '.join(plan.held_back)} (above the open {id_name(kind)} {plan.held_back_by})")
    return lines


def format_bytes(count: int) -> str:
    size = float(count)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"
