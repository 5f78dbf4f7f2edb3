"""The ``acidclean`` command line.

Each area of the product has its own module in this package defining a ``click`` command or group;
this module only assembles them. Errors of the :class:`AcidCleanError` family are printed as one
clear message and exit with status 1 instead of a traceback.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from acidclean.shared.errors import AcidCleanError

# (module, attribute) of every sub-command; a module is imported only when the CLI starts.
COMMANDS: tuple[tuple[str, str], ...] = (
    ("acidclean.cli.stack", "stack"),
    ("acidclean.cli.demo", "demo"),
    ("acidclean.cli.acid", "acid_state"),
    ("acidclean.cli.acid", "scan"),
    ("acidclean.cli.audit", "audit"),
    ("acidclean.cli.cleaner", "cleaner"),
    ("acidclean.cli.producers", "vacuum"),
    ("acidclean.cli.producers", "create_table"),
    ("acidclean.cli.producers", "ingest"),
    ("acidclean.cli.producers", "read"),
    ("acidclean.cli.producers", "outbox"),
)


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except AcidCleanError as error:
            click.echo(f"error: {error}", err=True)
            sys.exit(1)


@click.group(cls=_Group)
@click.version_option(package_name="acidclean")
def main() -> None:
    """acidclean: an event-driven cleaner for Hive ACID tables."""


for _module, _attribute in COMMANDS:
    main.add_command(getattr(importlib.import_module(_module), _attribute))
