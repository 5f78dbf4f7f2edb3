"""How the cleaner's loop turns a consumed record into a :class:`acidclean.consumers.work.Work`: its
event (delay records read without the event models where they can be: groups, envelopes, bundles)
and its due time (checked, and clamped to one interval ahead if further: clock skew or a bad record).
The work's kind is decided here, once (:class:`acidclean.consumers.work.WorkKind`).
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any, Protocol

from acidclean.consumers.bundles import WaitingBundle, read_bundle
from acidclean.consumers.logs import log
from acidclean.consumers.metrics import CleanerMetrics
from acidclean.consumers.scheduling import clamp_due_ms, due_time_problem
from acidclean.consumers.waiting import WaitingGroup, group_of_model, read_envelope, read_group
from acidclean.consumers.work import Work
from acidclean.schemas.events import CleanupRejected, DelayedVacuums, DelayEnvelope, VacuumCommitted
from acidclean.shared.bus.bundle import BUNDLE_TYPE
from acidclean.shared.bus.codec import CE_TYPE, decode, due_at_ms, header_due_at_ms, reject
from acidclean.shared.bus.records import RawRecord

LOGGER = logging.getLogger("acidclean.cleaner")
_GROUP_TYPE = DelayedVacuums.event_type.encode()
_ENVELOPE_TYPE = DelayEnvelope.event_type.encode()
_BUNDLE_TYPE = BUNDLE_TYPE.encode()


class DecoderConfig(Protocol):
    """The loop's settings the decoder reads."""

    @property
    def delay_topic(self) -> str: ...

    @property
    def tenant(self) -> str: ...

    @property
    def cleaner_id(self) -> str: ...

    @property
    def interval_ms(self) -> int: ...


class RecordDecoder:
    """Decodes the loop's records into works (on the loop's thread)."""

    def __init__(self, config: DecoderConfig, metrics: CleanerMetrics) -> None:
        self._config = config
        self._metrics = metrics

    def work(self, record: RawRecord, generation: int, now: int) -> Work:
        on_delay_topic = record.topic == self._config.delay_topic
        event: Any = None
        if on_delay_topic:  # read without the models; None: they decide
            ce_type = _header(record, CE_TYPE)
            if ce_type == _GROUP_TYPE:
                event = read_group(record, self._config.tenant)
            elif ce_type == _ENVELOPE_TYPE:
                event = read_envelope(record, self._config.tenant)
            elif ce_type == _BUNDLE_TYPE:
                bundle_due = header_due_at_ms(record)
                if bundle_due is not None:
                    due_at = datetime.fromtimestamp(bundle_due / 1000, timezone.utc)
                    event = read_bundle(record, self._config.tenant, due_at)
        if event is None:
            expected = (DelayEnvelope, DelayedVacuums) if on_delay_topic else (VacuumCommitted,)
            event = decode(record, rejected_by=self._config.cleaner_id, tenant=self._config.tenant, expected=expected)
            if isinstance(event, DelayedVacuums):
                event = group_of_model(event)
        if not isinstance(event, DelayEnvelope | WaitingGroup | WaitingBundle):
            assert isinstance(event, VacuumCommitted | CleanupRejected)
            return Work(record, event, generation, 0, now)
        due = header_due_at_ms(record)
        due = due if due is not None else due_at_ms(event.due_at)
        problem = due_time_problem(due)
        if problem is not None:
            refused = reject(
                record,
                "invalid_due_time",
                problem,
                rejected_by=self._config.cleaner_id,
                tenant=self._config.tenant,
                event=event if isinstance(event, DelayEnvelope) else None,
            )
            return Work(record, refused, generation, 0, now)
        clamped = clamp_due_ms(due, now, self._config.interval_ms)
        if clamped is not None:
            self._metrics.clamped_due_times.inc()
            log(
                LOGGER,
                logging.WARNING,
                f"delay envelope due {(due - now) / 1000:.0f} s ahead, more than a few intervals (clock skew or "
                "a bad record): due time clamped to one interval from now; the re-check decides",
                event_id=event.event_id,
                vacuum_id=event.correlation_id,
                table=event.table,
                partition=event.partition,
                attempt=getattr(event, "attempt", None),
                due_at=event.due_at.isoformat(),
                clamped_to=_ms_iso(clamped),
                topic=record.topic,
                partition_number=record.partition,
                offset=record.offset,
            )
            due = clamped
        return Work(record, event, generation, due, now)


def _header(record: RawRecord, name: str) -> bytes | None:
    for key, value in record.headers:
        if key == name:
            return value
    return None


def _ms_iso(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, timezone.utc).isoformat()
