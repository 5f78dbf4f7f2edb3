"""Hive's Initiator rules (Initiator.checkForCompaction, determineCompactionType), on figures."""

from __future__ import annotations

import subprocess
import sys

import pytest

from acidclean.producers.initiator.rules import (
    Figures,
    InvalidTableProperty,
    Thresholds,
    decide,
    figures_of,
    is_auto_compaction_off,
    table_thresholds,
)
from acidclean.shared.acid.state import ListedFile, Listing, acid_state
from acidclean.shared.acid.write_ids import ValidWriteIdList

HIVE = Thresholds()


def test_hive_defaults() -> None:
    assert Thresholds(delta_num=10, delta_pct=0.1, aborted_txns=1000) == HIVE


def test_ten_deltas_are_not_enough_eleven_are_hive_compares_strictly() -> None:
    # Hive: enough = deltas.size() > deltaNumThreshold
    assert decide(Figures(delta_count=10, delta_bytes=10), HIVE) is None
    decision = decide(Figures(delta_count=11, delta_bytes=11), HIVE)
    assert decision is not None
    assert decision.compaction_type == "MAJOR"  # no base: Hive asks for a major compaction
    assert decision.reason == "11 deltas > hive.compactor.delta.num.threshold 10 (no base)"


def test_many_deltas_over_a_big_base_are_a_minor_vacuum() -> None:
    decision = decide(Figures(delta_count=8, delete_delta_count=3, delta_bytes=50, base_bytes=10_000), HIVE)
    assert decision is not None and decision.compaction_type == "MINOR"
    assert decision.reason.startswith("11 deltas >")  # delete deltas count too


def test_delta_bytes_over_ten_percent_of_the_base_is_a_major_vacuum() -> None:
    assert decide(Figures(delta_count=1, delta_bytes=100, base_bytes=1000), HIVE) is None  # 0.1 is not > 0.1
    decision = decide(Figures(delta_count=1, delta_bytes=101, base_bytes=1000), HIVE)
    assert decision is not None and decision.compaction_type == "MAJOR"
    assert "> hive.compactor.delta.pct.threshold 0.1" in decision.reason


def test_aborted_transactions_above_the_threshold_are_a_major_vacuum_whatever_the_deltas() -> None:
    assert decide(Figures(aborted_txns=1000), HIVE) is None
    decision = decide(Figures(aborted_txns=1001), HIVE)
    assert decision is not None and decision.compaction_type == "MAJOR"
    assert decision.reason == "1001 aborted transactions > hive.compactor.abortedtxn.threshold 1000"


def test_insert_only_tables_only_get_major_vacuums() -> None:
    figures = Figures(delta_count=11, delta_bytes=11, base_bytes=1_000_000)
    assert decide(figures, HIVE) == decide(figures, HIVE)
    decision = decide(figures, HIVE, insert_only=True)
    assert decision is not None and decision.compaction_type == "MAJOR"


def test_nothing_at_all_needs_nothing() -> None:
    assert decide(Figures(), HIVE) is None


def test_table_properties_override_the_thresholds() -> None:
    parameters = {
        "compactorthreshold.hive.compactor.delta.num.threshold": "2",
        "compactorthreshold.hive.compactor.delta.pct.threshold": "0.5",
    }
    thresholds = table_thresholds(HIVE, parameters)
    assert thresholds == Thresholds(delta_num=2, delta_pct=0.5, aborted_txns=1000)
    assert decide(Figures(delta_count=3, delta_bytes=3, base_bytes=100), thresholds) is not None
    with pytest.raises(InvalidTableProperty, match="does not parse"):
        table_thresholds(HIVE, {"compactorthreshold.hive.compactor.delta.num.threshold": "ten"})


@pytest.mark.parametrize(
    ("parameters", "off"),
    [
        ({}, False),
        ({"NO_AUTO_COMPACTION": "true"}, True),
        ({"no_auto_compaction": "TRUE"}, True),
        ({"no_auto_compaction": "false"}, False),
        ({"NO_AUTO_COMPACTION": "yes"}, False),
    ],
)
def test_no_auto_compaction_turns_a_table_off(parameters: dict[str, str], off: bool) -> None:
    assert is_auto_compaction_off(parameters) is off


def test_figures_from_a_listing_sum_direct_files_and_skip_hidden_ones() -> None:
    listing = Listing(
        files=(
            ListedFile("base_0000005/bucket_00000", 1000),
            ListedFile("base_0000005/_metadata_acid", 7),
            ListedFile("delta_0000001_0000001_0000/bucket_00000", 500),  # below the base: obsolete
            ListedFile("delta_0000006_0000006_0000/bucket_00000", 30),
            ListedFile("delta_0000006_0000006_0000/_orc_acid_version", 1),
            ListedFile("delete_delta_0000007_0000007_0000/bucket_00000", 20),
        ),
        directories=(
            "base_0000005",
            "delta_0000001_0000001_0000",
            "delta_0000006_0000006_0000",
            "delete_delta_0000007_0000007_0000",
        ),
    )
    valid = ValidWriteIdList(high_watermark=7)
    figures = figures_of(acid_state(listing, valid), listing, aborted_txns=2)
    assert figures == Figures(delta_count=1, delete_delta_count=1, delta_bytes=50, base_bytes=1000, aborted_txns=2)


def test_a_delta_counts_once_by_kind() -> None:
    figures = Figures().with_delta("delta_0000001_0000001_0000", 10).with_delta("delete_delta_0000002_0000002_0000", 5)
    assert (figures.delta_count, figures.delete_delta_count, figures.delta_bytes) == (1, 1, 15)


def test_the_rules_load_no_io_library() -> None:
    code = (
        "import sys, acidclean.producers.initiator.rules, acidclean.producers.initiator.core; "
        "print(sorted(n for n in ('thrift', 'hmsclient', 'pyarrow', 'pyorc', 'confluent_kafka', 'pyspark') "
        "if n in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd="/")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
