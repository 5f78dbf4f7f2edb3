"""The cleaner's duration flags take the same forms as the settings they set."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from acidclean.cli import main


@pytest.mark.parametrize("value", ["5x", "0", "-3s"])
def test_a_bad_interval_flag_is_a_usage_error_naming_the_flag(value: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["cleaner", "--interval-ms", value], env={"ACIDCLEAN_STATE_DIR": str(tmp_path)})
    assert result.exit_code == 2, result.output
    assert "--interval-ms" in result.output


def test_interval_and_max_wait_flags_take_units(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen = {}

    class Stop(Exception):
        pass

    def capture(settings, options):  # type: ignore[no-untyped-def]
        seen["interval"], seen["max_wait"] = settings.cleanup_interval_ms, settings.max_wait_s
        raise Stop

    monkeypatch.setattr("acidclean.cli.cleaner.CleanerProcess", capture)
    result = CliRunner().invoke(
        main,
        ["cleaner", "--interval-ms", "5m", "--max-wait", "2h"],
        env={"ACIDCLEAN_STATE_DIR": str(tmp_path), "ACIDCLEAN_ALLOWED_ROOTS": '{"default": ["/w"]}'},
    )
    assert isinstance(result.exception, Stop), result.output
    assert seen == {"interval": 300_000, "max_wait": 7200.0}
