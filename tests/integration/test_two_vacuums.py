"""Issue 10's sequence on the real stack: a reader that starts between two vacuums of one table keeps
everything it reads until it releases, whatever order the two cleanups run in.

Real metastore (locks, transactions), real Kafka (the cleaner group, its delay topic), real Spark
vacuums and the ingest writer; the reader is ``locked_read`` (locks, then lists, then reads).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from cleaner_support import TENANT, Watcher, running_cleaner
from producers_support import DB, directories, make_settings, new_table, vacuum, write

from acidclean.consumers.readiness import COMMIT_MARGIN
from acidclean.producers.reader import locked_read
from acidclean.shared.acid.names import base_name, delta_name
from acidclean.shared.metastore import HiveMetastore
from acidclean.shared.settings import Settings

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", autouse=True)
def database(metastore: HiveMetastore) -> None:
    metastore.create_database(DB)


@pytest.fixture
def settings(
    metastore: HiveMetastore, metastore_uri: str, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> Settings:
    new_table(metastore, unique_name)
    location = metastore.get_table(DB, unique_name).location.removeprefix("file:")
    return make_settings(
        metastore_uri,
        kafka_bootstrap,
        unique_name,
        tmp_path,
        tenant=TENANT,
        allowed_roots={TENANT: [str(Path(location).parent)]},
        group_id=f"{unique_name}-cleaner",
        cleanup_interval_ms=300,
    )


@pytest.fixture
def watcher(settings: Settings) -> Iterator[Watcher]:
    watching = Watcher(settings)
    yield watching
    watching.close()


def reread(metastore: HiveMetastore, name: str, read_directories: tuple[str, ...]) -> bool:
    """Every directory a reader opened is still listed."""
    return set(read_directories) <= set(directories(metastore, name))


@pytest.mark.metastore  # CI runs these on Hive 3 too
def test_a_reader_between_two_vacuums_keeps_what_it_reads_until_it_releases(
    metastore: HiveMetastore, settings: Settings, watcher: Watcher, spark: Any, unique_name: str
) -> None:
    first = [c.write_id for c in write(metastore, unique_name, rows=20, commits=3)]
    with running_cleaner(settings):
        base = vacuum(metastore, settings, spark, unique_name, full=True)
        assert base.new_directories == (base_name(first[-1]),)
        watcher.wait_for(lambda: directories(metastore, unique_name) == [base_name(first[-1])], 30, "base cleaned")

        later = [c.write_id for c in write(metastore, unique_name, rows=20, commits=2)]
        with ExitStack() as reader_1, ExitStack() as reader_2:
            r1 = reader_1.enter_context(locked_read(metastore, DB, unique_name))
            minor = vacuum(metastore, settings, spark, unique_name)
            assert minor.new_directories == (delta_name(later[0], later[-1]),)
            # A reader locking within the commit margin is waited for too (clock skew); R2 comes later.
            time.sleep(COMMIT_MARGIN.total_seconds() + 1)
            r2 = reader_2.enter_context(locked_read(metastore, DB, unique_name))
            assert r2.directories == (base_name(first[-1]), delta_name(later[0], later[-1]))
            major = vacuum(metastore, settings, spark, unique_name, full=True)
            assert major.new_directories == (base_name(later[-1]),)
            assert minor.publish is not None and major.publish is not None
            v1, v2 = minor.publish.event, major.publish.event
            assert {lock.lock_id for lock in v1.lock_snapshot} == {r1.lock_id}
            assert {lock.lock_id for lock in v2.lock_snapshot} == {r1.lock_id, r2.lock_id}
            watcher.wait_for(lambda: len(watcher.delays(v1)) >= 2 and watcher.delays(v2), 30, "both waiting")

            reader_1.close()  # R1 ends; R2 still reads base_A + delta_B_C
            [done1] = watcher.wait_for(lambda: watcher.done(v1), 30, "V1's cleanup")
            assert sorted(d.name for d in done1.directories_removed) == sorted(delta_name(w, w, 0) for w in later)
            assert reread(metastore, unique_name, r2.directories), "R2 lost a directory it reads"
            assert watcher.done(v2) == []  # R2 still holds its lock
        [done2] = watcher.wait_for(lambda: watcher.done(v2), 30, "V2's cleanup")
        assert {d.name for d in done2.directories_removed} == {base_name(first[-1]), delta_name(later[0], later[-1])}
    assert directories(metastore, unique_name) == [base_name(later[-1])]
    assert watcher.of("dead_letter") == []
