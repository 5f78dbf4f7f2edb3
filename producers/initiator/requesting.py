"""The initiator's request: a ``VacuumRequested`` with the figures and thresholds that decided it,
published and acknowledged before the key counts as requested, then counted and logged."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime

from acidclean.producers.initiator.core import InitiatorCore
from acidclean.producers.initiator.metrics import InitiatorMetrics
from acidclean.producers.initiator.rules import Decision, Thresholds
from acidclean.schemas.common import utc_now
from acidclean.schemas.events import RequestedBy, VacuumFigures, VacuumRequested, VacuumThresholds
from acidclean.shared.logs import log as log_fields

log = logging.getLogger("acidclean.initiator")


class Requester:
    """Publishes the requests of one initiator."""

    def __init__(
        self,
        tenant: str,
        initiator_id: str,
        core: InitiatorCore,
        metrics: InitiatorMetrics,
        publish: Callable[[VacuumRequested], VacuumRequested | None],
        first_seen: Mapping[str, datetime],
    ) -> None:
        self._tenant = tenant
        self._initiator_id = initiator_id
        self._core = core
        self._metrics = metrics
        self._publish = publish  # returns once the broker acknowledged; None: Hive's queue serves the key
        self._first_seen = first_seen  # a key's oldest unanswered commit, for the latency

    def request(
        self,
        key: str,
        table: str,
        partition: str | None,
        location: str,
        decision: Decision,
        thresholds: Thresholds,
        trigger: str,
    ) -> None:
        known = self._core.figures[key].figures
        now = utc_now()
        request = VacuumRequested(
            tenant=self._tenant,
            table=table,
            partition=partition,
            occurred_at=now,
            location=location,
            compaction_type=decision.compaction_type,
            reason=decision.reason,
            figures=VacuumFigures(
                delta_count=known.delta_count,
                delete_delta_count=known.delete_delta_count,
                delta_bytes=known.delta_bytes,
                base_bytes=known.base_bytes,
                aborted_txns=known.aborted_txns,
            ),
            thresholds=VacuumThresholds(
                delta_num=thresholds.delta_num, delta_pct=thresholds.delta_pct, aborted_txns=thresholds.aborted_txns
            ),
            requested_by=RequestedBy(
                initiator_id=self._initiator_id, trigger="sweep" if trigger == "sweep" else "event"
            ),
            requested_at=now,
        )
        published = self._publish(request)
        if published is None:
            return  # Hive's compaction queue holds an entry of this key: it serves it (issue 53)
        request = published
        self._core.observe_lifecycle(request)
        self._metrics.requests.labels(trigger, decision.compaction_type).inc()
        first = self._first_seen.get(key)
        if first is not None:
            self._metrics.latency.observe(max(0.0, (now - first).total_seconds()))
        log_fields(
            log,
            logging.INFO,
            "vacuum requested",
            event_id=str(request.event_id),
            table=table,
            partition=partition,
            compaction_type=decision.compaction_type,
            reason=decision.reason,
            trigger=trigger,
        )
