"""A damaged stack.json is one line naming the file and the way out (``stack down --forget``), never
a traceback; commands that only look for the stack they stand in warn and go on without it. A file
written before start times were recorded stays readable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from acidclean.cli import EXIT_FAILED, main
from acidclean.deploy.local.stack import StackInfo

INTACT = {
    "state_dir": "/tmp/somewhere",
    "kafka": {"name": "Kafka", "pid": 4242, "address": "127.0.0.1:1", "log_file": "k.log", "seconds_to_ready": 1.0},
    "metastore": {
        "name": "Hive Metastore (hive2)",
        "pid": 4243,
        "address": "thrift://127.0.0.1:2",
        "log_file": "m.log",
        "seconds_to_ready": 1.0,
    },
    "metastore_flavour": "hive2",
    "warehouse": "/tmp/somewhere/warehouse",
    "started_at": 1.0,
}
DAMAGED = {
    "truncated": json.dumps(INTACT)[:57],
    "not JSON": "kafka=127.0.0.1:1\n",
    "a list": "[1, 2]",
    "missing keys": json.dumps({"state_dir": "/tmp/somewhere", "kafka": INTACT["kafka"]}),
    "a service without its pid": json.dumps({**INTACT, "kafka": {"name": "Kafka", "address": "x", "log_file": "k"}}),
    "a pid that is text": json.dumps({**INTACT, "kafka": {**INTACT["kafka"], "pid": "4242"}}),  # type: ignore[dict-item]
    "empty": "",
}


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.fixture(params=sorted(DAMAGED), ids=str)
def damaged(request: pytest.FixtureRequest, no_stack: Path) -> Path:
    no_stack.mkdir()
    (no_stack / "stack.json").write_text(DAMAGED[request.param])
    return no_stack


@pytest.mark.parametrize("command", [["stack", "status"], ["stack", "down"], ["stack", "env"], ["stack", "up"]])
def test_a_damaged_stack_json_is_one_line_naming_the_file_and_the_way_out(damaged: Path, command: list[str]) -> None:
    result = run(*command)
    assert result.exit_code == EXIT_FAILED
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"error: {damaged / 'stack.json'} is damaged (")
    assert lines[0].endswith(
        f"remove it, or run `acidclean stack down --forget --state-dir {damaged}` to stop nothing and forget it"
    )


def test_stack_down_forget_stops_nothing_and_forgets_the_damaged_stack(damaged: Path) -> None:
    result = run("stack", "down", "--forget")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"forgot the stack in {damaged}; stopped nothing\n"
    assert not damaged.exists()
    assert run("stack", "status").exit_code == EXIT_FAILED  # no stack any more
    assert "no stack in" in run("stack", "status").stderr


def test_forget_keeps_what_is_not_the_stacks_own_and_removes_only_stack_json(damaged: Path) -> None:
    (damaged / "notes.txt").write_text("mine")
    assert run("stack", "down", "--forget").exit_code == 0
    assert sorted(p.name for p in damaged.iterdir()) == ["notes.txt"]


def test_a_command_standing_in_a_damaged_stack_warns_and_goes_on(damaged: Path, tmp_path: Path) -> None:
    result = run("outbox", "list", "--outbox", str(tmp_path / "outbox"))
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith(f"note: not using the local stack: {damaged / 'stack.json'} is damaged (")
    assert "Traceback" not in result.output


def test_a_stack_json_written_before_start_times_were_recorded_is_readable() -> None:
    info = StackInfo.from_json(json.dumps(INTACT))
    assert (info.kafka.pid, info.kafka.start_time, info.metastore.start_time) == (4242, None, None)
    assert StackInfo.from_json(info.to_json()) == info
