"""The README's main command: the whole story runs on real services and ends cleaned.

It gets a metastore of its own: on Hive 2 a transaction left open by any other test (a process
killed on purpose, say) bounds every compaction, and the story must not depend on test order.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from acidclean.deploy.local.demo import DemoOptions, DemoStack, run_demo
from acidclean.deploy.local.metastore import start_metastore
from acidclean.deploy.local.process import stop_process
from acidclean.deploy.local.stack import stop_stack

pytestmark = pytest.mark.integration


@pytest.fixture
def own_metastore(tmp_path: Path) -> Iterator[str]:
    process, uri = start_metastore(tmp_path / "metastore-state", "hive2")
    try:
        yield uri
    finally:
        stop_process(process.pid, process.name)


def test_demo_story_closes_the_loop_requeues_while_the_reader_holds_on_then_cleans(
    kafka_bootstrap: str, own_metastore: str, tmp_path: Path
) -> None:
    lines: list[str] = []
    state_dir = tmp_path / "stack"
    state_dir.mkdir()
    options = DemoOptions(state_dir, commits=4, rows=200, interval_ms=1000)
    run_demo(options, lines.append, DemoStack(kafka_bootstrap, own_metastore, state_dir))
    story = "\n".join(lines)
    assert "a reader locked demo." in story
    # The loop: the last commit crosses the threshold, the initiator requests, the service vacuums.
    requested = story.index("initiator: VacuumRequested (MAJOR: 7 deltas > hive.compactor.delta.num.threshold 6")
    started = story.index("VacuumStarted on its warm SparkSession")
    assert story.index("streaming 4 commits") < requested < started
    assert story.index("a reader locked demo.") < started < story.index("VacuumCommitted on the bus")
    assert story.index("VacuumCommitted on the bus") < story.index("CleanupDone:")
    assert "`acidclean vacuum" not in story and "VacuumFailed" not in story
    assert story.count("cleaner: not ready to clean") >= 2, story
    assert "the reader's files are still there: 7 of 7 directories" in story, story
    assert "CleanupDone: 7 directories" in story, story
    after = next(line for line in lines if line.strip().startswith("after:"))
    assert after.split()[1:] == ["base_0000004"], after
    # The closing line's exports let another shell run the cleaner: the allowed roots included.
    closing = lines[-1]
    assert "ACIDCLEAN_ALLOWED_ROOTS=" in closing and "ACIDCLEAN_METASTORE_URIS=" in closing, closing
    # What the demo names for the user outlives `acidclean stack down`, which removes the state directory.
    output = tmp_path / "acidclean-demo"
    assert f"the timeline and the services' logs are in {output}, which `acidclean stack down` does not remove" in story
    named = {Path(path) for path in re.findall(rf"({re.escape(str(output))}/[^\s;),]+)", story)}
    assert output / "cleaner.log" in named and output / "initiator.log" in named, named
    stop_stack(state_dir, forget=True)
    assert not state_dir.exists()
    for path in named:
        assert path.exists(), f"{path}, named by the demo, is gone after stack down"
    plots = list(output.glob("*.png"))
    assert len(plots) == 1 and plots[0].read_bytes()[:4] == b"\x89PNG" and plots[0] in named


def test_demo_by_hand_runs_the_vacuum_itself_and_cleans(
    kafka_bootstrap: str, own_metastore: str, tmp_path: Path
) -> None:
    lines: list[str] = []
    options = DemoOptions(tmp_path, commits=3, rows=100, interval_ms=1000, by_hand=True)
    run_demo(options, lines.append, DemoStack(kafka_bootstrap, own_metastore, tmp_path))
    story = "\n".join(lines)
    assert "running the Spark vacuum (MAJOR: VACUUM TABLE ... FULL)" in story, story
    assert "VacuumRequested" not in story and "initiator" not in story
    assert story.count("cleaner: not ready to clean") >= 2, story
    assert "CleanupDone: 5 directories" in story, story
