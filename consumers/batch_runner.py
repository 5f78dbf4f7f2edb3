"""The cleaner's workers: each runs one batch of lanes (tables) on a worker thread, with one lock check
for all of them, one announcement per round of cleanups and one publish of all outcomes (on the ack
executor when there is one), and reports each record finished to the loop through a queue. A record's
handling is tried ``error_tries`` times, then dead-lettered; a ``BusError`` (outcome not acknowledged)
rewinds its partition.
"""

from __future__ import annotations

import logging
import queue
import time
import traceback
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Protocol

from acidclean.consumers.bundles import WaitingBundle
from acidclean.consumers.handler import CleanupHandler
from acidclean.consumers.logs import log
from acidclean.consumers.metrics import CleanerMetrics
from acidclean.consumers.partition_state import PartitionState
from acidclean.consumers.waiting import WaitingGroup
from acidclean.consumers.work import Outcome, Work
from acidclean.schemas.events import DelayEnvelope, VacuumCommitted
from acidclean.shared.bus.codec import reject
from acidclean.shared.bus.partitions import OwnedPartitions
from acidclean.shared.errors import BusError

LOGGER = logging.getLogger("acidclean.cleaner")
LATE_MS = 100  # re-checks later than this are logged (DEBUG) with where the time went


class RunnerConfig(Protocol):
    """The loop's settings the workers read."""

    @property
    def tenant(self) -> str: ...

    @property
    def cleaner_id(self) -> str: ...

    @property
    def interval_ms(self) -> int: ...

    @property
    def error_tries(self) -> int: ...

    @property
    def error_pause_ms(self) -> int: ...


class MillisClock(Protocol):
    def now_ms(self) -> int: ...


@dataclass(frozen=True)
class Finished:
    work: Work
    outcome: Outcome | None  # None: abandoned (partition revoked or rewound before it started)
    error: BaseException | None = None


@dataclass(frozen=True)
class LaneFree:
    lane: str


@dataclass(frozen=True)
class BatchFree:
    """A worker finished its batch (after every lane of it was freed)."""


