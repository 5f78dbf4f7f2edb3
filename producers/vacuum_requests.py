"""What the vacuum service does with one ``VacuumRequested``: answer it exactly once, safely.

A request is answered by ``VacuumCommitted`` (its ``request_id`` names the request) or by
``VacuumFailed`` (``reason_code`` and a one-line message); ``VacuumStarted`` says a service took it
up. Delivery is at least once, so the same request may arrive again after a crash or a rebalance,
perhaps while the first run is still going on another host. Before it runs anything the handler
therefore looks for an answer: in the outbox (a committed vacuum whose event is not published yet:
published now) and on the topics (``VacuumCommitted`` with this ``request_id``, ``VacuumFailed`` of
this request), from a little before the request was made. A request already answered is not run
again. The vacuum itself takes the metastore's one-vacuum-at-a-time lock (:mod:`.exclusion`): a
request whose key is held by another vacuum (a run the crash left behind, or a duplicate on another
host) waits and looks for an answer again instead of failing, so it is neither lost nor run twice.

Failures that end a request: ``nothing_to_vacuum`` (not an error: nothing to compact, or the range is
already compacted), ``table_gone`` (dropped table or partition), ``refused`` (any other refusal, e.g.
Hive's compactor holds the partition) and ``error`` (the vacuum failed; the table is unchanged).
A metastore that does not answer is retried a few times first.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acidclean.producers.outbox import Outbox, OutboxEntry
from acidclean.producers.plan import CompactionType
from acidclean.producers.publish import Publisher, flush_outbox
from acidclean.producers.vacuum import VacuumRequest, VacuumResult, run_vacuum
from acidclean.schemas.common import derived_event_id, utc_now
from acidclean.schemas.events import (
    VacuumCommitted,
    VacuumFailed,
    VacuumFailureCode,
    VacuumRequested,
    VacuumStarted,
)
from acidclean.shared.bus.codec import decode, fit
from acidclean.shared.bus.protocol import EventBus
from acidclean.shared.bus.reader import LogReader
from acidclean.shared.bus.records import raw_record
from acidclean.shared.errors import (
    BusError,
    MetastoreError,
    NothingToCompactError,
    TableNotFoundError,
    VacuumBusyError,
    VacuumRefusedError,
)
from acidclean.shared.logs import log
from acidclean.shared.metastore import Metastore
from acidclean.shared.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOGGER = logging.getLogger("acidclean.vacuum_service")
# How far before a request's time its answer is looked for: hosts' clocks may disagree a little.
LOOKBACK_MS = 10 * 60 * 1000
METASTORE_TRIES = 4


@dataclass(frozen=True)
class Handled:
    """How a request ended here. ``outcome``: ``committed``, ``failed``, ``answered`` (an earlier run
    answered it: nothing was run), or ``abandoned`` (the service is stopping: not answered, so its
    offset is not committed and the group runs it again)."""

    outcome: str
    reason_code: str | None = None
    message: str | None = None
    vacuum_id: uuid.UUID | None = None

    @property
    def answered(self) -> bool:
        return self.outcome != "abandoned"


class ServiceOutbox(Outbox):
    """The outbox shared by the service's threads. A thread's flush must never take the draft of a
    vacuum another thread is committing right now (it would find the new directory missing and drop
    the draft): drafts saved by a running vacuum are hidden from every flush until that vacuum ends."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self._running: set[str] = set()
        self._guard = threading.Lock()
        self._local = threading.local()

    def save_draft(self, draft: dict[str, Any]) -> Path:
        owned: list[str] | None = getattr(self._local, "owned", None)
        if owned is not None:
            owned.append(str(draft["event_id"]))
            with self._guard:
                self._running.add(str(draft["event_id"]))
        return super().save_draft(draft)

    @contextmanager
    def running(self) -> Iterator[None]:
        """Hide the drafts this thread saves inside the block from every flush while it runs."""
        self._local.owned = []
        try:
            yield
        finally:
            with self._guard:
                self._running.difference_update(self._local.owned)
            self._local.owned = None

    def entries(self) -> list[OutboxEntry]:
        with self._guard:
            running = set(self._running)
        return [entry for entry in super().entries() if entry.event_id not in running]

    def of_request(self, request_id: uuid.UUID) -> list[OutboxEntry]:
        return [entry for entry in self.entries() if entry.draft.get("request_id") == str(request_id)]


def failure_code(error: VacuumRefusedError) -> VacuumFailureCode:
    """The ``VacuumFailed.reason_code`` of a refusal."""
    if isinstance(error.__cause__, TableNotFoundError):
        return "table_gone"
    if isinstance(error, NothingToCompactError):
        return "nothing_to_vacuum"
    return "refused"


