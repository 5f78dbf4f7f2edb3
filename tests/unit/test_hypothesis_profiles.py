"""The Hypothesis profiles (issue 50): ci keeps every property's own example count, fast tries a few of
each, and no test's count slips past the profile."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis_support import FAST_DEFAULT_EXAMPLES, FAST_FLOOR, PROFILE_ENV, examples, profile

TESTS = Path(__file__).resolve().parents[1]


def test_ci_keeps_each_count_and_fast_tries_a_share_of_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    assert (profile(), examples(300), examples(1500)) == ("ci", 300, 1500)
    monkeypatch.setenv(PROFILE_ENV, "fast")
    assert (profile(), examples(300), examples(1500), examples(60)) == ("fast", 15, 75, FAST_FLOOR)


def test_an_unknown_profile_is_refused_with_the_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROFILE_ENV, "quick")
    with pytest.raises(ValueError, match=r"^HYPOTHESIS_PROFILE=quick: use one of ci, fast$"):
        profile()


def test_the_loaded_profile_is_the_one_the_environment_names() -> None:
    expected = FAST_DEFAULT_EXAMPLES if profile() == "fast" else settings.get_profile("default").max_examples
    assert settings.default.max_examples == expected
    assert settings.get_profile("fast").max_examples == FAST_DEFAULT_EXAMPLES


def test_no_property_test_sets_a_bare_example_count() -> None:
    # ``max_examples=300`` overrides the profile, so make test-fast would run all 300.
    bare = [
        f"{path.relative_to(TESTS)}:{number}"
        for path in sorted((TESTS / "unit").rglob("test_*.py"))
        if path != Path(__file__).resolve()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"max_examples=\d", line)
    ]
    assert bare == [], "write max_examples=examples(N) (hypothesis_support) at " + ", ".join(bare)
