"""What a safety rule answers when the cleaner may not go on: refuse the event, or not yet."""

from __future__ import annotations

from dataclasses import dataclass

from acidclean.schemas.events import RejectionCode


@dataclass(frozen=True)
class Refusal:
    """The event must not be acted on: it goes to the dead-letter topic with this reason."""

    code: RejectionCode
    reason: str


@dataclass(frozen=True)
class NotYet:
    """Cleaning now could remove something a live transaction may need: check again later."""

    reason: str
