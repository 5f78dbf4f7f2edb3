"""What Hive's compaction-queue API allows on each metastore (issue 53, item 3), on the session's real
metastore (run with ACIDCLEAN_TEST_METASTORE=hive2, hive3 and hive4); docs/operations.md, "Hive's
compaction queue", writes down the same table.

* ``compact2`` (what ``ALTER TABLE ... COMPACT`` sends) and ``show_compact`` answer on all three;
  a second request of a table with one queued is not entered (Hive 4 names the queued one in its
  message, Hive 2 and 3 answer its id).
* The worker calls (``find_next_compact2``, ``find_next_compact``, ``mark_compacted``, ``mark_cleaned``,
  ``mark_failed``, ``mark_refused``) answer on Hive 4 only: Hive 2 and 3 say "Invalid method name",
  which acidclean reports as :class:`QueueCallsMissingError`, and the entry stays initiated.
"""

from __future__ import annotations

from typing import Any

import pytest
from producers_support import DB, new_table

from acidclean.shared.hive4_queue.queue import HiveCompactionQueue, QueueCallsMissingError, QueueEntry
from acidclean.shared.hive_metastore import HiveMetastore

pytestmark = [pytest.mark.integration, pytest.mark.metastore]

WORKER_CALLS = ("find_next_compact", "mark_compacted", "mark_cleaned", "mark_failed", "mark_refused")


@pytest.fixture(scope="module", autouse=True)
def database(metastore: HiveMetastore) -> None:
    metastore.create_database(DB)


def call(queue: HiveCompactionQueue, name: str, entry: QueueEntry) -> Any:
    """One worker call on an entry that is not in the queue (id 0): only whether the method exists."""
    if name == "find_next_compact":
        return queue._client(name, lambda client: client.find_next_compact("acidclean-probe"))
    return getattr(queue, name)(entry, *(["probe"] if name in ("mark_failed", "mark_refused") else []))


def test_compact2_and_show_compact_answer_on_every_metastore(metastore: HiveMetastore, unique_name: str) -> None:
    new_table(metastore, unique_name)
    queue = HiveCompactionQueue(metastore)
    asked = queue.request(DB, unique_name, None, "MAJOR", run_as="analyst", initiator_id="acidclean-it")
    assert (asked.accepted, asked.state) == (True, "initiated")
    [listed] = queue.entries(DB, unique_name)
    assert (listed.compaction_id, listed.state, listed.compaction_type) == (asked.compaction_id, "initiated", "MAJOR")
    again = queue.request(DB, unique_name, None, "MAJOR", run_as="analyst")
    assert not again.accepted
    if metastore.major_version >= 4:
        assert f"id={asked.compaction_id}" in (again.message or "")
    else:
        assert again.compaction_id == asked.compaction_id
    assert [e.compaction_id for e in queue.entries(DB, unique_name)] == [asked.compaction_id]


def test_the_worker_calls_answer_on_hive_4_only(metastore: HiveMetastore, unique_name: str) -> None:
    new_table(metastore, unique_name)
    queue = HiveCompactionQueue(metastore)
    asked = queue.request(DB, unique_name, None, "MINOR", run_as="analyst")
    # An entry of another pool: nothing here takes the session's other entries.
    absent = QueueEntry(0, DB, unique_name, None, "MINOR", "working", worker_id="acidclean-probe")
    if metastore.major_version < 4:
        with pytest.raises(QueueCallsMissingError, match="find_next_compact2"):
            queue.take_next("acidclean-probe", "it", pool=unique_name)
        for name in WORKER_CALLS:
            with pytest.raises(QueueCallsMissingError, match=name):
                call(queue, name, absent)
        assert queue.entry(asked.compaction_id, DB, unique_name).state == "initiated"  # type: ignore[union-attr]
        return
    # Hive 4 answers (test_hive_queue.py drives every call through a whole vacuum); its pool is empty.
    assert queue.take_next("acidclean-probe", "it", pool=unique_name) is None
    assert queue.entry(asked.compaction_id, DB, unique_name).state == "initiated"  # type: ignore[union-attr]
