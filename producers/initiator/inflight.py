"""Which tables and partitions have a vacuum in flight, folded from the topics (pure, no I/O).

A request is in flight from its ``VacuumRequested`` until its ``VacuumFailed``, or until the
``CleanupDone`` (or ``CleanupRejected``) of the ``VacuumCommitted`` that names it in ``request_id``.
A vacuum committed without a request (run by hand) holds its key the same way until it is cleaned:
Hive's Initiator does not queue a compaction of a partition still being compacted either.

The topics are read side by side, so a vacuum's cleanup may be read before the vacuum, or a vacuum
before its request: what ended is remembered by id, and an event that arrives after its end opens
nothing. Folding the same event twice changes nothing (at-least-once delivery).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from acidclean.schemas.events import (
    CleanupDone,
    CleanupRejected,
    VacuumCommitted,
    VacuumFailed,
    VacuumRequested,
)


@dataclass
class _Key:
    requests: dict[uuid.UUID, VacuumRequested | None] = field(default_factory=dict)  # open ones
    vacuums: dict[uuid.UUID, uuid.UUID | None] = field(default_factory=dict)  # uncleaned: vacuum id -> request id


class InFlight:
    """The in-flight fold of the request, vacuum, done and dead-letter topics, per event key."""

    def __init__(self) -> None:
        self._keys: dict[str, _Key] = {}
        self._ended_requests: set[uuid.UUID] = set()
        self._ended_vacuums: set[uuid.UUID] = set()
        self._vacuum_request: dict[uuid.UUID, uuid.UUID] = {}  # every vacuum id seen -> its request id
        self._vacuum_key: dict[uuid.UUID, str] = {}

    def apply(self, event: object) -> None:
        """Fold one event of any type (events that say nothing about vacuums are ignored)."""
        if isinstance(event, VacuumRequested):
            if event.event_id not in self._ended_requests:
                self._entry(event.key).requests[event.event_id] = event
        elif isinstance(event, VacuumFailed):
            if event.correlation_id is not None:
                self._end_request(event.key, event.correlation_id)
        elif isinstance(event, VacuumCommitted):
            self._vacuum_key[event.event_id] = event.key
            if event.request_id is not None:
                self._vacuum_request[event.event_id] = event.request_id
            if event.event_id in self._ended_vacuums:
                if event.request_id is not None:
                    self._end_request(event.key, event.request_id)
            else:
                self._entry(event.key).vacuums[event.event_id] = event.request_id
        elif isinstance(event, CleanupDone | CleanupRejected) and event.correlation_id is not None:
            if isinstance(event, CleanupRejected) and event.correlation_id in self.open_requests(event.key):
                self._end_request(event.key, event.correlation_id)  # the request itself was dead-lettered
            else:
                self._end_vacuum(event.correlation_id)

    def in_flight(self, key: str) -> bool:
        """Whether a request or an uncleaned vacuum holds ``key``."""
        entry = self._keys.get(key)
        return entry is not None and bool(entry.requests or entry.vacuums)

    def open_requests(self, key: str) -> list[uuid.UUID]:
        """The ids of the requests of ``key`` still in flight."""
        entry = self._keys.get(key)
        return list(entry.requests) if entry is not None else []

    def keys_in_flight(self) -> list[str]:
        return [key for key in self._keys if self.in_flight(key)]

    def _entry(self, key: str) -> _Key:
        return self._keys.setdefault(key, _Key())

    def _end_request(self, key: str, request_id: uuid.UUID) -> None:
        self._ended_requests.add(request_id)
        entry = self._keys.get(key)
        if entry is not None:
            entry.requests.pop(request_id, None)
            self._forget_if_empty(key, entry)

    def _end_vacuum(self, vacuum_id: uuid.UUID) -> None:
        self._ended_vacuums.add(vacuum_id)
        key = self._vacuum_key.get(vacuum_id)
        request_id = self._vacuum_request.get(vacuum_id)
        if key is None:
            return  # the vacuum is not read yet: when it is, it finds itself ended
        entry = self._keys.get(key)
        if entry is not None:
            entry.vacuums.pop(vacuum_id, None)
        if request_id is not None:
            self._end_request(key, request_id)
        elif entry is not None:
            self._forget_if_empty(key, entry)

    def _forget_if_empty(self, key: str, entry: _Key) -> None:
        if not entry.requests and not entry.vacuums:
            self._keys.pop(key, None)
