"""The committed JSON Schemas are the models' schemas, and no change breaks an earlier message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from acidclean.schemas.compatibility import breaking_changes, open_objects
from acidclean.schemas.events import EVENT_CLASS_BY_TYPE, EVENT_CLASSES
from acidclean.schemas.generate import SCHEMA_DIR, history_files, rendered_schemas, stale_files

EXAMPLES_DIR = SCHEMA_DIR.parent / "examples"
NAMES = [cls.__name__ for cls in EVENT_CLASSES]
CLASS_BY_NAME = {cls.__name__: cls for cls in EVENT_CLASSES}


def _load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _examples(name: str) -> list[Path]:
    return sorted((EXAMPLES_DIR / name).glob("*.json"))


def test_committed_schemas_match_the_models() -> None:
    assert stale_files() == [], "run: python -m acidclean.schemas.generate, then commit schemas/json"


@pytest.mark.parametrize("name", NAMES)
def test_current_schema_is_the_newest_history_version(name: str) -> None:
    history = history_files(name)
    assert history, f"no history for {name}"
    assert history[-1].read_text(encoding="utf-8") == rendered_schemas()[name]


@pytest.mark.parametrize("name", NAMES)
def test_every_schema_is_a_closed_content_model(name: str) -> None:
    assert open_objects(_load(SCHEMA_DIR / f"{name}.json")) == []


@pytest.mark.parametrize("name", NAMES)
def test_no_published_version_is_broken_by_the_current_schema(name: str) -> None:
    current = _load(SCHEMA_DIR / f"{name}.json")
    for path in history_files(name):
        assert breaking_changes(_load(path), current) == [], f"{path} -> current"


@pytest.mark.parametrize("name", NAMES)
def test_examples_valid_under_any_published_version_still_validate(name: str) -> None:
    model = CLASS_BY_NAME[name]
    current = jsonschema.Draft202012Validator(_load(SCHEMA_DIR / f"{name}.json"))
    examples = _examples(name)
    assert examples, f"add at least one example under {EXAMPLES_DIR / name}"
    for version in history_files(name):
        old = jsonschema.Draft202012Validator(_load(version))
        valid_before = [path for path in examples if old.is_valid(_load(path))]
        assert valid_before, f"no example is valid under {version}: the check would prove nothing"
        for path in valid_before:
            current.validate(_load(path))
            event = model.model_validate_json(path.read_bytes())
            assert event.missing_on_wire() == [], path


def test_schema_files_name_their_cloudevents_type() -> None:
    for name in NAMES:
        schema = _load(SCHEMA_DIR / f"{name}.json")
        assert EVENT_CLASS_BY_TYPE[schema["x-cloudevents-type"]].__name__ == name


def test_breaking_changes_are_detected() -> None:
    old = {
        "type": "object",
        "additionalProperties": False,
        "required": ["a"],
        "properties": {"a": {"type": "integer"}, "b": {"enum": ["x", "y"]}, "c": {"type": "string"}},
    }
    new = {
        "type": "object",
        "additionalProperties": False,
        "required": ["a", "d"],
        "properties": {"a": {"type": "string"}, "b": {"enum": ["x"]}, "d": {"type": "string"}},
    }
    problems = breaking_changes(old, new)
    assert any("c: property removed" in p for p in problems)
    assert any("d: newly required" in p for p in problems)
    assert any("b: allowed values narrowed" in p for p in problems)
    assert any("a: type changed" in p for p in problems)
    assert breaking_changes(old, old) == []


def test_adding_an_optional_property_is_compatible() -> None:
    old = {"type": "object", "additionalProperties": False, "properties": {"a": {"type": "integer"}}}
    new = {**old, "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}
    assert breaking_changes(old, new) == []
