"""Rule 9 on the real stack: a table dropped and created again between the cleaner's check and its
deletes keeps every row (issue 49, item 4).

The cleaner checks a vacuum, announces ``CleanupStarted`` and waits for the broker's acknowledgement;
the issue's broker stalled 8 s there. The window is made deterministic with the cleaner's own hook
between the announcement and the first delete (``CrashPoints``, reached at ``before-delete``): there
the test drops the table, creates it again under the same name and location, and writes 300 rows in
three transactions whose directories carry the names the vacuum made obsolete (Hive 3 and 4: write
ids restart at 1; Hive 2, whose directories are named by transaction id, which never restart: the
re-created table's directories restored under the old names, as a copy from a backup does). The
cleaner then goes on; a reader must see all 300 rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from cleaner_support import TENANT, UriTable, Watcher, create_uri_table, publish, running_cleaner
from storage_support import StorageStack

from acidclean.consumers.cleaner_process import CleanerOptions
from acidclean.consumers.crash_points import CrashPoint
from acidclean.deploy.local.provision import Services
from acidclean.producers.ingest import IngestRequest, ingest
from acidclean.producers.reader import locked_read
from acidclean.shared.acid.id_lists import MetastoreKind
from acidclean.shared.acid.names import delta_name
from acidclean.shared.orc.writer import insert_events, write_bucket_file
from acidclean.shared.settings import Settings, load_settings
from acidclean.shared.storage import open_location

pytestmark = [pytest.mark.integration, pytest.mark.rule9, pytest.mark.rule3]

COLUMNS = [("id", "int"), ("v", "string")]
ROWS_PER_COMMIT = 100


class RecreateBeforeTheDelete:
    """The cleaner's hook between ``CleanupStarted`` and the first delete: drop the table, create it
    again, write 300 rows under the vacuum's obsolete names. Runs once."""

    def __init__(self, table: UriTable) -> None:
        self.table = table
        self.written: list[str] = []

    def reached(self, point: CrashPoint) -> None:
        if point != "before-delete" or self.written:
            return
        table, metastore = self.table, self.table.metastore
        metastore.drop_table(table.db, table.name)
        storage = open_location(table.uri)
        if storage.fs.exists(storage.path):  # an external location, or data left by the drop
            storage.fs.delete_dir(storage.path)
        metastore.create_transactional_table(table.db, table.name, COLUMNS, buckets=1, location=table.uri)
        if metastore.kind is MetastoreKind.HIVE2:
            self.written = self._restore_under_the_old_names()
        else:
            results = ingest(metastore, IngestRequest(table.db, table.name, ROWS_PER_COMMIT, commits=3))
            self.written = [result.delta for result in results if result.delta]

    def _restore_under_the_old_names(self) -> list[str]:
        storage = open_location(self.table.uri)
        names = []
        for write_id in self.table.write_ids:  # committed transactions: every reader sees them
            name = delta_name(write_id, write_id, 0)
            rows = pa.table(
                {
                    "id": pa.array(range(write_id * 1000, write_id * 1000 + ROWS_PER_COMMIT), pa.int32()),
                    "v": pa.array([f"restored-{i}" for i in range(ROWS_PER_COMMIT)]),
                }
            )
            write_bucket_file(storage.fs.arrow, storage.child(name), 0, insert_events(rows, write_id))
            names.append(name)
        return names


@pytest.fixture(params=["local", "s3"])
def stack(request: pytest.FixtureRequest, local_stack: Services) -> StorageStack:
    """The local disk with the session's metastore (hive2/3/4 by ACIDCLEAN_TEST_METASTORE), and S3 with
    its Hive 3 metastore."""
    if request.param == "s3":
        return request.getfixturevalue("s3_stack")  # type: ignore[no-any-return]
    metastore = request.getfixturevalue("metastore")
    return StorageStack("local", metastore, local_stack.metastore_uri, local_stack.metastore_flavour, None, {})


@pytest.fixture
def database_uri(stack: StorageStack, tmp_path: Path) -> str:
    if stack.warehouse is not None:
        return f"{stack.warehouse}/rule9_{uuid.uuid4().hex[:8]}.db"
    return "file:" + str(tmp_path / TENANT / "rule9.db")


@pytest.fixture
def settings(
    stack: StorageStack, kafka_bootstrap: str, database_uri: str, tmp_path: Path, unique_name: str
) -> Settings:
    return load_settings(
        environ={},
        overrides={
            "metastore_uris": stack.metastore_uri,
            "kafka": {"bootstrap.servers": kafka_bootstrap},
            "topic_prefix": f"{unique_name}.",
            "topic_partitions": 1,
            "state_dir": str(tmp_path / "state"),
            "tenant": TENANT,
            "allowed_roots": {TENANT: [database_uri]},
            "group_id": f"{unique_name}-cleaner",
            "cleanup_interval_ms": 300,
        },
    )


@pytest.fixture
def watcher(settings: Settings) -> Iterator[Watcher]:
    watching = Watcher(settings)
    yield watching
    watching.close()


def test_a_table_dropped_and_recreated_between_the_check_and_the_delete_keeps_its_300_rows(
    stack: StorageStack, database_uri: str, settings: Settings, watcher: Watcher, unique_name: str
) -> None:
    table = create_uri_table(stack.metastore, database_uri, unique_name, db="rule9")
    singles = table.commit_deltas(3)
    vacuum = table.minor_vacuum()
    recreate = RecreateBeforeTheDelete(table)
    with running_cleaner(settings, CleanerOptions(cleaner_id="it-rule9", crash_points=recreate)):
        publish(settings, vacuum)
        [done] = watcher.wait_for(lambda: watcher.done(vacuum), 60, "CleanupDone")
    # The window was used as the issue describes: the re-created table's directories repeat the names.
    assert sorted(recreate.written) == sorted(singles)
    [started] = watcher.wait_for(lambda: watcher.started(vacuum), 10, "CleanupStarted")
    assert sorted(d.name for d in started.directories_to_remove) == sorted(singles)
    with locked_read(stack.metastore, table.db, table.name) as snapshot:
        assert snapshot.rows.num_rows == 3 * ROWS_PER_COMMIT
    assert set(singles) <= set(table.children())
    assert done.directories_removed == [] and "changed since the check" in (done.note or "")
