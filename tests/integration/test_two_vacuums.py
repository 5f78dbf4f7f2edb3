"""Issue 10's sequence on the real stack: a reader that starts between two vacuums of one table keeps
everything it reads until it releases, whatever order the two cleanups run in.

Real metastore (locks, transactions), real Kafka (the cleaner group, its delay topic), real Spark
vacuums and the ingest writer; the reader is ``locked_read`` (locks, then lists, then reads).
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from typing import Any

import pytest
from cleaner_support import Watcher, running_cleaner
from producers_support import DB, directories, vacuum, write

from acidclean.consumers.rules.readiness import COMMIT_MARGIN
from acidclean.producers.reader import locked_read
from acidclean.shared.acid.names import base_name, delta_name
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.rule1, pytest.mark.rule3]


def reread(metastore: HiveMetastore, name: str, read_directories: tuple[str, ...]) -> bool:
    """Every directory a reader opened is still listed."""
    return set(read_directories) <= set(directories(metastore, name))


@pytest.mark.metastore  # CI runs these on Hive 3 too
def test_a_reader_between_two_vacuums_keeps_what_it_reads_until_it_releases(
    metastore: HiveMetastore, table_settings: Settings, table_watcher: Watcher, spark: Any, unique_name: str
) -> None:
    first = [c.write_id for c in write(metastore, unique_name, rows=20, commits=3)]
    with running_cleaner(table_settings):
        base = vacuum(metastore, table_settings, spark, unique_name, full=True)
        assert base.new_directories == (base_name(first[-1]),)
        table_watcher.wait_for(
            lambda: directories(metastore, unique_name) == [base_name(first[-1])], 30, "base cleaned"
        )

        later = [c.write_id for c in write(metastore, unique_name, rows=20, commits=2)]
        with ExitStack() as reader_1, ExitStack() as reader_2:
            r1 = reader_1.enter_context(locked_read(metastore, DB, unique_name))
            minor = vacuum(metastore, table_settings, spark, unique_name)
            assert minor.new_directories == (delta_name(later[0], later[-1]),)
            # A reader locking within the commit margin is waited for too (clock skew); R2 comes later.
            time.sleep(COMMIT_MARGIN.total_seconds() + 1)
            r2 = reader_2.enter_context(locked_read(metastore, DB, unique_name))
            assert r2.directories == (base_name(first[-1]), delta_name(later[0], later[-1]))
            # V1 is not cleaned yet (R1 holds it): a vacuum refuses that unless told, as Hive's queue does.
            # The sequence stays reachable (the override, or Hive's own compactor), so the cleaner must hold.
            major = vacuum(metastore, table_settings, spark, unique_name, full=True, allow_uncleaned=True)
            assert major.new_directories == (base_name(later[-1]),)
            assert minor.publish is not None and major.publish is not None
            v1, v2 = minor.publish.event, major.publish.event
            assert {lock.lock_id for lock in v1.lock_snapshot} == {r1.lock_id}
            assert {lock.lock_id for lock in v2.lock_snapshot} == {r1.lock_id, r2.lock_id}
            table_watcher.wait_for(
                lambda: len(table_watcher.delays(v1)) >= 2 and table_watcher.delays(v2), 30, "both waiting"
            )

            reader_1.close()  # R1 ends; R2 still reads base_A + delta_B_C
            [done1] = table_watcher.wait_for(lambda: table_watcher.done(v1), 30, "V1's cleanup")
            assert sorted(d.name for d in done1.directories_removed) == sorted(delta_name(w, w, 0) for w in later)
            assert reread(metastore, unique_name, r2.directories), "R2 lost a directory it reads"
            assert table_watcher.done(v2) == []  # R2 still holds its lock
        [done2] = table_watcher.wait_for(lambda: table_watcher.done(v2), 30, "V2's cleanup")
        assert {d.name for d in done2.directories_removed} == {base_name(first[-1]), delta_name(later[0], later[-1])}
    assert directories(metastore, unique_name) == [base_name(later[-1])]
    assert table_watcher.of("dead_letter") == []
