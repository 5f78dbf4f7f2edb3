"""The cleaner's view bounds bases by its watermark (HIVE-29601).

A cleaner's list is capped at the vacuum's highest write id W, but Hive passes the table's min open
write id along, and that can lie above W. Before HIVE-29601 ``isValidBase`` accepted any base at or
below the min open id without looking at the watermark, so a later vacuum's base (or an aborted
insert overwrite's) became the best base and the first vacuum's cleaner deleted what the second one
had superseded, or everything an aborted overwrite hid. The first two tests are Hive's
``TestCleaner#testCompactionHwmIsHonoredWithMinOpenWriteIdSet`` and
``...WithMinOpenWriteIdSetAndAbortedIOW``: each cleaner run's directory set, open ids and watermark
written as our rules' inputs, with the obsolete set Hive's test expects. The property says the same of
any history: the cleaner's view never calls obsolete what a reader that sees every id up to W reads.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis_support import examples

from acidclean.shared.acid import (
    Listing,
    ValidCleanerWriteIdList,
    ValidTxnList,
    ValidWriteIdList,
    acid_state,
    base_name,
    delta_name,
    obsolete_dirs,
)
from acidclean.shared.errors import NotEnoughHistoryError

pytestmark = [pytest.mark.rule3]


def listing(names: Iterable[str], *, compacted: Iterable[str] = ()) -> Listing:
    return Listing.from_paths(
        [f"{name}/bucket_00000" for name in names], data_formats={name: "compacted" for name in compacted}
    )


def cleaner_obsolete(
    names: set[str], watermark: int, *, min_open: int | None, aborted: Iterable[int] = (), txn_watermark: int
) -> set[str]:
    """What Hive's cleaner removes (obsolete and aborted) with Hive's list as it passes it: capped at
    the vacuum's highest write id, the table's min open write id left as it is."""
    ids = ValidCleanerWriteIdList.from_ids(watermark, (), aborted, min_open_write_id=min_open)
    txns = ValidTxnList.from_ids(txn_watermark, (), (9,) if txn_watermark >= 9 else ())
    return set(obsolete_dirs(listing(names), ids, txns, include_aborted=True))


def singles(first: int, last: int) -> set[str]:
    return {delta_name(i, i) for i in range(first, last + 1)}


def test_each_cleaner_removes_only_what_its_own_compaction_superseded_while_a_write_is_open() -> None:
    # testCompactionHwmIsHonoredWithMinOpenWriteIdSet: three majors (compactor txns 4, 8, 12), then
    # txn 13 opens and writes id 10, so the table's min open write id is 10 for the first cleaner.
    base_3, base_6, base_9 = base_name(3, 4), base_name(6, 8), base_name(9, 12)
    directories = {base_3, base_6, base_9, *singles(1, 10)}

    first = cleaner_obsolete(directories, 3, min_open=10, txn_watermark=12)
    assert first == singles(1, 3)  # before HIVE-29601: base_3, base_6 and deltas 1..9 as well
    directories -= first

    second = cleaner_obsolete(directories, 6, min_open=None, txn_watermark=13)  # txn 13 committed
    assert second == {base_3, *singles(4, 6)}
    directories -= second

    third = cleaner_obsolete(directories, 9, min_open=None, txn_watermark=13)
    assert third == {base_6, *singles(7, 9)}
    assert directories - third == {base_9, delta_name(10, 10)}


def test_an_aborted_insert_overwrite_above_the_watermark_never_becomes_the_cleaners_base() -> None:
    # testCompactionHwmIsHonoredWithMinOpenWriteIdSetAndAbortedIOW: two majors (txns 4 and 8), an
    # insert overwrite of write id 7 in txn 9 aborts (base_0000007, no _v), txn 10 opens and writes 8.
    base_3, base_6, overwrite = base_name(3, 4), base_name(6, 8), base_name(7)
    directories = {base_3, base_6, overwrite, *singles(1, 6), delta_name(8, 8)}

    first = cleaner_obsolete(directories, 3, min_open=8, aborted=[7], txn_watermark=9)
    assert first == singles(1, 3)  # before HIVE-29601: base_7 was the best base, every row lost
    directories -= first

    second = cleaner_obsolete(directories, 6, min_open=None, aborted=[7], txn_watermark=10)
    assert second == {base_3, *singles(4, 6)}  # base_7 is above this cleaner's watermark
    directories -= second

    # A third major over 9 and 10 (txns 11, 12; compactor txn 13) removes the aborted overwrite too.
    directories |= {*singles(9, 10), base_name(10, 13)}
    third = cleaner_obsolete(directories, 10, min_open=None, aborted=[7], txn_watermark=13)
    assert directories - third == {base_name(10, 13)}


def test_reader_lists_keep_the_min_open_shortcut_at_or_below_their_watermark() -> None:
    # The fix bounds the shortcut; a reader's min open id is at or below its watermark, so a reader
    # reads as before (Hive's testBestBase: "tbl:125:5:5:" reads the compacted base_5).
    names = ["base_5", "delta_6_6", "base_10"]
    state = acid_state(listing(names, compacted=names[::2]), ValidWriteIdList.from_string("tbl:125:5:5:"))
    assert state.base is not None and state.base.name == "base_5"


# -- the property ---------------------------------------------------------------------------------

COMMITTED, ABORTED, OPEN = "c", "a", "o"


@dataclass(frozen=True)
class History:
    """Write ids 1..n with their status now; the directories written so far; the vacuum's W."""

    status: tuple[str, ...]  # status[i - 1] of write id i
    directories: frozenset[str]
    compacted: frozenset[str]
    watermark: int

    def ids(self, wanted: str, above: int = 0) -> list[int]:
        return [i for i, s in enumerate(self.status, 1) if s == wanted and i > above]


