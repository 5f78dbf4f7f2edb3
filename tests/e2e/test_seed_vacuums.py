"""The four worked cases of seed 000, end to end: ingest, vacuum on Spark, then ``acidclean acid-state``.

Each case writes a one-bucket table with the ingest writer (three commits, a fourth with an update
for the delete-delta case), runs the vacuum job, and checks that the directories are exactly the
seed's, that ``acid-state`` reports exactly the seed's obsolete directories, that the snapshot did
not change, and that the published ``VacuumCommitted`` says the same.

The seed's names start at id 1. Hive 3 metastores number write ids per table, so the session's
metastore gives those names; Hive 2 names deltas by global transaction id, so on Hive 2 each case
gets a metastore of its own, started for it, whose first transaction is 1.

The third case's heading in the seed reads "major followed by minor", but its listing and "created by
last vacuum: base_0000003" are what a minor vacuum (``delta_0000001_0000003``) followed by a major one
leaves: after a major vacuum every delta is covered by the base and a minor one has nothing to do
(checked below too).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from producers_support import DB, directories, make_settings, new_table, snapshot, vacuum, vacuum_events, write

from acidclean.cli import main as cli
from acidclean.deploy.local.metastore import start_metastore
from acidclean.deploy.local.process import stop_process
from acidclean.shared.acid.id_lists import MetastoreKind
from acidclean.shared.errors import VacuumRefusedError
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.storage import open_location

pytestmark = pytest.mark.integration

D1, D2, D3, D4 = (f"delta_000000{i}_000000{i}_0000" for i in range(1, 5))
DELETE4 = "delete_delta_0000004_0000004_0000"

# case: (vacuums in order, directories after them, new directories of the last vacuum, obsolete)
CASES: dict[str, tuple[list[str], list[str], list[str], list[str]]] = {
    "minor vacuum of 3 single deltas": (
        ["MINOR"],
        [D1, "delta_0000001_0000003", D2, D3],
        ["delta_0000001_0000003"],
        [D1, D2, D3],
    ),
    "major vacuum of 3 single deltas": (
        ["MAJOR"],
        ["base_0000003", D1, D2, D3],
        ["base_0000003"],
        [D1, D2, D3],
    ),
    "major and minor vacuum over the same 3 deltas": (
        ["MINOR", "MAJOR"],
        ["base_0000003", D1, "delta_0000001_0000003", D2, D3],
        ["base_0000003"],
        [D1, "delta_0000001_0000003", D2, D3],
    ),
    "minor vacuum with a delete delta, ids 1-4": (
        ["MINOR"],
        ["delete_delta_0000001_0000004", DELETE4, D1, "delta_0000001_0000004", D2, D3, D4],
        ["delete_delta_0000001_0000004", "delta_0000001_0000004"],
        [DELETE4, D1, D2, D3, D4],
    ),
}


@pytest.fixture(scope="module")
def metastores(metastore_uri: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Per case, a metastore on which a new table's first commit gets id 1 (see the module
    docstring). On Hive 2 the fresh metastores start side by side, and stop when the module ends."""
    with HiveMetastore(metastore_uri) as probe:
        if probe.kind is MetastoreKind.HIVE3:
            yield dict.fromkeys(CASES, metastore_uri)
            return
    root = tmp_path_factory.mktemp("fresh-metastores")
    with ThreadPoolExecutor(max_workers=len(CASES)) as pool:
        futures = {case: pool.submit(start_metastore, root / f"case{i}", "hive2") for i, case in enumerate(CASES)}
    started = {case: future.result() for case, future in futures.items()}
    try:
        yield {case: uri for case, (_, uri) in started.items()}
    finally:
        for process, _ in started.values():
            stop_process(process.pid, process.name)


@pytest.mark.parametrize("case", list(CASES))
def test_seed_case_end_to_end(
    case: str, metastores: dict[str, str], kafka_bootstrap: str, spark: Any, unique_name: str, tmp_path: Path
) -> None:
    vacuums, listing, new_directories, obsolete = CASES[case]
    numbered_from_one = metastores[case]
    settings = make_settings(numbered_from_one, kafka_bootstrap, unique_name, tmp_path)
    with HiveMetastore(numbered_from_one) as metastore:
        metastore.create_database(DB)
        new_table(metastore, unique_name, buckets=1)
        commits = write(metastore, unique_name, rows=20, commits=3)
        if DELETE4 in listing:
            commits += write(metastore, unique_name, rows=20, delete_fraction=0.25)  # an UPDATE: insert + delete
        assert [c.write_id for c in commits] == list(range(1, len(commits) + 1))
        before = snapshot(metastore, unique_name)

        # The seed's listings keep what the first vacuum made obsolete: no cleaner runs in between.
        results = [
            vacuum(metastore, settings, spark, unique_name, full=kind == "MAJOR", allow_uncleaned=True)
            for kind in vacuums
        ]

        assert directories(metastore, unique_name) == listing
        assert list(results[-1].new_directories) == new_directories
        assert snapshot(metastore, unique_name).equals(before)
        location = open_location(metastore.get_table(DB, unique_name).location).path
        if vacuums[-1] == "MAJOR":
            with pytest.raises(VacuumRefusedError, match="base_0000003 already holds every committed row"):
                vacuum(metastore, settings, spark, unique_name)  # a minor vacuum after the major one

    state = CliRunner().invoke(cli, ["acid-state", location])
    assert state.exit_code == 0, state.output
    reported = json.loads(state.output)
    assert reported["obsolete"] == obsolete
    # What a reader opens now is exactly what the last vacuum wrote.
    if vacuums[-1] == "MAJOR":
        assert (reported["base"], reported["deltas"]) == (new_directories[0], [])
    else:
        assert (reported["base"], reported["deltas"]) == (None, new_directories)

    events = vacuum_events(settings)
    assert [e.compaction_type for e in events] == vacuums
    assert events[-1].new_directories == new_directories
    assert events[-1].obsolete_directories == obsolete
    assert events[-1].highest_write_id == len(commits)
