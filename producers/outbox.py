"""A durable outbox for ``VacuumCommitted`` events (docs/design.md section 7, rule 6).

A committed vacuum whose event is not acknowledged by Kafka must be published later, not lost. The
vacuum therefore writes its event *draft* here before it renames anything, completes it with the
lock snapshot after the rename, and removes it once the broker acknowledged it. Whatever is left is
published by the next vacuum run or by ``acidclean outbox flush``:

* a complete event is published as it is (same event id, so a duplicate is recognisable);
* a draft whose new directories all exist committed but crashed before its lock snapshot: the
  snapshot is taken now (later is only more conservative) and the event published;
* a draft whose directories do not exist (or are another vacuum's) never committed and is dropped;
  one whose staging directory still holds a commit marker waits for the next vacuum of its table,
  which finishes or sets aside that commit under the table's vacuum lock
  (:func:`acidclean.producers.commit.recover_commits`).

An entry that cannot be read is set aside (renamed ``*.unreadable``) with one log line: a damaged
entry of one table never stops the vacuum of another (docs/design.md section 7, rule 6).

One JSON file per event, written to a temporary name and renamed, so a crash never leaves half a
file.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acidclean.schemas.events import VacuumCommitted
from acidclean.shared.errors import VacuumError
from acidclean.shared.settings import Settings

LOGGER = logging.getLogger(__name__)

DRAFT = "draft"
READY = "ready"


@dataclass(frozen=True)
class OutboxEntry:
    path: Path
    state: str  # DRAFT or READY
    draft: dict[str, Any]
    event: VacuumCommitted | None
    last_error: str | None

    @property
    def event_id(self) -> str:
        return str(self.draft["event_id"])


class Outbox:
    """The outbox directory (``<state_dir>/outbox`` by default)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, event_id: str | uuid.UUID) -> Path:
        return self.directory / f"vacuum-{event_id}.json"

    def _write(self, event_id: str | uuid.UUID, content: dict[str, Any]) -> Path:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self._path(event_id)
            partial = path.with_name(f".{path.name}.partial")
            with partial.open("w", encoding="utf-8") as out:
                json.dump(content, out, sort_keys=True)
                out.flush()
                os.fsync(out.fileno())
            os.replace(partial, path)
        except OSError as error:
            raise VacuumError(f"cannot write to the vacuum outbox {self.directory}: {error.strerror}") from error
        return path

    def save_draft(self, draft: dict[str, Any]) -> Path:
        return self._write(draft["event_id"], {"state": DRAFT, "draft": draft})

    def save_event(self, draft: dict[str, Any], event: VacuumCommitted, last_error: str | None = None) -> Path:
        return self._write(
            event.event_id,
            {"state": READY, "draft": draft, "event": event.model_dump(mode="json"), "last_error": last_error},
        )

    def remove(self, event_id: str | uuid.UUID) -> None:
        self._path(event_id).unlink(missing_ok=True)

    def entries(self) -> list[OutboxEntry]:
        if not self.directory.is_dir():
            return []
        found = []
        for path in sorted(self.directory.glob("vacuum-*.json")):
            try:
                content = json.loads(path.read_text(encoding="utf-8"))
                event = content.get("event")
                found.append(
                    OutboxEntry(
                        path=path,
                        state=content["state"],
                        draft=content["draft"],
                        event=VacuumCommitted.model_validate_json(json.dumps(event)) if event else None,
                        last_error=content.get("last_error"),
                    )
                )
            except (OSError, ValueError, KeyError) as error:
                aside = path.with_name(f"{path.name}.unreadable")
                LOGGER.error("outbox entry %s cannot be read (%s): set aside as %s to inspect", path, error, aside.name)
                try:
                    os.replace(path, aside)
                except OSError as move_error:
                    LOGGER.warning("could not set aside %s: %s", path, move_error)
        return found


def outbox_for(settings: Settings, directory: str | os.PathLike[str] | None = None) -> Outbox:
    """The outbox of ``directory``, by default ``<state_dir>/outbox``."""
    return Outbox(Path(directory) if directory else settings.state_dir / "outbox")
