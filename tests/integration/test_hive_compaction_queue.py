"""Beside Hive's own compactor (issue 17, item 3): a vacuum does not start while the metastore's
compaction queue (``show_compact``) holds a compaction of the same table or partition that is
initiated, working or ready for cleaning; it refuses, naming Hive's compaction, and writes nothing.
A compaction of another partition holds nothing up. On the real metastore of the session (CI runs
these on hive2, hive3 and hive4); Hive's compactor is off in the local stack, so a queued compaction
stays ``initiated`` until the test ends it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from producers_support import DB, directories, make_settings, new_table, vacuum, write

from acidclean.cli import main as cli
from acidclean.shared.errors import VacuumRefusedError
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.metastore import ACTIVE_COMPACTION_STATES
from acidclean.shared.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.metastore]

QUEUED = "ds=2026-01-01"
OTHER = "ds=2026-01-02"


@pytest.fixture(scope="module", autouse=True)
def database(metastore: HiveMetastore) -> None:
    metastore.create_database(DB)


@pytest.fixture
def settings(metastore_uri: str, kafka_bootstrap: str, unique_name: str, tmp_path: Path) -> Settings:
    return make_settings(metastore_uri, kafka_bootstrap, unique_name, tmp_path)


def partitioned_table(metastore: HiveMetastore, name: str) -> None:
    new_table(metastore, name, partitioned_by=[("ds", "string")])
    for partition in (QUEUED, OTHER):
        write(metastore, name, rows=20, commits=2, partition=partition)


def test_show_compact_lists_a_queued_compaction_as_hive_queued_it(metastore: HiveMetastore, unique_name: str) -> None:
    partitioned_table(metastore, unique_name)
    compaction_id = metastore.request_compaction(DB, unique_name, QUEUED, "MAJOR")

    (queued,) = metastore.compactions(DB, unique_name, QUEUED)
    assert (queued.db, queued.table, queued.partition) == (DB, unique_name, QUEUED)
    assert (queued.compaction_type, queued.state, queued.active) == ("MAJOR", "initiated", True)
    assert queued.compaction_id == compaction_id or compaction_id is None  # Hive 2 answers no id
    assert queued.state in ACTIVE_COMPACTION_STATES
    assert metastore.compactions(DB, unique_name, OTHER) == []
    # The partition in another spelling, and the whole table, find it too.
    assert [c.compaction_id for c in metastore.compactions(DB, unique_name, "DS=2026-01-01")] == [queued.compaction_id]
    assert [c.compaction_id for c in metastore.compactions(DB, unique_name)] == [queued.compaction_id]
    assert metastore.compactions(DB, unique_name + "x") == []


def test_a_vacuum_of_a_partition_hive_is_compacting_refuses_naming_hives_compaction(
    metastore: HiveMetastore, metastore_uri: str, kafka_bootstrap: str, unique_name: str
) -> None:
    partitioned_table(metastore, unique_name)
    metastore.request_compaction(DB, unique_name, QUEUED, "MAJOR")
    (queued,) = metastore.compactions(DB, unique_name, QUEUED)
    before = directories(metastore, unique_name, QUEUED)
    env = {
        "ACIDCLEAN_METASTORE_URIS": metastore_uri,
        "ACIDCLEAN_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "ACIDCLEAN_TOPIC_PREFIX": f"{unique_name}.",
        "ACIDCLEAN_TOPIC_PARTITIONS": "1",
    }

    refused = CliRunner().invoke(cli, ["vacuum", f"{DB}.{unique_name}", "--partition", QUEUED, "--full"], env=env)

    assert refused.exit_code == 1, refused.output
    where = f"{DB}.{unique_name} partition {QUEUED}"
    assert f"Hive's compactor has a MAJOR compaction of {where} in state initiated (id {queued.compaction_id}" in (
        refused.output
    )
    assert (
        "acidclean does not compact a partition Hive is compacting; retry when it is done or turn Hive's "
        "Initiator off (see docs/operations.md)" in refused.output
    )
    assert directories(metastore, unique_name, QUEUED) == before


def test_a_vacuum_of_another_partition_proceeds_and_the_queued_one_stays_refused(
    metastore: HiveMetastore, settings: Settings, spark: Any, unique_name: str
) -> None:
    partitioned_table(metastore, unique_name)
    metastore.request_compaction(DB, unique_name, QUEUED, "MINOR")

    result = vacuum(metastore, settings, spark, unique_name, partition=OTHER)
    assert result.status == "committed"

    with pytest.raises(VacuumRefusedError, match=f"a MINOR compaction of {DB}.{unique_name} partition {QUEUED}"):
        vacuum(metastore, settings, spark, unique_name, partition=QUEUED)
    assert not [name for name in directories(metastore, unique_name, QUEUED) if name.startswith("_tmp_acidclean_")]


def test_a_compaction_hive_finished_no_longer_holds_a_vacuum_up(
    metastore: HiveMetastore, settings: Settings, spark: Any, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    partitioned_table(metastore, unique_name)
    metastore.request_compaction(DB, unique_name, QUEUED, "MAJOR")
    (queued,) = metastore.compactions(DB, unique_name, QUEUED)
    # Hive's compactor is off here, so nothing moves the entry on: show it as Hive's history would.
    finished = [type(queued)(**{**queued.__dict__, "state": state}) for state in ("succeeded", "failed", "refused")]
    monkeypatch.setattr(metastore, "compactions", lambda *args, **kwargs: finished)

    result = vacuum(metastore, settings, spark, unique_name, partition=QUEUED)
    assert result.status == "committed"
