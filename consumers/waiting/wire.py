"""A waiting vacuum's record on the wire: the msgspec shapes a re-check reads and writes (every
field it does not need kept as bytes), their decoders, and a group's member as read from them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import msgspec


class LockRef(msgspec.Struct):
    """A lock snapshot entry, read for its id only (its bytes are kept as they are)."""

    lock_id: int


class VacuumView(msgspec.Struct):
    """The fields of a waiting vacuum that a re-check reads (every other field stays in its bytes)."""

    event_id: str
    tenant: str
    table: str
    occurred_at: datetime
    new_directories: list[str]
    lock_snapshot: list[msgspec.Raw]
    partition: str | None = None
    next_txn_id: int | None = None


class VacuumKey(msgspec.Struct):
    """A waiting vacuum's id and key: what a group read without its vacuums still checks of each."""

    event_id: str
    tenant: str
    table: str
    partition: str | None = None


class WireWaiting(msgspec.Struct, forbid_unknown_fields=True):
    """One :class:`acidclean.schemas.events.WaitingVacuum` on the wire, its vacuum and locks as bytes."""

    vacuum: msgspec.Raw
    attempt: int
    locks_held: list[msgspec.Raw]
    check_error: str | None = None
    stuck: bool = False
    stuck_since: str | None = None
    open_txns: list[int] = []


class WireUnchanged(msgspec.Struct, forbid_unknown_fields=True):
    """A :class:`acidclean.schemas.events.UnchangedWaiting` on the wire."""

    lock_ids: list[int]
    checks: int
    oldest_commit: str
    oldest_unstuck_commit: str | None


class WireGroup(msgspec.Struct, forbid_unknown_fields=True):
    """A :class:`acidclean.schemas.events.DelayedVacuums` on the wire (same field names and order)."""

    schema_version: int
    event_id: str
    tenant: str
    table: str
    occurred_at: str
    causation_id: str | None
    correlation_id: None
    due_at: str
    waiting: list[WireWaiting]
    merged_from: list[str] = []
    unchanged: WireUnchanged | None = None
    partition: str | None = None


class WireGroupCarried(WireGroup):
    """A ``DelayedVacuums`` on the wire with each waiting vacuum's entry kept as bytes, unread: what a
    check that carries it on unread reads and writes (:func:`carry_on_unread`)."""

    waiting: list[msgspec.Raw]  # type: ignore[assignment]


class WireEnvelope(msgspec.Struct, forbid_unknown_fields=True):
    """A :class:`acidclean.schemas.events.DelayEnvelope` on the wire, its vacuum and locks as bytes."""

    schema_version: int
    event_id: str
    tenant: str
    table: str
    occurred_at: str
    causation_id: str | None
    correlation_id: str
    vacuum: msgspec.Raw
    attempt: int
    due_at: str
    locks_held: list[msgspec.Raw]
    check_error: str | None = None
    stuck: bool = False
    stuck_since: str | None = None
    open_txns: list[int] = []
    partition: str | None = None


GROUP_DECODER = msgspec.json.Decoder(WireGroup)
GROUP_CARRIED_DECODER = msgspec.json.Decoder(WireGroupCarried)
ENVELOPE_DECODER = msgspec.json.Decoder(WireEnvelope)
VIEW_DECODER = msgspec.json.Decoder(VacuumView)
VACUUM_KEY_DECODER = msgspec.json.Decoder(VacuumKey)
LOCK_DECODER = msgspec.json.Decoder(LockRef)
ENCODER = msgspec.json.Encoder()


@dataclass(frozen=True)
class Member:
    """One waiting vacuum of a group: its wire entry, its view and its snapshot's lock ids."""

    wire: WireWaiting
    view: VacuumView
    lock_ids: tuple[int, ...]

    @property
    def vacuum_id(self) -> str:
        return self.view.event_id


def vacuum_id_of(entry: WireWaiting) -> str:
    """The event id of an entry's vacuum."""
    return VIEW_DECODER.decode(entry.vacuum).event_id


def member_of(entry: WireWaiting) -> Member:
    view = VIEW_DECODER.decode(entry.vacuum)
    return Member(entry, view, tuple(LOCK_DECODER.decode(lock).lock_id for lock in view.lock_snapshot))


def moment_of(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone")
    return moment.astimezone(timezone.utc)


def iso(moment: datetime) -> str:
    """A UTC time as the models write it."""
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