class BatchRunner:
    """Runs batches of lanes on worker threads; what finished goes to ``finished``. Thread-safe."""

    def __init__(
        self,
        handler: CleanupHandler,
        config: RunnerConfig,
        partitions: OwnedPartitions[PartitionState],
        finished: queue.Queue[Finished | LaneFree | BatchFree],
        *,
        metrics: CleanerMetrics,
        clock: MillisClock,
        ack_executor: Executor | None,
    ) -> None:
        self._handler = handler
        self._config = config
        self._partitions = partitions
        self._finished = finished
        self._metrics = metrics
        self._clock = clock
        # Where a batch's outcomes are published and their acknowledgements awaited (None: by the worker
        # that checked them). Waiting there held a worker 15-95 ms a batch at 100,000 parked vacuums.
        self._ack_executor = ack_executor

    def run_batch(self, lanes: Sequence[tuple[str, Sequence[Work]]]) -> None:
        """Worker thread: handle a batch of lanes, each lane's events in order, with one metastore check
        for all of them, one announcement per round of cleanups and one publish of all outcomes. With
        an ``ack_executor`` the publish and its wait run there: the worker is free for the next batch
        while the broker acknowledges (its lanes stay busy until then, so a table's records still go
        one after another)."""
        handed_on = False
        try:
            handed_on = self._run_lanes(lanes)
        finally:
            if not handed_on:
                self._free(lanes)
            self._finished.put(BatchFree())

    def _free(self, lanes: Sequence[tuple[str, Sequence[Work]]]) -> None:
        for name, _ in lanes:
            self._finished.put(LaneFree(name))

    def _run_lanes(self, lanes: Sequence[tuple[str, Sequence[Work]]]) -> bool:
        """Check the lanes' events; True when their outcomes' publish was handed to the ack executor
        (which then frees the lanes), False when it was done here."""
        deferred: list[tuple[Work, Outcome]] = []
        read_by = max(
            (_read_by_ms(work, self._handler) for _, works in lanes for work in _answered(works, self._handler)),
            default=0,
        )
        batch = self._handler.batch(len(lanes), read_by)
        try:
            queues = [(list(works), self._handler.lock_check(works[0], batch)) for _, works in lanes if works]
            try:
                self._handler.prefetch(batch, [(works[0], locks) for works, locks in queues])
            except Exception as error:  # only a saving: each table then asks for itself and meets the error there
                log(LOGGER, logging.WARNING, f"asking for the batch's tables together failed: {error!r}")
            while any(works for works, _ in queues):
                prepared: list[tuple[Work, Outcome]] = []
                for works, locks in queues:
                    if works:
                        self._run_one(works.pop(0), locks, deferred, prepared)
                if prepared:
                    self._run_prepared(batch, prepared, deferred)
        except BaseException:
            self._settle(batch, deferred)
            raise
        if deferred and self._ack_executor is not None:
            try:
                self._ack_executor.submit(self._settle_and_free, batch, deferred, lanes)
                return True
            except RuntimeError:  # the ack executor is shut down (the process is stopping): publish here
                pass
        self._settle(batch, deferred)
        return False

    def _settle(self, batch: Any, deferred: list[tuple[Work, Outcome]]) -> None:
        try:
            self._flush(batch, deferred)
        finally:
            batch.close()

    def _settle_and_free(
        self, batch: Any, deferred: list[tuple[Work, Outcome]], lanes: Sequence[tuple[str, Sequence[Work]]]
    ) -> None:
        """Ack executor: publish a batch's outcomes, wait for the broker, then free its lanes."""
        try:
            self._settle(batch, deferred)
        finally:
            self._free(lanes)

    def _run_one(
        self, work: Work, locks: Any, deferred: list[tuple[Work, Outcome]], prepared: list[tuple[Work, Outcome]]
    ) -> None:
        if not self._begin(work):
            self._finished.put(Finished(work, None))
            return
        if work.due_ms:
            # Lateness is measured when the re-check really starts, queueing included.
            started = self._clock.now_ms()
            self._metrics.lateness_seconds.observe(max(0, started - work.due_ms) / 1000)
            if started - work.due_ms > LATE_MS:
                log(
                    LOGGER,
                    logging.DEBUG,
                    "late re-check",
                    late_ms=started - work.due_ms,
                    read_after_due_ms=work.received_ms - work.due_ms,
                    queued_ms=started - work.received_ms,
                    topic=work.record.topic,
                    partition_number=work.record.partition,
                    offset=work.offset,
                )
        try:
            outcome = self._handle(work, locks)
        except BaseException as error:  # not acknowledged: the loop rewinds the partition
            self._finished.put(Finished(work, None, error))
            self._end(work)
            return
        if outcome.prepared is not None:
            prepared.append((work, outcome))  # still executing until its batch deleted and reported it
        elif outcome.deferred:
            deferred.append((work, outcome))  # still executing until its outcome is acknowledged
        else:
            self._finished.put(Finished(work, outcome))
            self._end(work)

    def _run_prepared(
        self, batch: Any, prepared: list[tuple[Work, Outcome]], deferred: list[tuple[Work, Outcome]]
    ) -> None:
        """Announce and delete this round's planned cleanups; each then waits for the batch's publish."""
        try:
            results = self._handler.run_prepared(batch)
        except BaseException as error:
            results = {id(outcome.prepared): error for _, outcome in prepared}
        for work, outcome in prepared:
            result = results.get(id(outcome.prepared), AssertionError("a prepared cleanup was not run"))
            if isinstance(result, Outcome):
                if result.deferred:
                    deferred.append((work, result))
                    continue
                self._finished.put(Finished(work, result))
            elif isinstance(result, BusError) or not isinstance(result, Exception):
                self._finished.put(Finished(work, None, result))  # not announced: rewind, nothing deleted
            else:
                self._finished.put(self._give_up(work, result, 1))
            self._end(work)

    def _flush(self, batch: Any, deferred: list[tuple[Work, Outcome]]) -> None:
        """Publish the batch's outcomes with one wait; only then are their records finished."""
        try:
            if deferred:
                try:
                    refused = self._handler.flush_batch(batch) or {}
                except Exception as error:
                    if isinstance(error, BusError):
                        for work, _ in deferred:
                            self._finished.put(Finished(work, None, error))
                    else:  # not Kafka's refusal: the batch itself cannot be published, and never will be
                        for work, _ in deferred:
                            self._finished.put(self._give_up(work, error, 1))
                except BaseException as error:
                    for work, _ in deferred:
                        self._finished.put(Finished(work, None, error))
                else:
                    for work, outcome in deferred:
                        failure = refused.get(str(outcome.event.event_id))
                        # Only the refused outcomes' partitions are rewound; the rest of the batch is done.
                        finished = Finished(work, outcome) if failure is None else Finished(work, None, failure)
                        self._finished.put(finished)
        finally:
            for work, _ in deferred:
                self._end(work)

    def _handle(self, work: Work, locks: Any) -> Outcome:
        """The handler's outcome, tried up to ``error_tries`` times; then the dead letter's.

        Raises only a ``BusError`` (or what is not an ``Exception``): the outcome was not acknowledged,
        so the offset must not be committed. Any other error is the event's or the handler's fault:
        repeating it by rewinding the partition would never end (and would handle every later record
        of the partition again), so after the last try the event is dead-lettered and its offset advances.
        """
        tries = max(1, self._config.error_tries)
        for attempt in range(1, tries + 1):
            try:
                return self._handler.handle(work, locks)
            except BusError:
                raise
            except Exception as error:
                self._metrics.handler_errors.inc()
                if attempt == tries:
                    finished = self._give_up(work, error, tries)
                    if finished.error is not None:
                        raise finished.error from error
                    assert finished.outcome is not None
                    return finished.outcome
                log(
                    LOGGER,
                    logging.WARNING,
                    f"handling failed (try {attempt} of {tries}), trying again: {type(error).__name__}: {error}",
                    **_position(work),
                )
                pause_ms = min(self._config.error_pause_ms * 2 ** (attempt - 1), self._config.interval_ms)
                time.sleep(pause_ms / 1000)
        raise AssertionError("unreachable")

    def _give_up(self, work: Work, error: Exception, tries: int) -> Finished:
        """Dead-letter ``work`` for ``error``: finished with the dead letter's outcome, or with the
        ``BusError`` that kept the dead letter from being acknowledged (the partition is rewound)."""
        log(
            LOGGER,
            logging.ERROR,
            f"handling failed {tries} time(s), dead-lettering the event: {type(error).__name__}: {error}",
            **_position(work),
            traceback="".join(traceback.format_exception(error)),
        )
        try:
            return Finished(work, self._handler.dead_letter_error(work, error, tries))
        except BusError as failure:
            return Finished(work, None, failure)
        except Exception as failure:  # not even a dead letter can be built: drop it rather than loop on it
            self._metrics.events.labels("dropped").inc()
            log(
                LOGGER,
                logging.CRITICAL,
                f"could not dead-letter the event ({type(failure).__name__}: {failure}); skipping it, "
                "only this log line records it",
                topic=work.record.topic,
                partition_number=work.record.partition,
                offset=work.offset,
                event_id=getattr(work.event, "event_id", None),
                error=f"{type(error).__name__}: {error}",
            )
            dropped = (
                work.event
                if not isinstance(work.event, WaitingGroup | WaitingBundle)
                else reject(
                    work.record,
                    "other",
                    "could not dead-letter",
                    rejected_by=self._config.cleaner_id,
                    tenant=self._config.tenant,
                )
            )
            return Finished(work, Outcome("dropped", dropped))

    def _begin(self, work: Work) -> bool:
        return self._partitions.begin(work.partition, work.generation)

    def _end(self, work: Work) -> None:
        self._partitions.end(work.partition, work.generation)


