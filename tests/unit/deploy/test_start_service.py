"""A service whose start is cut short (Ctrl-C, a readiness check that raises) is stopped by its pid:
no caller holds the pid yet, so nothing else could stop it."""

from __future__ import annotations

from pathlib import Path

import pytest

from acidclean.deploy.local.process import pid_alive, start_service


@pytest.mark.parametrize("interruption", [KeyboardInterrupt, RuntimeError])
def test_a_start_cut_short_while_waiting_for_readiness_stops_the_process(
    tmp_path: Path, interruption: type[BaseException]
) -> None:
    pid_file = tmp_path / "pid"
    started: list[int] = []

    def ready() -> bool:
        if not pid_file.exists() or not pid_file.read_text().strip():
            return False
        started.append(int(pid_file.read_text()))
        raise interruption("cut short")

    with pytest.raises(interruption, match="cut short"):
        start_service(
            "Sleeper",
            ["sh", "-c", f"echo $$ > {pid_file}; exec sleep 120"],
            tmp_path / "sleeper.log",
            ready=ready,
            timeout_s=30,
        )
    [pid] = started
    assert not pid_alive(pid)
