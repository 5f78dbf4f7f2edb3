"""Two vacuums' outputs over the same write ids: found in a listing, never acted on by deleting.

A vacuum that committed after losing its vacuum lock (fencing leaves a residual window only for a
rename, docs/safety.md) can put a second compacted directory over write ids another vacuum already
compacted: ``base_3`` beside ``delta_1_5``. Hive's ``getAcidState`` then reads both, and the rows of
the shared ids twice. These functions only find such pairs, so the vacuum can report them and refuse
to finish an interrupted commit into them; deciding which copy to drop is left to an operator.

Pure: names in, names out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from acidclean.shared.acid.names import ParsedDirectory, is_hidden, parse_directory_name
from acidclean.shared.errors import AcidLayoutError


def _parsed(name: str) -> ParsedDirectory | None:
    if "/" in name or is_hidden(name):
        return None
    try:
        return parse_directory_name(name)
    except AcidLayoutError:
        return None


def _ids(parsed: ParsedDirectory) -> tuple[int, int]:
    return (0 if parsed.is_base else parsed.min_write_id, parsed.max_write_id)


def _intersect(a: ParsedDirectory, b: ParsedDirectory) -> bool:
    (a_min, a_max), (b_min, b_max) = _ids(a), _ids(b)
    return a_min <= b_max and b_min <= a_max


def _statements_of_one_transaction(a: ParsedDirectory, b: ParsedDirectory) -> bool:
    return (
        not a.is_base
        and not b.is_base
        and _ids(a) == _ids(b)
        and a.statement_id is not None
        and b.statement_id is not None
        and a.statement_id != b.statement_id
    )


def overlapping_current(current: Iterable[str]) -> list[tuple[str, str]]:
    """Pairs of directories a reader reads together (``current``, as :func:`acid_state` gives them)
    that hold rows of the same write ids: two bases or insert deltas whose id ranges intersect. Delete
    deltas are left out: a delete applies once however many of them repeat it."""
    inserts = [p for p in (_parsed(name) for name in current) if p is not None and not p.is_delete_delta]
    inserts.sort(key=lambda p: p.name)
    return [
        (a.name, b.name)
        for i, a in enumerate(inserts)
        for b in inserts[i + 1 :]
        if _intersect(a, b) and not _statements_of_one_transaction(a, b)
    ]


def conflicting_directories(listing: Iterable[str], targets: Sequence[str], inputs: Sequence[str]) -> list[str]:
    """The ACID directories of ``listing`` whose write ids intersect one of ``targets`` and that are
    neither a target nor one of the commit's ``inputs``: what some other writer put over those ids
    since the commit was planned. A commit is finished only when this is empty."""
    own = set(targets) | set(inputs)
    parsed_targets = [p for p in (_parsed(t) for t in targets) if p is not None]
    found = []
    for name in sorted(set(listing) - own):
        parsed = _parsed(name)
        if parsed is not None and any(_intersect(parsed, target) for target in parsed_targets):
            found.append(name)
    return found
