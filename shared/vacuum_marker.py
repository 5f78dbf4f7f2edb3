"""The marker a vacuum leaves in each directory it commits, so a cleaner can tell its output.

``_acidclean_vacuum.json`` names the vacuum's event id and job, the table, partition and highest
write id. It is written into the staged directory before the commit, so it exists exactly when the
directory is committed. The leading ``_`` makes Hive, Trino and acidclean's reader skip it, as they
skip ``_orc_acid_version``. The cleaner refuses an event whose new directory lacks the marker of that
very event: a forged or mistaken event cannot make committed deltas look compacted. Pure: bytes in,
bytes out.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

VACUUM_MARKER = "_acidclean_vacuum.json"


class MarkerError(ValueError):
    """The marker's bytes are not a vacuum marker."""


@dataclass(frozen=True)
class VacuumMarker:
    event_id: str
    vacuum_job_id: str
    table: str
    partition: str | None
    highest_write_id: int
    written_at: str | None = None  # ISO time the marker was written, just before the commit's rename

    def written(self) -> datetime | None:
        try:
            return datetime.fromisoformat(self.written_at) if self.written_at else None
        except ValueError:
            return None

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_draft(cls, draft: dict[str, Any]) -> VacuumMarker:
        """The marker of a vacuum's event draft (see :mod:`acidclean.producers.vacuum`)."""
        return cls(
            event_id=str(draft["event_id"]),
            vacuum_job_id=str(draft["vacuum_job_id"]),
            table=str(draft["table"]),
            partition=draft.get("partition"),
            highest_write_id=int(draft["highest_write_id"]),
            written_at=datetime.now(timezone.utc).isoformat(),
        )

    @classmethod
    def parse(cls, data: bytes) -> VacuumMarker:
        try:
            loaded = json.loads(data)
            return cls(
                event_id=str(loaded["event_id"]),
                vacuum_job_id=str(loaded["vacuum_job_id"]),
                table=str(loaded["table"]),
                partition=loaded.get("partition"),
                highest_write_id=int(loaded["highest_write_id"]),
                written_at=loaded.get("written_at"),
            )
        except (ValueError, KeyError, TypeError) as error:
            raise MarkerError(f"not a vacuum marker ({type(error).__name__}: {error})") from error
