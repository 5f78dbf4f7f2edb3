"""The demo leaves its timeline and logs where `acidclean stack down` does not remove them (issue 52)."""

from __future__ import annotations

from pathlib import Path

import pytest

from acidclean.deploy.local.demo import DemoOptions, demo_output, demo_output_dir
from acidclean.deploy.local.stack import stop_stack
from acidclean.shared.errors import ConfigurationError


def test_the_default_output_is_beside_the_state_directory_and_outlives_stack_down(tmp_path: Path) -> None:
    state_dir = tmp_path / ".stack"
    (state_dir / "logs").mkdir(parents=True)
    output = demo_output(DemoOptions(state_dir), state_dir)
    assert output == demo_output_dir(state_dir) == tmp_path / "acidclean-demo"
    output.mkdir()
    (output / "clicks.png").write_bytes(b"\x89PNG")
    stop_stack(state_dir, forget=True)  # what `acidclean stack down` removes: the whole state directory
    assert not state_dir.exists()
    assert (output / "clicks.png").read_bytes() == b"\x89PNG"


def test_an_output_inside_the_state_directory_is_refused(tmp_path: Path) -> None:
    state_dir = tmp_path / ".stack"
    for inside in (state_dir, state_dir / "demo"):
        with pytest.raises(ConfigurationError, match="inside the stack's state directory"):
            demo_output(DemoOptions(state_dir, output_dir=inside), state_dir)
    assert demo_output(DemoOptions(state_dir, output_dir=tmp_path / "mine"), state_dir) == tmp_path / "mine"
