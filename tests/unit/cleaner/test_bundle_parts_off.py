"""The measurement knob ``cleanup_bundle_parts_off``: named parts only (docs/performance.md)."""

from __future__ import annotations

import pytest

from acidclean.consumers.cleaner_process import BUNDLE_PARTS, bundle_parts_off
from acidclean.shared.errors import ConfigurationError


def test_no_part_is_off_by_default() -> None:
    assert bundle_parts_off("") == frozenset()


def test_parts_are_read_from_a_comma_separated_list() -> None:
    assert bundle_parts_off(" unread, riders ,") == {"unread", "riders"}
    assert bundle_parts_off(",".join(sorted(BUNDLE_PARTS))) == BUNDLE_PARTS


def test_an_unknown_part_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown parts \['cohort'\].*whole_carries"):
        bundle_parts_off("cohort")


@pytest.mark.parametrize("removed", ["cohorts", "spread"])
def test_the_removed_parts_are_no_longer_parts(removed: str) -> None:
    """Cohorts and spread windows were removed (issue 50): nothing is left to switch off."""
    assert removed not in BUNDLE_PARTS
    with pytest.raises(ConfigurationError, match=rf"unknown parts \['{removed}'\]"):
        bundle_parts_off(removed)
