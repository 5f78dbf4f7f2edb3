"""A metastore lock as an event records it: :class:`LockInfo` to :class:`LockSnapshotEntry`."""

from __future__ import annotations

from datetime import datetime, timezone

from acidclean.schemas.common import LockSnapshotEntry
from acidclean.shared.metastore import LockInfo


def snapshot_entry(lock: LockInfo) -> LockSnapshotEntry:
    acquired = None
    if lock.acquired_at_ms:
        acquired = datetime.fromtimestamp(lock.acquired_at_ms / 1000, tz=timezone.utc)
    return LockSnapshotEntry(
        lock_id=lock.lock_id,
        txn_id=lock.txn_id or None,
        lock_type=lock.lock_type,
        state=lock.state,
        user=lock.user,
        host=lock.host,
        acquired_at=acquired,
    )
