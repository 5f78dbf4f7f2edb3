"""The generated pages and where they go, for ``python -m acidclean.docsgen`` and the docs test."""

from __future__ import annotations

from pathlib import Path

from acidclean.docsgen import error_messages, troubleshooting
from acidclean.docsgen.cli_reference import cli_page
from acidclean.docsgen.settings_reference import settings_page

CLI_PAGE = Path("docs/reference/cli.md")
SETTINGS_PAGE = Path("docs/reference/settings.md")
TROUBLESHOOTING_PAGE = Path("docs/troubleshooting.md")


def generated(root: Path) -> dict[Path, str]:
    """Each generated page (relative to ``root``, the checkout) and what it should hold."""
    from acidclean.cli import main  # the whole command line: imported only to generate

    messages = error_messages.collect(root)
    unknown = sorted({message.kind for message in messages} - set(troubleshooting.ADVICE))
    if unknown:
        raise SystemExit(
            f"no advice for error kind(s) {', '.join(unknown)}: add each to ADVICE in "
            "acidclean/docsgen/troubleshooting.py"
        )
    page = (root / TROUBLESHOOTING_PAGE).read_text(encoding="utf-8")
    return {
        CLI_PAGE: cli_page(main),
        SETTINGS_PAGE: settings_page(),
        TROUBLESHOOTING_PAGE: troubleshooting.with_errors(page, messages),
    }
