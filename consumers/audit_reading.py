"""Reading the audit topics: which topics and events, each record decoded by the fast decoder of
:mod:`acidclean.consumers.audit_wire` (or by the event models, for what it leaves and with
``validate``), a bundle read as its members, and the records of other tables skipped unread. An
unreadable record becomes a rejection, as the cleaner would have it, dated by its record.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from typing import TypeVar

import msgspec

from acidclean.consumers.audit_rows import EPOCH
from acidclean.consumers.audit_wire import (
    WireDelayedVacuums,
    WireDelayEnvelope,
    WireEvent,
    decoders_for,
    fast_decode,
)
from acidclean.schemas.common import PARTITION_PATTERN, TABLE_PATTERN, EventBase
from acidclean.schemas.events import (
    CleanupDone,
    CleanupRejected,
    CleanupStarted,
    DelayedVacuums,
    DelayEnvelope,
    Event,
    VacuumCommitted,
    VacuumFailed,
    VacuumRequested,
    VacuumStarted,
)
from acidclean.shared.acid.partition_names import may_be_same_partition
from acidclean.shared.bus.bundle import BUNDLE_KEY_SUFFIX, is_bundle, unpack
from acidclean.shared.bus.codec import decode, header_due_at_ms
from acidclean.shared.bus.records import MessageLike, RawRecord, raw_record
from acidclean.shared.settings import Settings

# The settings.topics fields read by the audit, with the events each may hold.
AUDIT_TOPICS: dict[str, tuple[type[EventBase], ...]] = {
    "vacuum_committed": (VacuumCommitted,),
    "cleanup_delay": (DelayEnvelope, DelayedVacuums),
    "cleanup_done": (CleanupStarted, CleanupDone),
    "dead_letter": (CleanupRejected,),
    "vacuum_requests": (VacuumRequested, VacuumStarted, VacuumFailed),
}
READER_ID = "acidclean-audit"
_TABLE_KEY = re.compile(TABLE_PATTERN.encode())
_PARTITION_KEY = re.compile(PARTITION_PATTERN)
_BUNDLE_KEY_END = b"/" + BUNDLE_KEY_SUFFIX.encode()
_Decoded = TypeVar("_Decoded")


def _record_time(record: RawRecord) -> datetime:
    # A rejection made while reading is dated by its record, so the same log always folds the same way.
    return EPOCH if record.timestamp_ms is None else datetime.fromtimestamp(record.timestamp_ms / 1000, timezone.utc)


def decode_records(records: Iterable[RawRecord], settings: Settings, reader_id: str = READER_ID) -> Iterator[Event]:
    """Decode records read from the audit topics with the event models; unreadable ones become rejections."""
    expected = _expected_classes(settings)
    for read in records:
        members, carry = bundle_members(read)
        for record in members:
            event = decode(
                record,
                rejected_by=reader_id,
                tenant=settings.tenant,
                expected=expected.get(record.topic),
                now=partial(_record_time, record),
            )
            yield event if carry is None else carry.applied(event)


@dataclass(frozen=True)
class WholeCarry:
    """A bundle carried on whole (its members' bytes as they were written): each member was checked
    again when the bundle was, ``carried`` checks since it was written (counted in its summary's
    checks, or in its attempt when it waits alone), and is due when it is."""

    carried: int
    checked_at: datetime
    due_at: datetime

    def applied(self, event: _Decoded) -> _Decoded:
        """``event`` (a member) as the check that carried its bundle on left it."""
        unchanged = getattr(event, "unchanged", None)
        if isinstance(event, DelayedVacuums) and unchanged is not None:
            counted = unchanged.model_copy(update={"checks": unchanged.checks + self.carried})
            update = {"occurred_at": self.checked_at, "due_at": self.due_at, "unchanged": counted}
            return event.model_copy(update=update)
        if isinstance(event, WireDelayedVacuums) and event.unchanged is not None:
            wire_counted = msgspec.structs.replace(event.unchanged, checks=event.unchanged.checks + self.carried)
            return msgspec.structs.replace(
                event, occurred_at=self.checked_at, due_at=self.due_at, unchanged=wire_counted
            )
        # A vacuum waiting alone counts its checks in its attempt.
        if isinstance(event, DelayEnvelope):
            update = {"occurred_at": self.checked_at, "due_at": self.due_at, "attempt": event.attempt + self.carried}
            return event.model_copy(update=update)
        if isinstance(event, WireDelayEnvelope):
            return msgspec.structs.replace(
                event, occurred_at=self.checked_at, due_at=self.due_at, attempt=event.attempt + self.carried
            )
        return event


def bundle_members(record: RawRecord) -> tuple[Sequence[RawRecord], WholeCarry | None]:
    """A bundle's records, each read as if it had been published alone (the cleaner packs many waiting
    tables' delay records in one), or the record itself (also when it is not a well-formed bundle: the
    models then refuse it); and how the check that carried the bundle on whole changed its members."""
    if record.key is None or not record.key.endswith(_BUNDLE_KEY_END):
        return (record,), None
    bundle = unpack(record) if is_bundle(record.headers) else None
    try:
        members = () if bundle is None else bundle.members
    except ValueError:  # members that do not read: the record as it is
        bundle = None
    if bundle is None:
        return (record,), None
    due = header_due_at_ms(record)
    if bundle.summary is None or bundle.summary.carried <= 0 or due is None:
        return members, None
    due_at = datetime.fromtimestamp(due / 1000, timezone.utc)
    return members, WholeCarry(bundle.summary.carried, bundle.occurred_at, due_at)


def _expected_classes(settings: Settings) -> dict[str, tuple[type[EventBase], ...]]:
    return {settings.topic(name): classes for name, classes in AUDIT_TOPICS.items()}


class FastDecoder:
    """Decodes audit records with the fast decoder, and with the models whatever it leaves.

    Given a table (and partition), a record whose key names another table (or partition) is skipped
    unread: the key of every event is its table and partition, and a vacuum's events all carry its
    table's key. A record whose key is not a table's key is decoded as usual.
    """

    def __init__(self, settings: Settings, *, table: str | None = None, partition: str | None = None) -> None:
        self._settings = settings
        self._expected = _expected_classes(settings)
        self._decoders = {
            topic: decoders_for({cls.event_type: cls.__name__ for cls in classes})
            for topic, classes in self._expected.items()
        }
        self._table = None if table is None else table.encode()
        self._partition = partition
        self._valid_keys: set[str] = set()
        self.fallbacks = 0
        self.skipped = 0

    def records(self, records: Iterable[RawRecord]) -> Iterator[Event | WireEvent]:
        """Events of records already read (tests, and any caller that holds RawRecords)."""
        for record in records:
            members, carry = bundle_members(record)
            for member in members:
                event = self._event(member)
                if event is not None:
                    yield event if carry is None else carry.applied(event)

    def messages(self, batches: Iterable[Sequence[MessageLike]]) -> Iterator[Event | WireEvent]:
        """Events of batches of consumed ``confluent_kafka.Message`` objects."""
        # The loop of _event, inlined: it runs once per record, and a call costs as much as a check.
        table, decoders_of, valid_keys = self._table, self._decoders, self._valid_keys
        for batch in batches:
            for message in batch:
                key = message.key()
                if key is not None and key.endswith(_BUNDLE_KEY_END):  # type: ignore[arg-type]
                    yield from self.records((raw_record(message),))
                    continue
                if table is not None and self._other_table(key):  # type: ignore[arg-type]
                    self.skipped += 1
                    continue
                decoders = decoders_of.get(message.topic() or "")
                event = None
                if decoders is not None:
                    value, headers = message.value(), message.headers()
                    event = fast_decode(key, value, headers, decoders, valid_keys)  # type: ignore[arg-type]
                yield event if event is not None else self._validated(raw_record(message))

    def _event(self, record: RawRecord) -> Event | WireEvent | None:
        key = record.key
        if self._table is not None and self._other_table(key):
            self.skipped += 1
            return None
        decoders = self._decoders.get(record.topic)
        if decoders is not None:
            event = fast_decode(key, record.value, record.headers, decoders, self._valid_keys)
            if event is not None:
                return event
        return self._validated(record)

    def _validated(self, record: RawRecord) -> Event:
        """The record decoded by the event models, as :func:`decode_records` decodes it."""
        self.fallbacks += 1
        return decode(
            record,
            rejected_by=READER_ID,
            tenant=self._settings.tenant,
            expected=self._expected.get(record.topic),
            now=partial(_record_time, record),
        )

    def _other_table(self, key: bytes | None) -> bool:
        """The key names a table (and partition) other than the one asked for."""
        if key is None:
            return False
        parts = key.split(b"/", 2)
        if len(parts) < 2 or not _TABLE_KEY.fullmatch(parts[1]):
            return False
        if parts[1] != self._table:
            return True
        if self._partition is None:
            return False
        if len(parts) < 3:
            return True
        try:
            partition = parts[2].decode("utf-8")
        except UnicodeDecodeError:
            return False
        return _PARTITION_KEY.fullmatch(partition) is not None and not may_be_same_partition(partition, self._partition)
