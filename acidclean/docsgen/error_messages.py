"""Every one-line error the code can print, collected from its source (for ``docs/troubleshooting.md``).

An error reaches the user as ``error: <message>`` when it is an :class:`AcidCleanError` (the command
line prints it as one line: ``acidclean/cli/__init__.py``) or one of click's usage errors. This reads
the source rather than running it: every call of such an error class with a literal message (a string
or an f-string, whose ``{...}`` parts become ``<...>``), and every ``click.echo("error: ...")``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT_ERROR = "AcidCleanError"
CLICK_ERRORS = {"BadParameter", "UsageError", "ClickException"}
# The packages whose code runs in a command (acidclean/ is made of links to them, and acidclean/cli).
SOURCE_DIRS = ("acidclean/cli", "shared", "consumers", "producers", "deploy", "schemas")


@dataclass(frozen=True, order=True)
class ErrorMessage:
    """One message as the code writes it, with the error class that carries it and where it is."""

    kind: str
    template: str
    modules: tuple[str, ...]


def _text(node: ast.expr) -> str | None:
    """The message of a literal string, f-string or ``+`` of them; ``None`` for anything computed."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts: list[str] = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue):
                parts.append(f"<{_placeholder(value.value)}>")
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left), _text(node.right)
        if left is not None and right is not None:
            return left + right
    return None


def _placeholder(node: ast.expr) -> str:
    """What a ``{...}`` of an f-string stands for: the variable's or attribute's name, else ``...``."""
    if isinstance(node, (ast.Name, ast.Attribute)):
        return _name(node)
    if isinstance(node, ast.Call) and _name(node.func) == "len":
        return "N"
    return "..."


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _python_files(root: Path) -> list[Path]:
    return sorted(path for folder in SOURCE_DIRS for path in (root / folder).rglob("*.py"))


def error_classes(root: Path) -> dict[str, str]:
    """Every subclass of :class:`AcidCleanError` defined in the source, mapped to its first base."""
    bases: dict[str, list[str]] = {}
    for path in _python_files(root):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases.setdefault(node.name, []).extend(_name(base) for base in node.bases)
    found: dict[str, str] = {ROOT_ERROR: ""}
    changed = True
    while changed:
        changed = False
        for name, parents in bases.items():
            known = [parent for parent in parents if parent in found]
            if name not in found and known:
                found[name] = known[0]
                changed = True
    return found


def collect(root: Path) -> list[ErrorMessage]:
    """Every message, sorted by error class then text, once each."""
    classes = error_classes(root)
    messages: dict[tuple[str, str], set[str]] = {}
    for path in _python_files(root):
        module = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            name = _name(node.func)
            text = _text(node.args[0])
            if text is None:
                continue
            if name in classes or name in CLICK_ERRORS:
                messages.setdefault((name, " ".join(text.split())), set()).add(module)
            elif name == "echo" and text.startswith("error: "):
                messages.setdefault(("echo", " ".join(text.removeprefix("error: ").split())), set()).add(module)
    return sorted(ErrorMessage(kind, text, tuple(sorted(found))) for (kind, text), found in messages.items())
