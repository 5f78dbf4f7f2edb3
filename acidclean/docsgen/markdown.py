"""Text from the code made safe for a Markdown page."""

from __future__ import annotations


def prose(text: str) -> str:
    """``text`` with ``<`` outside code spans written ``&lt;``, so ``<group>.<tenant>`` is not read as HTML."""
    parts = text.split("`")
    return "`".join(part.replace("<", "&lt;") if index % 2 == 0 else part for index, part in enumerate(parts))


def cell(text: str) -> str:
    """``text`` as one table cell: one line, ``|`` escaped, ``<`` outside code spans escaped."""
    return prose(" ".join(text.split()).replace("|", "\\|"))
