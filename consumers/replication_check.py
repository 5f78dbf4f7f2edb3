"""Hive's cleaner also recycles removed files through the replication change manager when the table's
database is a replication source (database parameter ``repl.source.for``); acidclean does not. This
says so, one warning line per such database per cleaner process (the metastore is asked once per
database, at its first cleanup that removes anything).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from acidclean.consumers.logs import log
from acidclean.shared.errors import MetastoreError
from acidclean.shared.storage.trash import replication_note

LOGGER = logging.getLogger("acidclean.cleaner")


class ReplicationCheck:
    """Asks each database once whether it is a replication source, and warns once if it is. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._asked: dict[str, str | None] = {}

    def note(self, metastore: Any, db: str) -> str | None:
        with self._lock:
            if db in self._asked:
                return self._asked[db]
        ask = getattr(metastore, "database_parameters", None)
        if ask is None:
            return None
        try:
            note = replication_note(ask(db))
        except MetastoreError:
            return None  # asked again at the next cleanup; the cleanup itself does not depend on it
        with self._lock:
            first = db not in self._asked
            self._asked[db] = note
        if note is not None and first:
            log(LOGGER, logging.WARNING, f"database {db}: {note}", database=db)
        return note
