"""Every command here runs with no local stack around: ACIDCLEAN_STATE_DIR names an empty folder."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def no_stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state_dir = tmp_path / "no-stack"
    monkeypatch.setenv("ACIDCLEAN_STATE_DIR", str(state_dir))
    return state_dir
