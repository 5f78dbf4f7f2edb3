"""Publish ``VacuumCommitted`` and wait for the broker, or keep it in the outbox.

The event is built in two steps: a *draft* (everything the vacuum knows before its rename) and the
lock snapshot taken after the rename. :func:`publish_committed` returns once Kafka acknowledged the
event; when it cannot, the event stays in the :class:`~acidclean.producers.outbox.Outbox` and the
outcome says so: the compaction itself has succeeded either way.
"""

from __future__ import annotations

import enum
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from acidclean.producers.commit import SET_ASIDE_MARKER, read_marker
from acidclean.producers.locks import lock_snapshot
from acidclean.producers.outbox import DRAFT, Outbox, OutboxEntry
from acidclean.producers.table_identity import confirmed_identity
from acidclean.schemas.common import utc_now
from acidclean.schemas.events import VacuumCommitted
from acidclean.shared.acid.write_ids import ValidTxnList
from acidclean.shared.bus.producer import KafkaEventBus
from acidclean.shared.bus.protocol import Delivery, EventBus
from acidclean.shared.bus.topics import ensure_topics
from acidclean.shared.errors import AcidCleanError
from acidclean.shared.location_sharing import resolve_sharers
from acidclean.shared.metastore import Metastore, split_table_name
from acidclean.shared.settings import Settings
from acidclean.shared.storage import ArrowFileSystem, open_location
from acidclean.shared.vacuum_marker import VACUUM_MARKER, MarkerError, VacuumMarker

LOGGER = logging.getLogger(__name__)

_EVENT_FIELDS = (
    "tenant",
    "table",
    "partition",
    "location",
    "compaction_type",
    "new_directories",
    "obsolete_directories",
    "highest_write_id",
    "vacuum_job_id",
)


def complete_event(draft: dict[str, Any], metastore: Metastore) -> VacuumCommitted:
    """The event of a committed vacuum: its draft plus the locks held now, on its own name and on every
    other name of its directory (rule 8), resolved after the rename like the locks."""
    db, table = split_table_name(draft["table"])
    sharers = resolve_sharers(metastore, db, table, draft["partition"], draft["location"])
    snapshot = lock_snapshot(metastore, db, table, draft["partition"], sharers)
    request_id = draft.get("request_id")
    return VacuumCommitted(
        event_id=uuid.UUID(draft["event_id"]),
        occurred_at=utc_now(),
        lock_snapshot=snapshot,
        locks_observed=len(snapshot),
        # Read after the rename: every transaction below it may have listed before the commit.
        next_txn_id=ValidTxnList.from_string(metastore.valid_txn_list()).high_watermark + 1,
        request_id=uuid.UUID(request_id) if request_id else None,
        overlapping_directories=draft.get("overlapping_directories", []),
        shared_locations=list(sharers) or None,
        table_identity=confirmed_identity(metastore, draft),  # read again after the commit (rule 9)
        **{name: draft[name] for name in _EVENT_FIELDS},
    )


class Publisher:
    """Publishes vacuum events to the settings' topic, creating it first if need be."""

    def __init__(self, settings: Settings, bus: EventBus | None = None, *, timeout_s: float = 30.0) -> None:
        self.settings = settings
        self.topic = settings.topic("vacuum_committed")
        self._bus = bus
        self._timeout_s = timeout_s
        self._topic_ready = bus is not None  # an injected bus needs no topic creation
        self._connecting = threading.Lock()

    def connect(self) -> EventBus:
        """Create the topic if need be and start the producer. A new producer takes about half a
        second to its first acknowledgement (connection, producer id, metadata), so a vacuum calls
        this on a thread while it compacts and its publish does not wait for that. Idempotent."""
        with self._connecting:
            if not self._topic_ready:
                ensure_topics(self.settings, ["vacuum_committed"], timeout_s=self._timeout_s)
                self._topic_ready = True
            if self._bus is None:
                self._bus = KafkaEventBus(
                    self.settings.kafka,
                    source="/acidclean/vacuum",
                    delivery_timeout_s=self._timeout_s,
                    total_timeout_s=self._timeout_s,
                )
            return self._bus

    def publish(self, event: VacuumCommitted) -> Delivery:
        return self.connect().publish(self.topic, event)


@dataclass(frozen=True)
class PublishOutcome:
    event: VacuumCommitted
    delivery: Delivery | None
    error: str | None = None
    outbox_path: str | None = None

    @property
    def published(self) -> bool:
        return self.delivery is not None


