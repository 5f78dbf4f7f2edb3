"""The measurement knob ``cleanup_bundle_parts_off``: named parts only (docs/performance.md)."""

from __future__ import annotations

import pytest

from acidclean.consumers.cleaner_process import BUNDLE_PARTS, bundle_parts_off
from acidclean.shared.errors import ConfigurationError


def test_no_part_is_off_by_default() -> None:
    assert bundle_parts_off("") == frozenset()


def test_parts_are_read_from_a_comma_separated_list() -> None:
    assert bundle_parts_off(" cohorts, gather ,") == {"cohorts", "gather"}
    assert bundle_parts_off(",".join(sorted(BUNDLE_PARTS))) == BUNDLE_PARTS


def test_an_unknown_part_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown parts \['cohort'\].*whole_carries"):
        bundle_parts_off("cohort")