def _read_by_ms(work: Work, handler: Any) -> int:
    """After when a lock list must have been asked for to answer ``work``: after its vacuum's lock
    snapshot was taken. For a delay record this process wrote, its own check that wrote it; for
    anything else (whatever its fields say: another host's clock, or a forged record), when this
    loop read it. A bundle's check only ever keeps vacuums waiting (a lock still listed in an older
    list only delays), and what it sends to its tables' lanes carries the bundle's own time
    (``BundleChecker.check_bundle``): any list fresh enough serves it, so a batch of bundles never
    waits for a new ``show_locks``."""
    event = work.event
    if isinstance(event, WaitingBundle):
        return 0
    if isinstance(event, DelayEnvelope | WaitingGroup):
        checked_at: int | None = getattr(handler, "take_checked_at_ms", lambda _: None)(event.event_id)
        if checked_at is not None:
            return min(work.received_ms, checked_at)
    return work.received_ms


def _answered(works: Sequence[Work], handler: Any) -> Sequence[Work]:
    """The works of a lane whose lock list the batch's must be new enough for: all of them, except

    - in a bundle's lane, the fresh vacuums riding with it (``CleanerLoop._spill_joined``): its check
      only ever keeps them waiting (a lock of their snapshot still listed: an older list only delays);
      one that looks ready goes back to its own lane, whose batch asks for a list made after it was
      read. Counted, every batch of a bundle with riders waited for a new unfiltered ``show_locks``
      (400 ms at 10,000 locks, the worker's other tables behind it), which held a burst's take-in to
      about 150 fresh vacuums a second;
    - a fresh vacuum that the newest lock list keeps waiting (a lock of its snapshot listed): an older
      list can only answer it "wait" too, and a "ready" is asked again from newer lists by its own check
      (``TableLockCheck.readiness``). A burst of vacuums behind held locks otherwise made nearly every
      batch ask for a list of its own."""
    if works and isinstance(works[0].event, WaitingBundle):
        return works[:1]
    kept_waiting = getattr(handler, "kept_waiting_by_last_list", None)
    if kept_waiting is None:
        return works
    # Only a fresh vacuum: its own check asks a "ready" again from lists asked after it was read
    # (``TableLockCheck.readiness``); a delay record's check relies on the batch's lists for that.
    return [work for work in works if not (isinstance(work.event, VacuumCommitted) and kept_waiting(work))]


def _position(work: Work) -> dict[str, Any]:
    """Where a work item came from, for its log lines."""
    return {
        "topic": work.record.topic,
        "partition_number": work.record.partition,
        "offset": work.offset,
        "event_id": getattr(work.event, "event_id", None),
    }
