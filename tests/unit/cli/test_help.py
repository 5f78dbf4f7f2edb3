"""Every command and group of ``acidclean`` answers ``-h``, opens with a one-line summary that the
group listing shows whole, and shows at least one example that is a real invocation of itself."""

from __future__ import annotations

import shlex
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from acidclean.cli import main


def walk(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, group
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from walk(command, (*path, name))
        else:
            yield (*path, name), command


COMMANDS = list(walk(main))


def test_every_command_is_walked() -> None:
    names = {" ".join(path) for path, _ in COMMANDS}
    assert {"", "stack", "stack up", "stack down", "outbox flush", "vacuum", "audit", "scan", "cleaner"} <= names


def example_lines(output: str) -> list[str]:
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "Examples:")
    return [line.strip()[2:] for line in lines[start + 1 :] if line.strip().startswith("$ ")]


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[" ".join(p) or "acidclean" for p, _ in COMMANDS])
def test_h_shows_a_one_line_summary_and_examples(path: tuple[str, ...], command: click.Command) -> None:
    result = CliRunner().invoke(main, [*path, "-h"])
    assert result.exit_code == 0, result.output
    assert result.output == CliRunner().invoke(main, [*path, "--help"]).output
    lines = result.output.splitlines()
    assert lines[0].startswith("Usage: ")
    summary = (command.help or "").splitlines()[0]
    assert lines[2].strip() == summary
    assert summary.endswith(".") and len(summary) <= 60, summary
    assert command.get_short_help_str(limit=60) == summary  # shown whole in the group's listing
    examples = example_lines(result.output)
    assert examples, f"no example in the help of {' '.join(path) or 'acidclean'}"
    assert any(" ".join(["acidclean", *path]) in example for example in examples)


EXAMPLES = sorted(
    {example for path, _ in COMMANDS for example in example_lines(CliRunner().invoke(main, [*path, "-h"]).output)}
)


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_names_real_commands_and_options(example: str) -> None:
    if example.startswith("eval "):
        example = example.split('"$(', 1)[1].rsplit(')"', 1)[0]
    words = shlex.split(example)
    assert words[0] == "acidclean"
    result = CliRunner().invoke(main, [*words[1:], "-h"])  # unknown options and commands fail before -h
    assert result.exit_code == 0, f"{example}: {result.output}"


def test_the_exit_codes_and_shell_completion_are_in_the_top_level_help() -> None:
    output = " ".join(CliRunner().invoke(main, ["-h"]).output.split())
    assert "Exit codes: 0 done, 1 failed, 2 usage" in output
    assert "130 interrupted" in output
    assert "_ACIDCLEAN_COMPLETE=bash_source acidclean" in output
