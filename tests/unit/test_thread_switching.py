"""The cleaner command's GIL switch interval, checked in a fresh interpreter (the test session keeps its own)."""

from __future__ import annotations

import subprocess
import sys

from acidclean.shared.thread_switching import SWITCH_INTERVAL_S


def test_the_switch_interval_is_shortened_from_pythons_default() -> None:
    script = (
        "import sys\n"
        "from acidclean.shared.thread_switching import shorten_thread_switches\n"
        "before = sys.getswitchinterval()\n"
        "shorten_thread_switches()\n"
        "print(before, sys.getswitchinterval())\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    before, after = (float(value) for value in result.stdout.split())
    assert before == 0.005 and after == SWITCH_INTERVAL_S < before
