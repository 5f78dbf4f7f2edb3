"""A bundle carried whole: when a check that found every lock of its summary listed may write it on
with its members unread, and the bundle that does (see the package's doc)."""

from __future__ import annotations

import uuid
from collections.abc import Set as AbstractSet
from datetime import datetime
from typing import Protocol

from acidclean.shared.bus.bundle.wire import (
    BundleSummary,
    moment_of,
)
from acidclean.shared.bus.bundle.written import (
    CarriedBundle,
)


class CarriableBundle(Protocol):
    """What :func:`carried_on` reads of a bundle (a :class:`ReadBundle`, or the loop's view of one)."""

    @property
    def event_id(self) -> uuid.UUID: ...
    @property
    def tenant(self) -> str: ...
    @property
    def oldest_commit(self) -> datetime | None: ...
    @property
    def listed_keys(self) -> tuple[str, ...]: ...
    @property
    def summary(self) -> BundleSummary | None: ...
    @property
    def records(self) -> bytes | memoryview | None: ...
    @property
    def compressed(self) -> bool: ...


def whole_carry_refused(
    bundle: CarriableBundle, *, held_ids: AbstractSet[int], checked_at: datetime, max_wait_s: float
) -> str | None:
    """Why a check that found ``held_ids`` listed may not carry ``bundle`` on whole (its members must
    then be checked one by one), or None when it may: ``no_summary`` (a member does not wait on
    snapshot locks alone), ``no_carries_left`` (a member's entries are due to be read in full),
    ``no_keys`` (its key list is missing, or does not match its members), ``max_wait`` (its oldest
    vacuum is at the max wait) or ``lock_gone`` (a lock of its summary is no longer listed)."""
    summary, records = bundle.summary, bundle.records
    if summary is None or records is None:
        return "no_summary"
    if summary.carries_left <= 0:
        return "no_carries_left"
    try:
        keys = bundle.listed_keys
    except ValueError:
        return "no_keys"  # its members do not read: its check refuses it
    if not keys:
        return "no_keys"
    if (checked_at - moment_of(summary.oldest_commit)).total_seconds() >= max_wait_s:
        return "max_wait"
    if not all(lock_id in held_ids for lock_id in summary.lock_ids):
        return "lock_gone"
    return None


def carried_on(
    bundle: CarriableBundle,
    *,
    partition: int,
    held_ids: AbstractSet[int],
    checked_at: datetime,
    due_at_ms: int,
    max_wait_s: float,
) -> CarriedBundle | None:
    """The bundle that carries ``bundle`` on whole after a check that found every lock of its summary
    in ``held_ids`` (so no member can be ready), or None when its members must be checked one by one:
    no summary, no carries left, a lock gone, or a vacuum near the max wait (a stuck vacuum is counted
    by a full check). Its id is derived from the bundle's, so a replay of the same check publishes the
    same id. Only ever "still waiting": whatever its members are, they are read in full by the checks
    that may clean them."""
    if whole_carry_refused(bundle, held_ids=held_ids, checked_at=checked_at, max_wait_s=max_wait_s) is not None:
        return None
    summary, records, keys = bundle.summary, bundle.records, bundle.listed_keys
    assert summary is not None and records is not None
    return CarriedBundle(
        event_id=uuid.uuid5(bundle.event_id, "carried-whole"),
        tenant=bundle.tenant,
        partition=partition,
        previous=bundle.event_id,
        records=records,
        count=len(keys),
        occurred_at=checked_at,
        due_at_ms=due_at_ms,
        oldest_commit=bundle.oldest_commit,
        summary=BundleSummary(
            lock_ids=summary.lock_ids,
            carries_left=summary.carries_left - 1,
            carried=summary.carried + 1,
            oldest_commit=summary.oldest_commit,
            records_crc=summary.records_crc,
        ),
        compressed=bundle.compressed,
        keys=keys,
    )
