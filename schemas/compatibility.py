"""Backward-compatibility rules between two versions of an event's JSON Schema.

Every event schema is a closed content model (``additionalProperties: false``), so a change is
backward compatible when every message valid under the old schema stays valid under the new one:
no property may disappear, no property may become required that was not required before, and a
constant or enumeration may only grow. These structural checks complement the example-based test
(``schemas/examples/``), which proves the same thing on real messages.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]


def _object_schemas(schema: Schema) -> dict[str, Schema]:
    """The top-level schema (as ``""``) and every named definition."""
    found = {"": schema}
    found.update(schema.get("$defs", {}))
    return found


def _allowed_values(prop: Schema) -> set[Any] | None:
    if "const" in prop:
        return {prop["const"]}
    if "enum" in prop:
        return set(prop["enum"])
    return None


def open_objects(schema: Schema) -> list[str]:
    """Names of object schemas that accept unknown properties (an open content model)."""
    return [
        name or "(top level)"
        for name, part in _object_schemas(schema).items()
        if part.get("type") == "object" and part.get("additionalProperties") is not False
    ]


def breaking_changes(old: Schema, new: Schema) -> list[str]:
    """Why a message valid under ``old`` could be invalid under ``new``; empty when compatible."""
    problems: list[str] = []
    new_objects = _object_schemas(new)
    for name, old_part in _object_schemas(old).items():
        where = name or "(top level)"
        new_part = new_objects.get(name)
        if new_part is None:
            problems.append(f"{where}: definition removed")
            continue
        old_props: Schema = old_part.get("properties", {})
        new_props: Schema = new_part.get("properties", {})
        for prop in old_props:
            if prop not in new_props:
                problems.append(f"{where}.{prop}: property removed (old messages carry it)")
        for prop in set(new_part.get("required", [])) - set(old_part.get("required", [])):
            problems.append(f"{where}.{prop}: newly required (old messages may lack it)")
        for prop, old_prop in old_props.items():
            if prop not in new_props:
                continue
            old_values, new_values = _allowed_values(old_prop), _allowed_values(new_props[prop])
            if new_values is not None and (old_values is None or not old_values <= new_values):
                problems.append(f"{where}.{prop}: allowed values narrowed")
            if old_prop.get("type") != new_props[prop].get("type") and "type" in new_props[prop]:
                problems.append(
                    f"{where}.{prop}: type changed from {old_prop.get('type')} to {new_props[prop]['type']}"
                )
    return problems