def one_line(text: str) -> str:
    """``text`` as one line that fits ``VacuumFailed.message``."""
    return fit(" ".join(text.split()) or "no message", 4096)


def answer_on_topics(settings: Settings, request: VacuumRequested, *, stall_timeout_s: float = 30.0) -> str | None:
    """``committed`` or ``failed`` when the topics hold an answer to ``request``, else None."""
    since_ms = int(request.requested_at.timestamp() * 1000) - LOOKBACK_MS
    key = request.key.encode()
    topics = [settings.topic("vacuum_committed"), settings.topic("vacuum_requests")]
    for message in LogReader(settings.kafka, topics, since_ms=since_ms, stall_timeout_s=stall_timeout_s):
        if message.key() != key:
            continue
        event = decode(raw_record(message), rejected_by="acidclean-vacuum-service", tenant=settings.tenant)
        if isinstance(event, VacuumCommitted) and event.request_id == request.event_id:
            return "committed"
        if isinstance(event, VacuumFailed) and event.correlation_id == request.event_id:
            return "failed"
    return None


AnswerLookup = Callable[[VacuumRequested], str | None]


class RequestHandler:
    """Answers requests (see the module docstring); one instance serves every worker thread."""

    def __init__(
        self,
        settings: Settings,
        service_id: str,
        *,
        metastore: Callable[[], Metastore],
        bus: Callable[[], EventBus],
        spark: Callable[[], SparkSession],
        outbox: ServiceOutbox,
        stopping: threading.Event,
        retry_s: float = 2.0,
        publish_tries: int | None = None,
        lookup: AnswerLookup | None = None,
        on_vacuum: Callable[[VacuumResult, float], None] = lambda result, seconds: None,
    ) -> None:
        self.settings = settings
        self.service_id = service_id
        self._metastore = metastore
        self._bus = bus
        self._spark = spark
        self.outbox = outbox
        self._stopping = stopping
        self._retry_s = retry_s
        self._publish_tries = publish_tries  # None: retry until the service stops (a one-shot run gives up)
        self._lookup = lookup or (lambda request: answer_on_topics(settings, request))
        self._on_vacuum = on_vacuum
        self._topic = settings.topic("vacuum_requests")

    # -- one request -------------------------------------------------------------------------------

    def handle(self, request: VacuumRequested) -> Handled:
        earlier = self._earlier_answer(request)
        if earlier is not None:
            return earlier
        started = VacuumStarted(
            event_id=derived_event_id(request.event_id, "started"),
            tenant=request.tenant,
            table=request.table,
            partition=request.partition,
            occurred_at=utc_now(),
            causation_id=request.event_id,
            correlation_id=request.event_id,
            vacuum_service_id=self.service_id,
            started_at=utc_now(),
        )
        if not self._publish(started):
            return Handled("abandoned")
        self._log(logging.INFO, "vacuum started", request)
        return self._vacuum(request)

    def _vacuum(self, request: VacuumRequested) -> Handled:
        vacuum_request = VacuumRequest(
            request.table,
            request.partition,
            CompactionType(request.compaction_type),
            request_id=str(request.event_id),
        )
        metastore_failures = 0
        while True:
            began = time.monotonic()
            try:
                with self.outbox.running():
                    result = run_vacuum(
                        vacuum_request,
                        settings=self.settings,
                        metastore=self._metastore(),
                        spark=self._spark,
                        publisher=Publisher(self.settings, self._bus()),
                        outbox=self.outbox,
                    )
            except VacuumBusyError as error:
                # Another vacuum of this key runs (or a dead one's lock is not stale yet): maybe this
                # very request's earlier run. Wait for it instead of failing or running twice.
                self._log(logging.INFO, f"waiting: {error}", request)
                if not self._pause():
                    return Handled("abandoned")
                earlier = self._earlier_answer(request)
                if earlier is not None:
                    return earlier
                continue
            except VacuumRefusedError as error:
                earlier = self._earlier_answer(request)  # e.g. this request's own commit awaits its cleanup
                return earlier or self._fail(request, failure_code(error), str(error))
            except MetastoreError as error:
                metastore_failures += 1
                if metastore_failures >= METASTORE_TRIES:
                    return self._fail(request, "error", str(error))
                self._log(
                    logging.WARNING, f"metastore call failed (try {metastore_failures}), retrying: {error}", request
                )
                if not self._pause(metastore_failures):
                    return Handled("abandoned")
                continue
            except Exception as error:  # the vacuum failed: its request ends, the table is unchanged
                LOGGER.debug("vacuum failed", exc_info=True)
                return self._fail(request, "error", f"{type(error).__name__}: {error}")
            self._on_vacuum(result, time.monotonic() - began)
            return self._result(request, result)

    def _result(self, request: VacuumRequested, result: VacuumResult) -> Handled:
        if result.status == "committed":
            assert result.publish is not None
            vacuum_id = result.publish.event.event_id
            if not result.publish.published:
                why = result.publish.error
                self._log(
                    logging.WARNING,
                    f"VacuumCommitted not acknowledged, kept in the outbox: {why}",
                    request,
                    vacuum_id=str(vacuum_id),
                )
            if result.publish.published or self._publish_outbox(request) == "published":
                self._log(logging.INFO, "vacuum committed", request, vacuum_id=str(vacuum_id))
                return Handled("committed", vacuum_id=vacuum_id)
            return Handled("abandoned")  # kept in the outbox: the next delivery publishes it
        ours = [o for o in result.earlier if o.published and o.event.request_id == request.event_id]
        if ours:  # a crash left this request's vacuum committed; it is published now
            return Handled("committed", vacuum_id=ours[0].event.event_id)
        where = ", ".join(result.new_directories)
        return self._fail(request, "nothing_to_vacuum", f"already compacted: {where} exist(s)")

    # -- answers and events ------------------------------------------------------------------------

    def _earlier_answer(self, request: VacuumRequested) -> Handled | None:
        """How an earlier delivery answered ``request``, if it did (the outbox first, then the topics)."""
        if self.outbox.of_request(request.event_id):
            state = self._publish_outbox(request)
            if state is None:
                return Handled("abandoned")
            if state == "published":
                return Handled("answered", message="its vacuum had committed; published from the outbox")
        found = self._lookup(request)
        if found is None:
            return None
        self._log(logging.INFO, f"already answered ({found}): not run again", request)
        return Handled("answered", message=f"already {found}")

    def _publish_outbox(self, request: VacuumRequested) -> str | None:
        """Publish what the outbox holds for ``request``: ``published``, ``dropped`` (a draft of a vacuum
        that never committed), or None when the service stops first (it stays in the outbox)."""
        tries = 0
        while True:
            tries += 1
            mine = {entry.event_id for entry in self.outbox.of_request(request.event_id)}
            if not mine:
                return "published"
            try:
                report = flush_outbox(self.outbox, self._metastore(), Publisher(self.settings, self._bus()))
                if mine <= set(report.dropped):
                    return "dropped"
            except (MetastoreError, BusError) as error:
                self._log(logging.WARNING, f"outbox flush failed, retrying: {error}", request)
            if not self.outbox.of_request(request.event_id):
                return "published"
            if not self._pause_publishing(tries):
                return None

    def _fail(self, request: VacuumRequested, code: VacuumFailureCode, message: str) -> Handled:
        text = one_line(message)
        failed = VacuumFailed(
            event_id=derived_event_id(request.event_id, "failed"),
            tenant=request.tenant,
            table=request.table,
            partition=request.partition,
            occurred_at=utc_now(),
            causation_id=request.event_id,
            correlation_id=request.event_id,
            reason_code=code,
            message=text,
            failed_at=utc_now(),
        )
        if not self._publish(failed):
            return Handled("abandoned")
        self._log(logging.WARNING if code == "error" else logging.INFO, f"vacuum failed ({code}): {text}", request)
        return Handled("failed", code, text)

    def _publish(self, event: VacuumStarted | VacuumFailed) -> bool:
        """Publish on the requests topic until acknowledged; False if the service stops first."""
        tries = 0
        while True:
            try:
                self._bus().publish(self._topic, event)
                return True
            except BusError as error:
                tries += 1
                log(
                    LOGGER,
                    logging.WARNING,
                    f"could not publish {type(event).__name__}, retrying: {error}",
                    event_id=str(event.event_id),
                )
                if not self._pause_publishing(tries):
                    return False

    def _pause_publishing(self, tries: int) -> bool:
        if self._publish_tries is not None and tries >= self._publish_tries:
            return False
        return self._pause(tries)

    def _pause(self, tries: int = 1) -> bool:
        """Wait before retrying; False when the service is stopping meanwhile."""
        return not self._stopping.wait(min(self._retry_s * tries, 30.0))

    def _log(self, level: int, message: str, request: VacuumRequested, **fields: Any) -> None:
        log(
            LOGGER,
            level,
            message,
            request_id=str(request.event_id),
            table=request.table,
            partition=request.partition,
            service_id=self.service_id,
            **fields,
        )
