"""The cleaner command's collector settings, checked in a fresh interpreter (the test session keeps its own)."""

from __future__ import annotations

import subprocess
import sys

from acidclean.shared.gc_tuning import YOUNG_GENERATION


def test_tuning_freezes_what_is_alive_and_collects_the_young_generation_less_often() -> None:
    script = (
        "import gc\n"
        "from acidclean.shared.gc_tuning import tune_for_throughput\n"
        "before = gc.get_threshold()\n"
        "tune_for_throughput()\n"
        "after = gc.get_threshold()\n"
        "assert gc.get_freeze_count() > 1000, gc.get_freeze_count()\n"
        "assert after[1:] == before[1:], (before, after)\n"
        "cycle = []\n"
        "cycle.append(cycle)\n"
        "del cycle\n"
        "assert gc.collect() >= 1  # cycles made after the freeze are still collected\n"
        "print(after[0])\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) == YOUNG_GENERATION
