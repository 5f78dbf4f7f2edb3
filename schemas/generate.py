"""Generate the published JSON Schemas of the events: ``python -m acidclean.schemas.generate``.

Each event model's schema is written to ``schemas/json/<Event>.json``. Every distinct schema ever
published is also kept, numbered, under ``schemas/json/history/<Event>/`` so the compatibility test
can check new models against all previous versions (transitively), as a schema registry would.
``--check`` writes nothing and exits 1 when a committed file differs from the models.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from acidclean.schemas.events import EVENT_CLASSES

SCHEMA_DIR = Path(__file__).resolve().parent / "json"
HISTORY_DIR = SCHEMA_DIR / "history"
DIALECT = "https://json-schema.org/draft/2020-12/schema"


def schema_of(event_class: type[Any]) -> dict[str, Any]:
    """The JSON Schema published for ``event_class``."""
    schema: dict[str, Any] = {"$schema": DIALECT, "$id": f"urn:acidclean:schema:{event_class.__name__}"}
    schema.update(event_class.model_json_schema())
    schema["x-cloudevents-type"] = event_class.event_type
    return schema


def render(schema: dict[str, Any]) -> str:
    """The exact text committed for a schema (stable key order, trailing newline)."""
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def rendered_schemas() -> dict[str, str]:
    """Event name to the text of its current schema."""
    return {cls.__name__: render(schema_of(cls)) for cls in EVENT_CLASSES}


def history_files(name: str, history_dir: Path = HISTORY_DIR) -> list[Path]:
    """Every published version of one event's schema, oldest first."""
    return sorted((history_dir / name).glob("*.json"))


def stale_files(schema_dir: Path = SCHEMA_DIR) -> list[str]:
    """Names of the events whose committed schema (or newest history entry) differs from the model."""
    stale = []
    for name, text in rendered_schemas().items():
        current = schema_dir / f"{name}.json"
        history = history_files(name, schema_dir / "history")
        published = current.read_text(encoding="utf-8") if current.exists() else None
        newest = history[-1].read_text(encoding="utf-8") if history else None
        if text not in (published, newest) or published != newest:
            stale.append(name)
    return stale


def write_schemas(schema_dir: Path = SCHEMA_DIR) -> list[Path]:
    """Write every current schema, appending a history version where it changed; returns files written."""
    written = []
    for name, text in rendered_schemas().items():
        current = schema_dir / f"{name}.json"
        if not current.exists() or current.read_text(encoding="utf-8") != text:
            current.parent.mkdir(parents=True, exist_ok=True)
            current.write_text(text, encoding="utf-8")
            written.append(current)
        history = history_files(name, schema_dir / "history")
        if not history or history[-1].read_text(encoding="utf-8") != text:
            version = int(history[-1].stem) + 1 if history else 1
            path = schema_dir / "history" / name / f"{version:04d}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--check"]:
        stale = stale_files()
        for name in stale:
            print(f"{name}: committed schema differs from the model; run python -m acidclean.schemas.generate")
        return 1 if stale else 0
    if args:
        print("usage: python -m acidclean.schemas.generate [--check]", file=sys.stderr)
        return 2
    for path in write_schemas():
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
