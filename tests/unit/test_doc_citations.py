"""Every document the code, the tests and the docs cite is in the repository (issue 50): a path under
``docs/`` (or any other repository path to a ``.md`` file) exists, a relative Markdown link resolves, the
design is cited as ``docs/design.md`` (never an upper-case ``DESIGN.md`` or ``CONVENTIONS.md`` of a
checkout that no clone has), and each ``section N`` or ``7.N`` / ``section 7, rule N`` of
docs/design.md it names is there; each ``:mod:`acidclean.x``` names a module of the package."""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".sh", ".properties", ".cfg", ".txt", ".java", ".xml"}
TOP_FOLDERS = "docs|deploy|tests|shared|producers|consumers|schemas|acidclean"

# Documents of a checkout outside the repository, cited by their old names.
OUTSIDE_NAMES = re.compile(r"\b(?:DESIGN|CONVENTIONS)\.md\b")
# A repository path: anything under docs/, or a .md file under another top-level folder.
REPOSITORY_PATH = re.compile(rf"(?<![\w/.-])((?:docs/[\w./-]*\w)|(?:(?:{TOP_FOLDERS})/[\w./-]*\.md))")
MARKDOWN_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
# What follows "docs/design.md": "section 7, rule 3", "sections 2 and 7", "7.3", "7, rule 2".
DESIGN_CITATION = re.compile(
    r"docs/design\.md\)?,? (?:sections? )?(?P<sections>\d+(?:(?:, | and )\d+)*)(?P<rule>\.\d+|,? rules? \d+)?"
)
MODULE_ROLE = re.compile(r":mod:`(acidclean(?:\.\w+)+)`")
RULE_BEFORE = re.compile(r"\b[Rr]ules? (?P<rules>\d+(?: and \d+)*) (?:\(|of )docs/design\.md,? section 7\b")


def design_sections(text: str) -> dict[int, str]:
    """docs/design.md's numbered sections (``## N. Title``) and their text."""
    parts = re.split(r"^## (\d+)\. .*$", text, flags=re.M)
    return {int(number): body for number, body in zip(parts[1::2], parts[2::2], strict=True)}


def safety_rules(text: str) -> set[int]:
    """The numbered rules of section 7 (``1. Nothing ...``)."""
    return {int(n) for n in re.findall(r"^(\d+)\. ", design_sections(text).get(7, ""), flags=re.M)}


def cited_files() -> Iterator[Path]:
    """The repository's own text files: the real folders (``os.walk`` follows no symbolic link, so the
    ``acidclean/`` links to the top-level folders are not read twice), not the virtualenv or caches."""
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [
            d
            for d in subfolders
            if (d == ".ci" or not d.startswith("."))
            and d not in {"build", "__pycache__"}
            and not d.endswith(".egg-info")
        ]
        for name in files:
            path = Path(folder, name)
            if path.suffix in SUFFIXES or name in {"Makefile"} or name.endswith("Dockerfile"):
                yield path


def is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def flowing(text: str) -> str:
    """The text with line breaks (and the comment or docstring indentation after them) as one space, so a
    citation wrapped over two lines reads as one."""
    return re.sub(r"[ \t]*\n[ \t]*(?:#+[ \t]*)?", " ", text)


def problems_in(text: str, where: Path, design: str) -> list[str]:
    found: list[str] = []
    sections = design_sections(design)
    rules = safety_rules(design)
    for match in OUTSIDE_NAMES.finditer(text):
        found.append(f"{match.group(0)} is not in the repository: cite docs/design.md or docs/conventions.md")
    for match in REPOSITORY_PATH.finditer(text):
        path = match.group(1).rstrip(".")
        if "*" not in path and not (ROOT / path).exists():
            found.append(f"{path} does not exist")
    if where.suffix == ".md":
        for match in MARKDOWN_LINK.finditer(text):
            target = match.group(1)
            if "://" not in target and not target.startswith("mailto:") and not (where.parent / target).exists():
                found.append(f"the link ({target}) resolves to nothing")
    for match in MODULE_ROLE.finditer(text):
        if not is_module(match.group(1)):
            found.append(f":mod:`{match.group(1)}` is no module of the package")
    text = flowing(text)
    for match in DESIGN_CITATION.finditer(text):
        numbers = [int(n) for n in re.findall(r"\d+", match.group("sections"))]
        found += [f"docs/design.md has no section {n}" for n in numbers if n not in sections]
        if match.group("rule"):
            rule = int(re.sub(r"\D", "", match.group("rule")))
            if numbers[-1] != 7:
                found.append(f"'{match.group(0)}': rules are in section 7")
            elif rule not in rules:
                found.append(f"docs/design.md section 7 has no rule {rule}")
    for match in RULE_BEFORE.finditer(text):
        found += [
            f"docs/design.md section 7 has no rule {n}"
            for n in map(int, re.findall(r"\d+", match.group("rules")))
            if n not in rules
        ]
    return found


