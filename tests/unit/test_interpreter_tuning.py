"""The cleaner command's interpreter settings (collector thresholds, GIL switch interval), each checked
in a fresh interpreter: the test session keeps its own."""

from __future__ import annotations

import subprocess
import sys

from acidclean.shared.gc_tuning import YOUNG_GENERATION
from acidclean.shared.thread_switching import SWITCH_INTERVAL_S


def printed_by_fresh_interpreter(script: str) -> str:
    """What ``script`` prints when run by a new Python process (which must exit cleanly)."""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


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
    assert int(printed_by_fresh_interpreter(script)) == YOUNG_GENERATION


def test_the_switch_interval_is_shortened_from_pythons_default() -> None:
    script = (
        "import sys\n"
        "from acidclean.shared.thread_switching import shorten_thread_switches\n"
        "before = sys.getswitchinterval()\n"
        "shorten_thread_switches()\n"
        "print(before, sys.getswitchinterval())\n"
    )
    before, after = (float(value) for value in printed_by_fresh_interpreter(script).split())
    assert before == 0.005 and after == SWITCH_INTERVAL_S < before
