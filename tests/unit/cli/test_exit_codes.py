"""One exit-code table for every command (``acidclean.cli.EXIT_CODES``): 0 done, 1 failed, 2 usage
(bad arguments, table name or settings), 3 done but not published, 130 interrupted (see
tests/integration/test_cli_interrupt.py). The same mistake exits with the same code everywhere."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from click.testing import CliRunner, Result

from acidclean.cli import EXIT_FAILED, EXIT_NOT_PUBLISHED, EXIT_UNAVAILABLE, EXIT_USAGE, main
from acidclean.deploy.local.process import free_port
from acidclean.producers.outbox import Outbox
from acidclean.producers.publish import complete_event
from acidclean.shared.orc.writer import insert_events, write_bucket_file


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env=env)


def one_delta(root: Path) -> Path:
    """A table directory holding one delta of two rows (write id 1)."""
    rows = pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", "b"]})
    write_bucket_file(pafs.LocalFileSystem(), f"{root}/delta_0000001_0000001_0000", 0, insert_events(rows, 1))
    return root


@pytest.mark.parametrize(
    "args",
    [
        ["vacuum", "orders"],
        ["audit", "db"],
        ["read", "orders"],
        ["ingest", "orders", "--rows", "1"],
        ["create-table", "orders", "--columns", "id int"],
        ["create-table", "sales.orders", "--columns", "id int", "--buckets", "0"],
        ["cleaner", "--threads", "-1"],
        ["acid-state", ".", "--high-watermark", "-3"],
        ["acid-state", ".", "--open", "0"],
        ["scan", ".", "--min-open-write-id", "0"],
        ["scan", ".", "--count", "--format", "csv"],
        ["vacuum", "sales.orders", "--publish-timeout", "0"],
        ["stack", "up", "--kafka-port", "70000"],
        ["audit", "--since", "yesterday"],
        ["no-such-command"],
    ],
    ids=" ".join,
)
def test_a_usage_mistake_exits_2_in_every_command(args: list[str]) -> None:
    result = run(*args)
    assert result.exit_code == EXIT_USAGE, result.output
    assert "Traceback" not in result.output


def test_a_table_name_without_its_database_is_the_same_mistake_everywhere() -> None:
    outputs = [run(*args).output for args in (["vacuum", "orders"], ["audit", "db"], ["read", "orders"])]
    assert all("is not DB.TABLE" in output for output in outputs), outputs


def test_bad_settings_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "bad.properties"
    config.write_text("no.such.key=1\n")
    result = run("outbox", "list", "--config", str(config))
    assert result.exit_code == EXIT_USAGE
    assert "unknown setting 'no.such.key'" in result.output


def test_a_metastore_that_does_not_answer_exits_4() -> None:
    result = run(
        "create-table",
        "sales.orders",
        "--columns",
        "id int",
        env={"ACIDCLEAN_METASTORE_URIS": f"thrift://127.0.0.1:{free_port()}"},
    )
    assert result.exit_code == EXIT_UNAVAILABLE
    assert "error: cannot reach the Hive Metastore" in result.output
    assert "Traceback" not in result.output


def test_stack_status_without_a_stack_fails_with_1(no_stack: Path) -> None:
    result = run("stack", "status")
    assert result.exit_code == EXIT_FAILED
    assert f"no stack in {no_stack}" in result.output


def test_scan_prints_json_lines_by_default(tmp_path: Path) -> None:
    table = one_delta(tmp_path / "t")
    result = run("scan", str(table), "--columns", "id")
    assert result.exit_code == 0, result.output
    assert [json.loads(line) for line in result.stdout.splitlines()] == [{"id": 1}, {"id": 2}]
    assert run("scan", str(table), "--count").stdout == "2\n"


def test_acid_state_takes_a_high_watermark_of_0(tmp_path: Path) -> None:
    result = run("acid-state", str(one_delta(tmp_path / "t")), "--high-watermark", "0")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["deltas"] == []


def test_an_event_kafka_does_not_take_exits_3_and_stays_in_the_outbox(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "outbox")
    draft = {
        "event_id": str(uuid.uuid4()),
        "tenant": "default",
        "table": "db.t",
        "partition": None,
        "location": str(tmp_path / "t"),
        "compaction_type": "MINOR",
        "new_directories": ["delta_0000001_0000002"],
        "obsolete_directories": ["delta_0000001_0000001_0000", "delta_0000002_0000002_0000"],
        "highest_write_id": 2,
        "vacuum_job_id": "local-1-job",
        "staging_dir": "_tmp_acidclean_job-1",
    }
    outbox.save_event(draft, complete_event(draft, NoLocks()))  # type: ignore[arg-type]
    result = run(
        "outbox",
        "flush",
        "--outbox",
        str(outbox.directory),
        "--publish-timeout",
        "1",
        env={"ACIDCLEAN_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port()}"},
    )
    assert result.exit_code == EXIT_NOT_PUBLISHED, result.output
    assert "0 published, 1 still pending" in result.stdout
    assert [entry.event_id for entry in outbox.entries()] == [draft["event_id"]]


class NoLocks:
    """The part of the metastore an event needs: no lock held, transactions up to 10."""

    def show_locks(self, db: str | None = None, table: str | None = None, partition: str | None = None) -> list[object]:
        return []

    def valid_txn_list(self) -> str:
        return f"10:{2**63 - 1}::"

    def get_all_tables(self, db: str) -> list[str]:
        return []  # no other table shares the directory


def test_an_unreachable_metastore_is_one_line_on_stderr_of_the_real_command() -> None:
    """Thrift logs its own "Could not connect" record before raising: it must not reach the terminal."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "ACIDCLEAN_METASTORE_URIS": f"thrift://127.0.0.1:{free_port()}"}
    done = subprocess.run(
        [sys.executable, "-m", "acidclean", "read", "sales.orders"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == EXIT_UNAVAILABLE, done.stderr
    assert done.stderr.splitlines() == [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(done.stderr.splitlines()) == 1, done.stderr


def test_a_ctrl_c_while_the_command_line_is_still_being_imported_exits_130_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``acidclean`` and ``python -m acidclean`` import every command before their Ctrl-C handling is
    in place (a second or more on a busy machine): a Ctrl-C then ends the same way, not in a traceback
    (a fresh-clone CI run sent it 2 s after the start and got Python's own exit)."""
    import importlib.abc
    import sys

    import acidclean.__main__ as entry
    from acidclean.cli import EXIT_INTERRUPTED

    class InterruptedImport(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, path: object = None, target: object = None) -> None:
            if name == "acidclean.cli":
                raise KeyboardInterrupt
            return None

    monkeypatch.delitem(sys.modules, "acidclean.cli")
    monkeypatch.setattr(sys, "meta_path", [InterruptedImport(), *sys.meta_path])
    with pytest.raises(SystemExit) as exited:
        entry.run()
    assert exited.value.code == EXIT_INTERRUPTED == entry.EXIT_INTERRUPTED
    assert capsys.readouterr().err == "interrupted\n"