def test_every_cited_document_and_section_is_in_the_repository() -> None:
    design = DESIGN.read_text(encoding="utf-8")
    broken = [
        f"{path.relative_to(ROOT)}: {problem}"
        for path in sorted(cited_files())
        if path != Path(__file__).resolve()  # this file cites wrong paths on purpose
        for problem in problems_in(path.read_text(encoding="utf-8", errors="replace"), path, design)
    ]
    assert broken == [], "\n".join(broken)


def test_the_scan_reads_the_product_the_tests_and_the_docs() -> None:
    seen = {path.relative_to(ROOT).as_posix() for path in cited_files()}
    expected = {"consumers/rules/__init__.py", "shared/acid/claims.py", "pyproject.toml", "docs/safety.md"}
    assert expected <= seen and "tests/unit/test_safety_map.py" in seen
    assert not any(path.startswith(("acidclean/consumers/", ".venv/")) for path in seen)


def test_the_design_has_sections_1_to_8_and_safety_rules_1_to_10() -> None:
    design = DESIGN.read_text(encoding="utf-8")
    assert sorted(design_sections(design)) == list(range(1, 9))
    assert sorted(safety_rules(design)) == list(range(1, 11))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            '"""Rule 4 (DESIGN.md section 7)."""',
            "DESIGN.md is not in the repository: cite docs/design.md or docs/conventions.md",
        ),
        (
            "# the rules of CONVENTIONS.md, enforced",
            "CONVENTIONS.md is not in the repository: cite docs/design.md or docs/conventions.md",
        ),
        ("see docs/nowhere.md", "docs/nowhere.md does not exist"),
        ('"""What readers see (docs/design.md section\n    9)."""', "docs/design.md has no section 9"),
        ("(docs/design.md sections 2 and 12)", "docs/design.md has no section 12"),
        ('"rule11: docs/design.md 7.11, ..."', "docs/design.md section 7 has no rule 11"),
        ("# docs/design.md section 7,\n# rule 12", "docs/design.md section 7 has no rule 12"),
        ("Rule 13 (docs/design.md section 7): ...", "docs/design.md section 7 has no rule 13"),
        ("docs/design.md section 5, rule 2", "'docs/design.md section 5, rule 2': rules are in section 7"),
        (
            "rule 5 the message loop's (:mod:`acidclean.consumers.delivery`)",
            ":mod:`acidclean.consumers.delivery` is no module of the package",
        ),
        ("(:mod:`acidclean.delivery.loop`)", ":mod:`acidclean.delivery.loop` is no module of the package"),
    ],
)
def test_a_citation_of_what_is_not_there_is_reported(text: str, problem: str) -> None:
    assert problem in problems_in(text, ROOT / "shared" / "example.py", DESIGN.read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    "text",
    [
        "(docs/design.md section 7, rule 10)",
        "docs/design.md sections 2 and 7",
        '"rule3: docs/design.md 7.3, only what ..."',
        "Rules 3 and 4 of docs/design.md section 7",
        "listed in librdkafka's CONFIGURATION.md",
        "docs/safety.md maps every rule; docs/demo-timeline.png",
        "rule 5 the message loop's (:mod:`acidclean.consumers.loop`)",
    ],
)
def test_a_citation_of_what_is_there_passes(text: str) -> None:
    assert problems_in(text, ROOT / "shared" / "example.py", DESIGN.read_text(encoding="utf-8")) == []


def test_a_broken_relative_link_in_a_markdown_page_is_reported() -> None:
    page = ROOT / "docs" / "example.md"
    design = DESIGN.read_text(encoding="utf-8")
    assert problems_in("[the rules](safety.md), [Hive](https://hive.apache.org)", page, design) == []
    assert problems_in("[the words](glossary-old.md#terms)", page, design) == [
        "the link (glossary-old.md) resolves to nothing"
    ]
