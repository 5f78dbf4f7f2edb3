"""When a table or partition needs a vacuum, and which kind: Hive's Initiator rules, pure.

``decide`` follows Hive's ``Initiator.checkForCompaction`` and ``determineCompactionType``:

1. more aborted transactions than ``hive.compactor.abortedtxn.threshold``: MAJOR;
2. no base (nor original files) but deltas: "no base"; otherwise, when the deltas' bytes over the
   base's bytes exceed ``hive.compactor.delta.pct.threshold``: MAJOR;
3. more current deltas (insert and delete) than ``hive.compactor.delta.num.threshold``: MAJOR when
   there is no base or the table is insert-only, else MINOR;
4. otherwise nothing.

A table's ``TBLPROPERTIES`` override the thresholds (``compactorthreshold.hive.compactor.delta.num.threshold``
and the others) and ``NO_AUTO_COMPACTION=true`` (any case, either spelling) turns the table off.
No I/O here: the figures come from a storage listing or from events, the caller's business.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

from acidclean.shared.acid.state import AcidState, Listing

CompactionType = Literal["MINOR", "MAJOR"]

DELTA_NUM = "hive.compactor.delta.num.threshold"
DELTA_PCT = "hive.compactor.delta.pct.threshold"
ABORTED = "hive.compactor.abortedtxn.threshold"
OVERRIDE_PREFIX = "compactorthreshold."
NO_AUTO_COMPACTION = "no_auto_compaction"


@dataclass(frozen=True)
class Thresholds:
    """Hive's thresholds, with Hive's defaults."""

    delta_num: int = 10
    delta_pct: float = 0.1
    aborted_txns: int = 1000


@dataclass(frozen=True)
class Figures:
    """What a table or partition holds above its base, and how many aborted transactions wrote to it."""

    delta_count: int = 0
    delete_delta_count: int = 0
    delta_bytes: int = 0
    base_bytes: int = 0
    aborted_txns: int = 0

    @property
    def deltas(self) -> int:
        """Every current delta, insert and delete (Hive counts both)."""
        return self.delta_count + self.delete_delta_count

    def with_delta(self, name: str, size: int) -> Figures:
        """These figures after one more delta directory ``name`` of ``size`` bytes was committed."""
        if name.startswith("delete_delta_"):
            return replace(self, delete_delta_count=self.delete_delta_count + 1, delta_bytes=self.delta_bytes + size)
        return replace(self, delta_count=self.delta_count + 1, delta_bytes=self.delta_bytes + size)


@dataclass(frozen=True)
class Decision:
    """A vacuum to request: its kind and why, in words an operator reads."""

    compaction_type: CompactionType
    reason: str


class InvalidTableProperty(ValueError):
    """A ``compactorthreshold.*`` table property that does not parse."""


def is_auto_compaction_off(parameters: Mapping[str, str]) -> bool:
    """Hive's ``noAutoCompactSet``: ``no_auto_compaction`` or ``NO_AUTO_COMPACTION`` is ``true`` (any case)."""
    value = parameters.get(NO_AUTO_COMPACTION)
    if value is None:
        value = parameters.get(NO_AUTO_COMPACTION.upper())
    return value is not None and value.lower() == "true"


def is_insert_only(parameters: Mapping[str, str]) -> bool:
    """``transactional_properties=insert_only`` (an MM table: only MAJOR applies)."""
    return parameters.get("transactional_properties", "").lower() == "insert_only"


def table_thresholds(defaults: Thresholds, parameters: Mapping[str, str]) -> Thresholds:
    """``defaults`` with the table's ``compactorthreshold.hive.compactor.*`` overrides applied."""
    try:
        num = parameters.get(OVERRIDE_PREFIX + DELTA_NUM)
        pct = parameters.get(OVERRIDE_PREFIX + DELTA_PCT)
        aborted = parameters.get(OVERRIDE_PREFIX + ABORTED)
        return Thresholds(
            delta_num=int(num) if num is not None else defaults.delta_num,
            delta_pct=float(pct) if pct is not None else defaults.delta_pct,
            aborted_txns=int(aborted) if aborted is not None else defaults.aborted_txns,
        )
    except ValueError as error:
        raise InvalidTableProperty(
            f"a {OVERRIDE_PREFIX}hive.compactor.* table property does not parse ({error}): fix it with "
            "ALTER TABLE ... SET TBLPROPERTIES"
        ) from error


def decide(figures: Figures, thresholds: Thresholds, *, insert_only: bool = False) -> Decision | None:
    """The vacuum Hive's Initiator would request for these figures, or None."""
    if figures.aborted_txns > thresholds.aborted_txns:
        return Decision("MAJOR", f"{figures.aborted_txns} aborted transactions > {ABORTED} {thresholds.aborted_txns}")
    no_base = figures.base_bytes == 0 and figures.delta_bytes > 0
    if not no_base and figures.base_bytes > 0 and figures.delta_bytes / figures.base_bytes > thresholds.delta_pct:
        return Decision(
            "MAJOR",
            f"delta bytes {figures.delta_bytes} / base bytes {figures.base_bytes} = "
            f"{figures.delta_bytes / figures.base_bytes:.3g} > {DELTA_PCT} {thresholds.delta_pct:g}",
        )
    if figures.deltas <= thresholds.delta_num:
        return None
    kind: CompactionType = "MAJOR" if no_base or insert_only else "MINOR"
    why = " (no base)" if no_base else " (insert-only table)" if insert_only else ""
    return Decision(kind, f"{figures.deltas} deltas > {DELTA_NUM} {thresholds.delta_num}{why}")


def figures_of(state: AcidState, listing: Listing, aborted_txns: int = 0) -> Figures:
    """The figures of a directory from its ACID state and listing, as Hive sums them.

    The base's bytes are the files directly in the base directory (plus original files, which play
    the base's part when there is none); a delta's bytes are the files directly in it.
    """
    direct: dict[str, int] = {}
    for listed in listing.files:
        parent, _, rest = listed.path.partition("/")
        if rest and "/" not in rest and not rest.startswith(("_", ".")):
            direct[parent] = direct.get(parent, 0) + listed.size
    base_bytes = direct.get(state.base.name, 0) if state.base is not None else 0
    base_bytes += sum(original.size for original in state.original_files)
    inserts = [d for d in state.deltas if not d.is_delete_delta]
    deletes = [d for d in state.deltas if d.is_delete_delta]
    return Figures(
        delta_count=len(inserts),
        delete_delta_count=len(deletes),
        delta_bytes=sum(direct.get(d.name, 0) for d in state.deltas),
        base_bytes=base_bytes,
        aborted_txns=aborted_txns,
    )
