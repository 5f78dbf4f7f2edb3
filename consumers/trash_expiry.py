"""Trash hygiene for acidclean's own trash (local storage and unversioned S3; HDFS's NameNode expires
its own): the cleaner removes checkpoints older than ``cleanup_trash_interval_min``, as Hadoop's trash
emptier does, at most once per :data:`EXPIRY_EVERY` per trash root, from the delete threads, when a
cleanup is about to use that root (a cleaner that cleans nothing writes nothing there to expire).
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta

from acidclean.consumers.logs import log
from acidclean.shared.storage import FileSystem, StorageError
from acidclean.shared.storage.trash import expired_checkpoints

LOGGER = logging.getLogger("acidclean.cleaner")
EXPIRY_EVERY = timedelta(minutes=10)


class TrashExpiry:
    """Expires old checkpoints of each trash root, rate-limited. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, datetime] = {}

    def due(self, root: str, now: datetime) -> bool:
        with self._lock:
            last = self._last.get(root)
            if last is not None and now - last < EXPIRY_EVERY:
                return False
            self._last[root] = now
            return True

    def expire(self, fs: FileSystem, root: str, now: datetime, interval_min: int) -> list[str]:
        """Remove the checkpoints under ``root`` older than ``interval_min`` (if due); the ones removed."""
        if not self.due(root, now):
            return []
        try:
            if not fs.exists(root):
                return []
            names = [entry.name for entry in fs.list_dir(root) if entry.is_dir and not entry.is_symlink]
            expired = expired_checkpoints(names, now, interval_min)
            for name in expired:
                fs.delete_dir(f"{root.rstrip('/')}/{name}")
        except (StorageError, OSError) as error:
            log(LOGGER, logging.WARNING, "could not expire the trash; will try again", root=root, error=str(error))
            return []
        if expired:
            log(LOGGER, logging.INFO, "expired trash checkpoints", root=root, checkpoints=expired)
        return expired
