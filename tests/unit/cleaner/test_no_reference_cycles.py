"""The cleaner's re-check path leaves no reference cycles (issue 14): what a batch built is freed by
reference counting as soon as its outcomes are flushed. A cycle through a batch kept its outcomes and
the bundles it wrote (up to 512 KB each) alive until the cyclic collector ran, and at 100,000 parked
vacuums its full collections held the interpreter for 0.4-0.7 s every 15 s: the lateness tail."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from .test_bundles import bundled_rig, cycle, started


@pytest.fixture
def garbage_saved() -> Iterator[list[object]]:
    """The collector off and every object it finds kept in ``gc.garbage`` for the test to read."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield gc.garbage
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()


@pytest.mark.parametrize("per_table", [1, 2])
def test_rechecking_bundles_of_waiting_tables_leaves_nothing_for_the_cyclic_collector(
    garbage_saved: list[object], per_table: int
) -> None:
    rig = bundled_rig()
    consumer, loop, seen, _ids = started(rig, per_table=per_table)
    cycle(loop, rig, consumer, seen, 3)
    gc.collect()
    garbage_saved.clear()
    cycle(loop, rig, consumer, seen, 4)  # bundles carried on whole, and checked member by member
    assert rig.metrics.events.labels("bundle_carried_whole")._value.get() > 0
    found = gc.collect()
    ours = sorted({type(item).__qualname__ for item in garbage_saved if type(item).__module__.startswith("acidclean")})
    assert ours == [], f"{found} objects in reference cycles, of acidclean's types {ours}"


def test_a_released_reader_and_the_cleanups_that_follow_leave_nothing_for_the_cyclic_collector(
    garbage_saved: list[object],
) -> None:
    from .test_bundles import lock_id

    rig = bundled_rig()
    consumer, loop, seen, _ids = started(rig)
    cycle(loop, rig, consumer, seen, 3)
    gc.collect()
    garbage_saved.clear()
    rig.metastore.release(lock_id(1))
    rig.metastore.release(lock_id(4))
    cycle(loop, rig, consumer, seen, 3)
    assert rig.fs.deleted  # cleaned
    gc.collect()
    ours = sorted({type(item).__qualname__ for item in garbage_saved if type(item).__module__.startswith("acidclean")})
    assert ours == []
