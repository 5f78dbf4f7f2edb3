"""The IDL subset acidclean compiles its Hive 4 compaction-queue bindings from says what Hive 4's IDL
says: every field id, type and name of every struct, every enum value, every method's arguments and
declared exceptions. A wrong id would be read or written as another field on the wire, silently."""

from __future__ import annotations

import re
from pathlib import Path

from acidclean.shared.hive4_queue.generated import ThriftHiveMetastore, ttypes

ROOT = Path(__file__).resolve().parents[3]
SUBSET = ROOT / "shared" / "hive4_queue" / "hive4_compaction_queue.thrift"
UPSTREAM = Path(__file__).with_name("hive4_upstream_lines.thrift")

BLOCK = re.compile(r"^(struct|exception|enum)\s+(\w+)\s*\{(.*?)^\}", re.M | re.S)
FIELD = re.compile(r"^\s*(\d+)\s*:\s*(required\s+|optional\s+)?([\w<>, ]+?)\s+(\w+)\s*(=\s*[^,;/]+)?[,;]?\s*(//.*)?$")
ENUM_VALUE = re.compile(r"^\s*(\w+)\s*=\s*(\d+)\s*,?\s*$")
METHOD = re.compile(r"^\s*([\w<>]+)\s+(\w+)\((.*?)\)\s*(throws\s*\((.*)\))?\s*$")


def declarations(path: Path) -> dict[str, dict[str, tuple[str, ...]]]:
    text = path.read_text()
    found: dict[str, dict[str, tuple[str, ...]]] = {}
    for kind, name, body in BLOCK.findall(text):
        members: dict[str, tuple[str, ...]] = {}
        for line in body.splitlines():
            if not line.strip():
                continue
            if kind == "enum":
                match = ENUM_VALUE.match(line)
                assert match, f"{path.name}: cannot read enum line {line!r}"
                members[match[1]] = (match[2],)
            else:
                match = FIELD.match(line)
                assert match, f"{path.name}: cannot read field line {line!r}"
                members[match[1]] = ((match[2] or "").strip(), match[3].replace(" ", ""), match[4])
        found[f"{kind} {name}"] = members
    return found


def methods(path: Path) -> dict[str, str]:
    service = path.read_text().split("service ThriftHiveMetastore {", 1)[1]
    found = {}
    for line in service.splitlines():
        match = METHOD.match(line)
        if match:
            found[match[2]] = re.sub(r"\s+", "", line)
    return found


def test_every_struct_of_the_subset_has_hive_4s_field_ids_types_and_names() -> None:
    subset, upstream = declarations(SUBSET), declarations(UPSTREAM)
    assert set(subset) == set(upstream)
    assert len(subset) == 10
    for name, fields in subset.items():
        assert fields == upstream[name], name


def test_every_method_of_the_subset_is_hive_4s_method_with_its_arguments_and_exceptions() -> None:
    subset, upstream = methods(SUBSET), methods(UPSTREAM)
    assert subset == upstream
    assert {"compact2", "show_compact", "find_next_compact2", "mark_compacted", "mark_cleaned", "mark_failed"} <= set(
        subset
    )


def test_the_generated_bindings_are_the_subset_compiled() -> None:
    """``make hive4-thrift`` was run after the last change of the subset."""
    for name, fields in declarations(SUBSET).items():
        kind, struct = name.split()
        if kind == "enum":
            assert {key: int(value) for key, (value,) in fields.items()} == getattr(ttypes, struct)._NAMES_TO_VALUES
            continue
        spec = {str(entry[0]): entry[2] for entry in getattr(ttypes, struct).thrift_spec if entry is not None}
        assert spec == {field_id: field[2] for field_id, field in fields.items()}, struct
    for method in methods(SUBSET):
        assert hasattr(ThriftHiveMetastore.Client, method)
