"""What the event log says about the Hive queue entries acidclean serves, and what each entry's next
state in Hive's queue is. Pure: events in, steps out; no metastore, no Kafka, no clock.

The event log is the source of truth: a queue entry only ever moves to a state the log already
proves (``ready for cleaning`` once the vacuum's ``VacuumCommitted`` is on the log, ``succeeded``
once its ``CleanupDone`` is), so a queue update that is late or retried never gets ahead of the work.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Literal

from acidclean.schemas.common import ACIDCLEAN_NAMESPACE, EventBase
from acidclean.schemas.events import (
    CleanupDone,
    CleanupRejected,
    VacuumCommitted,
    VacuumFailed,
    VacuumRequested,
)

StepName = Literal["mark_compacted", "mark_cleaned", "mark_failed", "mark_refused"]


def request_id_of(tenant: str, compaction_id: int) -> uuid.UUID:
    """The ``VacuumRequested`` id of Hive compaction ``compaction_id`` of ``tenant``'s metastore: the
    same on every replica and after every restart, so the vacuum service answers it once."""
    return uuid.uuid5(ACIDCLEAN_NAMESPACE, f"hive-compaction:{tenant}:{compaction_id}")


@dataclass(frozen=True)
class Step:
    """One queue call: ``message`` for a failure or a refusal, ``highest_write_id`` for ``mark_cleaned``."""

    name: StepName
    message: str | None = None
    highest_write_id: int | None = None


@dataclass(frozen=True)
class EntryProgress:
    """How far the event log has taken the vacuum that serves one Hive queue entry."""

    compaction_id: int
    request_id: uuid.UUID
    vacuum_id: uuid.UUID | None = None
    highest_write_id: int | None = None
    cleaned: bool = False
    failure: tuple[str, str] | None = None  # (reason code, message)


@dataclass
class QueueLog:
    """The fold of the topics: every request that names a Hive compaction, and what followed it."""

    by_compaction: dict[int, EntryProgress] = field(default_factory=dict)
    _compaction_of_request: dict[uuid.UUID, int] = field(default_factory=dict)
    _compaction_of_vacuum: dict[uuid.UUID, int] = field(default_factory=dict)
    # Answers read before their request (topics are read side by side, not in one order).
    _pending: list[EventBase] = field(default_factory=list)

    def fold(self, events: Iterable[EventBase]) -> QueueLog:
        for event in events:
            if isinstance(event, VacuumRequested):
                self._request(event)
            elif not self._apply(event):
                self._pending.append(event)
        # An answer met before its request, or a cleanup before its commit, is applied now.
        while True:
            waiting, self._pending = self._pending, []
            for event in waiting:
                if not self._apply(event):
                    self._pending.append(event)
            if len(self._pending) == len(waiting):
                return self

    def _request(self, request: VacuumRequested) -> None:
        if request.hive_compaction_id is None:
            return
        compaction_id = request.hive_compaction_id
        self._compaction_of_request[request.event_id] = compaction_id
        if compaction_id not in self.by_compaction:
            self.by_compaction[compaction_id] = EntryProgress(compaction_id, request.event_id)

    def _apply(self, event: EventBase) -> bool:
        """Apply an answer; False when what it answers is not known yet."""
        if isinstance(event, VacuumCommitted):
            if event.request_id is None:
                return True
            compaction_id = self._compaction_of_request.get(event.request_id)
            if compaction_id is None:
                return False
            self._compaction_of_vacuum[event.event_id] = compaction_id
            self._update(compaction_id, vacuum_id=event.event_id, highest_write_id=event.highest_write_id)
            return True
        if isinstance(event, VacuumFailed):
            compaction_id = self._compaction_of_request.get(event.correlation_id)
            if compaction_id is None:
                return False
            self._update(compaction_id, failure=(event.reason_code, event.message))
            return True
        if isinstance(event, CleanupDone | CleanupRejected):
            if event.correlation_id is None:
                return True
            compaction_id = self._compaction_of_vacuum.get(event.correlation_id)
            if compaction_id is None:
                return False
            if isinstance(event, CleanupDone):
                self._update(compaction_id, cleaned=not event.dry_run)
            else:
                self._update(compaction_id, failure=("cleanup_rejected", f"cleanup refused: {event.reason}"))
            return True
        return True  # nothing the queue follows

    def _update(self, compaction_id: int, **changes: object) -> None:
        self.by_compaction[compaction_id] = replace(self.by_compaction[compaction_id], **changes)  # type: ignore[arg-type]


def next_steps(progress: EntryProgress | None, state: str) -> list[Step]:
    """The queue calls that bring an entry in Hive state ``state`` to what the log proves."""
    if progress is None or state not in ("working", "ready for cleaning"):
        return []  # not acidclean's, or Hive's history already has it
    if progress.failure is not None:
        code, message = progress.failure
        if code == "nothing_to_vacuum" and state == "working":
            return [Step("mark_refused", message=f"acidclean: {message}")]
        return [Step("mark_failed", message=f"acidclean {code}: {message}")]
    steps = []
    if progress.vacuum_id is not None and state == "working":
        steps.append(Step("mark_compacted"))
    if progress.cleaned:
        steps.append(Step("mark_cleaned", highest_write_id=progress.highest_write_id))
    return steps