@st.composite
def histories(draw: st.DrawFn) -> History:
    """Deltas per write id; majors and minors over resolved prefixes (the compactor never passes an
    open id); insert overwrites of any write id; a vacuum's W at or below the resolved prefix."""
    status = draw(st.lists(st.sampled_from([COMMITTED, COMMITTED, ABORTED, OPEN]), min_size=1, max_size=12))
    names = {delta_name(i, i, 0) for i in range(1, len(status) + 1)}
    compacted: set[str] = set()
    resolved = next((i for i, s in enumerate(status) if s == OPEN), len(status))
    # A write that was open when a compaction ran was later resolved: compactions may stop anywhere
    # below the first id that is open now.
    assume(resolved > 0)
    highs = []
    for _ in range(draw(st.integers(1, 4))):
        high = draw(st.integers(1, resolved))
        highs.append(high)
        if draw(st.booleans()):
            compacted.add(base_name(high))
        else:
            low = draw(st.integers(1, high))
            names.add(delta_name(low, high))
    for _ in range(draw(st.integers(0, 2))):
        names.add(base_name(draw(st.integers(1, len(status)))))  # an insert overwrite (no marker)
    watermark = draw(st.sampled_from(highs))  # the vacuum being cleaned is one of these compactions
    return History(tuple(status), frozenset(names | compacted), frozenset(compacted), watermark)


@st.composite
def reader_snapshots(draw: st.DrawFn, history: History) -> ValidWriteIdList:
    """A snapshot that sees every id up to W as the cleaner does (ids up to W are resolved), taken
    at any time since: its watermark anywhere from W to now, ids above W that are resolved now possibly
    still open then."""
    now = len(history.status)
    high_watermark = draw(st.integers(history.watermark, now))
    open_ids = set(history.ids(OPEN)) & set(range(1, high_watermark + 1))
    for write_id in range(history.watermark + 1, high_watermark + 1):
        if draw(st.booleans()):
            open_ids.add(write_id)
    aborted = [i for i in history.ids(ABORTED) if i <= high_watermark and i not in open_ids]
    return ValidWriteIdList.from_ids(high_watermark, sorted(open_ids), aborted)


@settings(max_examples=examples(300), deadline=None)
@given(data=st.data(), history=histories())
def test_the_cleaner_view_never_removes_what_a_reader_covering_its_watermark_reads(
    data: st.DataObject, history: History
) -> None:
    open_now = history.ids(OPEN)
    # Hive's list as it is: capped at W, its min open id the table's (possibly far above W).
    cleaner = ValidCleanerWriteIdList.from_ids(
        history.watermark,
        (),
        [i for i in history.ids(ABORTED) if i <= history.watermark],
        min_open_write_id=min(open_now) if open_now else None,
    )
    table = listing(history.directories, compacted=history.compacted)
    try:
        removed = set(obsolete_dirs(table, cleaner, include_aborted=True))
    except NotEnoughHistoryError:
        return  # a later compacted base and none valid at W: the cleaner refuses, removing nothing
    reader = data.draw(reader_snapshots(history))
    try:
        reads = acid_state(table, reader)
    except NotEnoughHistoryError:
        return  # that reader reads nothing
    lost = removed & set(reads.current_directories)
    assert not lost, f"the cleaner at {history.watermark} removes {sorted(lost)} that {reader} reads"
