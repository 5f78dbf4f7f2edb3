"""Fixtures for tests that vacuum a real table and run a real cleaner over it: one table of the
producers' test database, settings whose allowed roots hold it, and a watcher of the output topics."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cleaner_support import TENANT, Watcher
from producers_support import DB, make_settings, new_table

from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.settings import Settings


@pytest.fixture
def table_location(metastore: HiveMetastore, unique_name: str) -> Path:
    """A new transactional table ``DB.<unique_name>``; its directory."""
    metastore.create_database(DB)
    new_table(metastore, unique_name)
    return Path(metastore.get_table(DB, unique_name).location.removeprefix("file:"))


@pytest.fixture
def table_settings(
    metastore_uri: str, kafka_bootstrap: str, unique_name: str, tmp_path: Path, table_location: Path
) -> Settings:
    """Vacuum and cleaner settings for that table: tenant acme, its database directory allowed."""
    return make_settings(
        metastore_uri,
        kafka_bootstrap,
        unique_name,
        tmp_path,
        tenant=TENANT,
        allowed_roots={TENANT: [str(table_location.parent)]},
        group_id=f"{unique_name}-cleaner",
        cleanup_interval_ms=300,
    )


@pytest.fixture
def table_watcher(table_settings: Settings) -> Iterator[Watcher]:
    watching = Watcher(table_settings)
    yield watching
    watching.close()
