"""Where the tests of docs/design.md section 7, rule 5 stop a cleaner as abruptly as a power cut.

The handler tells a :class:`CrashPoints` collaborator each step it reaches; in production that is
:class:`NoCrashes`, which does nothing, so the delete path is the same with and without a test.
``ACIDCLEAN_CRASH_AT=<point>`` (read by the ``acidclean cleaner`` command) plugs in :class:`KillAt`,
which sends the process SIGKILL at that step: after the announcement and before any delete, after
one directory is deleted, after every delete, or after ``CleanupDone`` is acknowledged.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from acidclean.consumers.logs import flush_logs, log
from acidclean.shared.errors import ConfigurationError

LOGGER = logging.getLogger("acidclean.cleaner")

CrashPoint = Literal["before-delete", "mid-delete", "after-delete", "after-done"]
CRASH_POINTS: tuple[CrashPoint, ...] = ("before-delete", "mid-delete", "after-delete", "after-done")


class CrashPoints(Protocol):
    def reached(self, point: CrashPoint) -> None:
        """The handler is at ``point`` (``mid-delete``: once after each directory it deleted)."""


class NoCrashes:
    """Production: every step passes."""

    def reached(self, point: CrashPoint) -> None:
        return None


@dataclass(frozen=True)
class KillAt:
    """Kill this process with SIGKILL the first time ``point`` is reached."""

    point: CrashPoint

    def reached(self, point: CrashPoint) -> None:
        if point == self.point:
            log(LOGGER, logging.WARNING, f"crash hook: SIGKILL at {point}", crash_at=point)
            flush_logs()
            os.kill(os.getpid(), signal.SIGKILL)


def crash_points_from_env(environ: Mapping[str, str] | None = None) -> CrashPoints:
    """:class:`KillAt` for ``ACIDCLEAN_CRASH_AT``, else :class:`NoCrashes`."""
    value = (environ if environ is not None else os.environ).get("ACIDCLEAN_CRASH_AT")
    if not value:
        return NoCrashes()
    if value not in CRASH_POINTS:
        raise ConfigurationError(f"ACIDCLEAN_CRASH_AT={value!r}: expected one of {', '.join(CRASH_POINTS)}")
    return KillAt(value)
