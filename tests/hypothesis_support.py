"""How many examples a property test tries, by the Hypothesis profile that tests/conftest.py loads.

``ci`` (the default, and ``make test``) keeps each test's own count, the suite's full strength; ``fast``
(``make test-fast``, the inner loop) tries one example in ``FAST_SHARE``, never fewer than
``FAST_FLOOR``, so every property still runs its shrinking and its saved failures each time. A test
that sets its own count writes ``max_examples=examples(300)``: a bare ``max_examples=300`` would
override the profile.
"""

from __future__ import annotations

import os

PROFILE_ENV = "HYPOTHESIS_PROFILE"
PROFILES = ("ci", "fast")
FAST_SHARE = 20
FAST_FLOOR = 5
FAST_DEFAULT_EXAMPLES = 10  # for a test without a count of its own (Hypothesis's default is 100)


def profile() -> str:
    """The profile named by ``$HYPOTHESIS_PROFILE``, ``ci`` when unset."""
    name = os.environ.get(PROFILE_ENV, "ci")
    if name not in PROFILES:
        raise ValueError(f"{PROFILE_ENV}={name}: use one of {', '.join(PROFILES)}")
    return name


def examples(ci: int) -> int:
    """``ci`` examples under the ci profile; a share of them, at least ``FAST_FLOOR``, under fast."""
    return ci if profile() == "ci" else max(FAST_FLOOR, ci // FAST_SHARE)