def publish_committed(
    draft: dict[str, Any], event: VacuumCommitted, publisher: Publisher, outbox: Outbox
) -> PublishOutcome:
    """Publish and wait for the acknowledgement; on failure keep the complete event in the outbox."""
    try:
        delivery = publisher.publish(event)
    except AcidCleanError as error:
        path = outbox.save_event(draft, event, last_error=str(error))
        return PublishOutcome(event, None, str(error), str(path))
    outbox.remove(event.event_id)
    return PublishOutcome(event, delivery)


@dataclass
class FlushReport:
    published: list[PublishOutcome] = field(default_factory=list)
    failed: list[PublishOutcome] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # drafts of vacuums that never committed
    waiting: list[str] = field(default_factory=list)  # drafts whose commit is not decided yet (see DraftState.OPEN)
    skipped: list[str] = field(default_factory=list)  # entries that could not be handled now, each logged once


def _is_own_output(draft: dict[str, Any], location_child: str, fs: ArrowFileSystem) -> bool:
    """The directory exists and is this vacuum's: its vacuum marker names the draft's event (a
    directory without a marker, written before markers existed, counts by its name alone)."""
    if not fs.exists(location_child):
        return False
    try:
        with fs.arrow.open_input_stream(f"{location_child}/{VACUUM_MARKER}") as stream:
            marker = VacuumMarker.parse(stream.read())
    except (OSError, MarkerError):
        return True
    return marker.event_id == str(draft["event_id"])


def _committed(draft: dict[str, Any]) -> bool:
    location = open_location(draft["location"])
    return all(_is_own_output(draft, location.child(name), location.fs) for name in draft["new_directories"])


class DraftState(str, enum.Enum):
    COMMITTED = "committed"
    NEVER = "never"  # the vacuum did not commit and never will: drop the draft
    OPEN = "open"  # not decided yet (a transaction still open, a commit marker to finish): ask again later


def _finish_draft(entry: OutboxEntry, metastore: Metastore) -> DraftState:
    """Whether a draft's vacuum committed. A rename whose staging directory still holds its commit
    marker is left to the next vacuum of that table, which finishes (or sets aside) it under the
    table's vacuum lock: finishing it here, without the lock, could commit it over another vacuum's
    output. A visibility-txn vacuum is decided by its transaction."""
    txn_id = entry.draft.get("visibility_txn_id")
    if isinstance(txn_id, int):
        txns = ValidTxnList.from_string(metastore.valid_txn_list())
        if txns.is_txn_valid(txn_id):
            return DraftState.COMMITTED if _committed(entry.draft) else DraftState.NEVER
        return DraftState.NEVER if txns.is_txn_aborted(txn_id) else DraftState.OPEN
    location = open_location(entry.draft["location"])
    staging = entry.draft.get("staging_dir")
    if staging and read_marker(location.fs.arrow, location.child(staging)) is not None:
        return DraftState.OPEN
    if staging and location.fs.exists(f"{location.child(staging)}/{SET_ASIDE_MARKER}"):
        return DraftState.NEVER  # set aside before any rename: fenced, collided or overtaken
    return DraftState.COMMITTED if _committed(entry.draft) else DraftState.NEVER


def flush_outbox(
    outbox: Outbox,
    metastore: Metastore,
    publisher: Publisher,
    on_outcome: Callable[[PublishOutcome], None] | None = None,
) -> FlushReport:
    """Publish every event left in the outbox (see the module docstring of :mod:`.outbox`). An entry
    that cannot be handled now (its storage or metastore answers an error) is skipped with one log
    line and tried again next time: one table's leftover never stops the vacuum of another."""
    report = FlushReport()
    for entry in outbox.entries():
        try:
            outcome = _flush_entry(entry, outbox, metastore, publisher, report)
        except (AcidCleanError, OSError, KeyError, ValueError) as error:
            LOGGER.warning("outbox entry %s (%s) left for later: %s", entry.path, entry.draft.get("table", "?"), error)
            report.skipped.append(entry.event_id)
            continue
        if outcome is None:
            continue
        (report.published if outcome.published else report.failed).append(outcome)
        if on_outcome is not None:
            on_outcome(outcome)
    return report


def _flush_entry(
    entry: OutboxEntry, outbox: Outbox, metastore: Metastore, publisher: Publisher, report: FlushReport
) -> PublishOutcome | None:
    event = entry.event
    if entry.state == DRAFT or event is None:
        state = _finish_draft(entry, metastore)
        if state is DraftState.OPEN:
            report.waiting.append(entry.event_id)
            return None
        if state is DraftState.NEVER:
            outbox.remove(entry.event_id)
            report.dropped.append(entry.event_id)
            return None
        event = complete_event(entry.draft, metastore)
        outbox.save_event(entry.draft, event)
    return publish_committed(entry.draft, event, publisher, outbox)
