"""The adapter against a Hive 4 metastore as clusters run it, with its "translation layer"
(``MetastoreDefaultTransformer``) on: it creates a full ACID table only for a client that declares
the capabilities to read and write one, and rewrites what ``get_table_req`` returns for clients that
declare none. The session's hive4 metastore runs without it (the tests put managed tables outside the
warehouse, which it refuses), so this test starts a second one. Only with ACIDCLEAN_TEST_METASTORE=hive4."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from acidclean.deploy.local.metastore import start_metastore
from acidclean.deploy.local.process import stop_process
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.metastore import LockRequestComponent, LockType, MetastoreKind, Operation

pytestmark = [pytest.mark.integration, pytest.mark.metastore]

TRANSFORMER = "org.apache.hadoop.hive.metastore.MetastoreDefaultTransformer"


@pytest.fixture(scope="module")
def hive4_as_clusters_run_it(metastore_flavour: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if metastore_flavour != "hive4":
        pytest.skip("a Hive 4 metastore test: run with ACIDCLEAN_TEST_METASTORE=hive4")
    state_dir = tmp_path_factory.mktemp("hive4-transformer")
    process, uri = start_metastore(
        state_dir, "hive4", extra_settings={"metastore.metadata.transformer.class": TRANSFORMER}
    )
    try:
        yield uri
    finally:
        stop_process(process.pid, process.name)


def test_with_the_translation_layer_on_acid_tables_are_created_read_locked_and_queued(
    hive4_as_clusters_run_it: str, tmp_path: Path
) -> None:
    with HiveMetastore(hive4_as_clusters_run_it) as metastore:
        assert metastore.kind is MetastoreKind.HIVE3 and metastore.major_version == 4
        metastore.create_database("layer")
        created = metastore.create_transactional_table(
            "layer", "orders", [("id", "int"), ("v", "string")], buckets=2, partition_keys=[("ds", "string")]
        )
        assert created.transactional and created.bucket_count == 2 and created.partition_keys == ("ds",)
        assert created.location.endswith("layer.db/orders")  # still managed, in the warehouse

        partition_location = metastore.add_partition("layer", "orders", "ds=St. John's#2")
        info = metastore.get_table("layer", "orders", "DS=St. John%27s%232")
        assert (info.partition, info.location) == ("ds=St. John%27s%232", partition_location)
        # What the cleaner asks for a batch's tables answers the same through the translation layer.
        together = metastore.get_tables("layer", ["orders"])
        assert list(together) == ["orders"]
        assert metastore.partition_info(together["orders"], "DS=St. John%27s%232") == info

        txn = metastore.open_txn()
        assert metastore.allocate_write_id(txn, "layer", "orders") == 1
        component = LockRequestComponent("layer", "orders", info.partition, LockType.SHARED_WRITE, Operation.INSERT)
        assert metastore.lock([component], txn).acquired
        (lock,) = metastore.show_locks("layer", "orders")
        assert lock.partition == "ds=St. John%27s%232"  # the name the client sent, as on Hive 2 and 3
        assert metastore.valid_write_ids("layer", "orders") == "layer.orders:1:1:1:"
        together_ids = metastore.valid_write_ids_of([("layer", "orders")], metastore.valid_txn_list())
        assert together_ids == ["layer.orders:1:1:1:"]
        metastore.commit_txn(txn)
        assert metastore.valid_write_ids("layer", "orders").startswith("layer.orders:1:9223372036854775807:")

        metastore.request_compaction("layer", "orders", info.partition, "MINOR")
        (queued,) = metastore.compactions("layer", "orders", info.partition)
        assert (queued.compaction_type, queued.state, queued.partition) == ("MINOR", "initiated", info.partition)
