"""``acidclean acid-state`` and ``acidclean scan``: the JSON and row output other tools parse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from acidclean.cli import main

from .conftest import TableWriter


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def make_dirs(root: Path, *names: str) -> None:
    for name in names:
        (root / name).mkdir(parents=True)
        (root / name / "_orc_acid_version").write_text("2")
        (root / name / "bucket_00000").write_bytes(b"")


def test_acid_state_prints_one_json_object_with_the_seeds_obsolete_list(tmp_path: Path) -> None:
    make_dirs(
        tmp_path,
        "delta_0000001_0000001_0000",
        "delta_0000002_0000002_0000",
        "delta_0000003_0000003_0000",
        "delta_0000004_0000004_0000",
        "delete_delta_0000004_0000004_0000",
        "delta_0000001_0000004",
        "delete_delta_0000001_0000004",
        "_tmp_0001",
    )
    result = run("acid-state", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {
        "base": None,
        "deltas": ["delete_delta_0000001_0000004", "delta_0000001_0000004"],
        "obsolete": [
            "delete_delta_0000004_0000004_0000",
            "delta_0000001_0000001_0000",
            "delta_0000002_0000002_0000",
            "delta_0000003_0000003_0000",
            "delta_0000004_0000004_0000",
        ],
        "aborted": [],
        "original_files": [],
    }


def test_acid_state_takes_the_snapshot_from_flags(tmp_path: Path) -> None:
    make_dirs(tmp_path, "base_0000002", "delta_0000003_0000003_0000", "delta_0000004_0000004_0000", "delta_1_1_0")
    (tmp_path / "000000_0").write_bytes(b"")
    result = run("acid-state", str(tmp_path), "--high-watermark", "4", "--open", "4", "--aborted", "3")
    assert json.loads(result.output) == {
        "base": "base_0000002",
        "deltas": [],
        "obsolete": ["000000_0", "delta_1_1_0"],
        "aborted": ["delta_0000003_0000003_0000"],
        "original_files": [],
    }


def test_acid_state_lists_original_files_relative_and_sorted(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    for name in ("000001_0", "000000_0", "sub/000000_0", "_done"):
        (tmp_path / name).write_bytes(b"")
    assert json.loads(run("acid-state", str(tmp_path)).output)["original_files"] == [
        "000000_0",
        "000001_0",
        "sub/000000_0",
    ]


def test_cleaner_flag_leaves_ranges_above_the_watermark_alone(tmp_path: Path) -> None:
    make_dirs(tmp_path, "base_0000039_v0000001", "delta_0000040_0000060_v0000002", "delta_0000048_0000055_v0000003")
    reader = json.loads(run("acid-state", str(tmp_path), "--high-watermark", "50").output)
    cleaner = json.loads(run("acid-state", str(tmp_path), "--high-watermark", "50", "--cleaner").output)
    assert reader["obsolete"] == ["delta_0000048_0000055_v0000003"]
    assert cleaner["obsolete"] == [] and cleaner["deltas"] == []


def test_cleaner_flag_with_an_open_id_above_the_watermark_keeps_later_bases(tmp_path: Path) -> None:
    # HIVE-29601 through the CLI: Hive's list as it is (min open write id 10) capped at the first
    # vacuum's watermark 3; only that vacuum's deltas are obsolete, not base_3 and deltas 4..9.
    deltas = [f"delta_{i:07d}_{i:07d}" for i in range(1, 11)]
    make_dirs(tmp_path, "base_0000003_v0000004", "base_0000006_v0000008", "base_0000009_v0000012", *deltas)
    out = run("acid-state", str(tmp_path), "--high-watermark", "3", "--open", "10", "--cleaner")
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["obsolete"] == deltas[:3]


def test_valid_txns_flag_hides_an_open_compaction(tmp_path: Path) -> None:
    make_dirs(tmp_path, "delta_1_1_0", "delta_2_2_0", "delta_1_2_v10")
    out = json.loads(run("acid-state", str(tmp_path), "--valid-txns", "10:10:10:").output)
    assert out["deltas"] == ["delta_1_1_0", "delta_2_2_0"] and out["obsolete"] == []


def test_not_enough_history_exits_non_zero_naming_the_base(tmp_path: Path) -> None:
    make_dirs(tmp_path, "delta_2_10", "base_25_v30", "base_100_v101")
    result = run("acid-state", str(tmp_path), "--high-watermark", "150", "--open", "7")
    assert result.exit_code == 1
    assert "Not enough history available for (150,7)" in result.output
    assert str(tmp_path / "base_25_v30") in result.output


@pytest.mark.parametrize("bad", ["base_x", "delta_1"])
def test_unparseable_directory_exits_non_zero_naming_it(tmp_path: Path, bad: str) -> None:
    make_dirs(tmp_path, "delta_1_1_0", bad)
    result = run("acid-state", str(tmp_path))
    assert result.exit_code == 1 and bad in result.output


def test_missing_directory_exits_non_zero_naming_it(tmp_path: Path) -> None:
    result = run("scan", str(tmp_path / "nope"), "--count")
    assert result.exit_code == 1 and "nope" in result.output


def test_bad_id_list_is_a_usage_error(tmp_path: Path) -> None:
    assert run("acid-state", str(tmp_path), "--open", "1,x").exit_code == 2


def scan_table(table: TableWriter) -> None:
    table.insert("delta_0000001_0000001_0000", 1, [1, 2, 3])
    table.insert("delta_0000002_0000002_0000", 2, [4])
    table.delete("delete_delta_0000003_0000003_0000", 3, [(1, 0, 0)])


def test_scan_counts_the_visible_rows(table: TableWriter) -> None:
    scan_table(table)
    assert run("scan", table.path, "--count").output.strip() == "3"
    assert run("scan", table.path, "--count", "--high-watermark", "3", "--open", "2").output.strip() == "2"
    assert run("scan", table.path, "--count", "--high-watermark", "3", "--aborted", "3").output.strip() == "4"


def test_scan_prints_json_lines_with_the_acid_identity_on_request(table: TableWriter) -> None:
    scan_table(table)
    lines = [json.loads(line) for line in run("scan", table.path, "--format", "jsonl").output.splitlines()]
    assert lines == [{"id": 2, "name": "n2"}, {"id": 3, "name": "n3"}, {"id": 4, "name": "n4"}]
    result = run("scan", table.path, "--format", "jsonl", "--with-row-id", "--columns", "id")
    first = json.loads(result.output.splitlines()[0])
    assert first == {"originalTransaction": 1, "bucket": 536870912, "rowId": 1, "currentTransaction": 1, "id": 2}


def test_scan_prints_csv(table: TableWriter) -> None:
    scan_table(table)
    result = run("scan", table.path, "--format", "csv", "--columns", "name,id")
    assert result.output.splitlines() == ['"name","id"', '"n2",2', '"n3",3', '"n4",4']


def test_scan_prints_json_lines_unless_told_otherwise_and_refuses_count_with_format(table: TableWriter) -> None:
    scan_table(table)
    assert run("scan", table.path).output == run("scan", table.path, "--format", "jsonl").output
    assert run("scan", table.path, "--count", "--format", "csv").exit_code == 2


def test_scan_of_an_unreadable_file_exits_non_zero_naming_it(table: TableWriter) -> None:
    scan_table(table)
    Path(table.path, "delta_0000002_0000002_0000", "bucket_00000").write_bytes(b"garbage")
    result = run("scan", table.path, "--count")
    assert result.exit_code == 1
    assert "delta_0000002_0000002_0000/bucket_00000" in result.output


def test_hive2_rules_refuse_for_lack_of_history_where_hive3_reads_an_insert_overwrite_base(tmp_path: Path) -> None:
    # base_5 without _metadata_acid: on Hive 3+ an insert overwrite's base, read once write 5 committed;
    # on Hive 2 every base is a compactor's, usable only below the lowest open transaction (3 here),
    # and with no older base Hive 2's getAcidState refuses the listing. --hive2 says so the same way.
    make_dirs(tmp_path, "delta_1_1", "base_5")
    hive3 = run("acid-state", str(tmp_path), "--high-watermark", "6", "--open", "3")
    assert hive3.exit_code == 0 and json.loads(hive3.output)["base"] == "base_5"
    hive2 = run("acid-state", str(tmp_path), "--high-watermark", "6", "--open", "3", "--hive2")
    assert hive2.exit_code == 1
    assert "Not enough history available for (6,3)" in hive2.output
    assert str(tmp_path / "base_5") in hive2.output
