"""The ``acidclean`` command line.

Each area of the product has its own module in this package defining a ``click`` command or group;
this module assembles them and gives every one the same exit codes (:data:`EXIT_CODES`): an error of
the :class:`AcidCleanError` family is one line, never a traceback, and Ctrl-C ends any command
within a second (:class:`InterruptWatchdog`), even one blocked in a client library's C code.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import signal
import socket
import sys
import threading
import time
from typing import Any, NoReturn

import click

from acidclean.schemas.common import TABLE_PATTERN
from acidclean.shared.errors import AcidCleanError, ConfigurationError
from acidclean.shared.logs import flush_logs

EXIT_DONE = 0
EXIT_FAILED = 1  # an AcidCleanError other than a configuration error, a refusal, a service down
EXIT_USAGE = 2  # bad arguments (click's own usage errors exit 2 too), a bad table name, bad settings
EXIT_NOT_PUBLISHED = 3  # the work is done and committed, but its event waits in the outbox
EXIT_UNAVAILABLE = 4  # a service did not answer: no Kafka broker or metastore at the configured address
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as a shell reports a process killed by it)
EXIT_CODES = (
    "Exit codes: 0 done, 1 failed, 2 usage (bad arguments, table name or settings), "
    "3 done but its event not published (kept in the outbox), 4 a service did not answer (Kafka broker or "
    "metastore unreachable), 130 interrupted (Ctrl-C)."
)
INTERRUPT_GRACE_S = 0.8


def examples(*commands: str) -> str:
    """An epilog showing ``commands`` as they are typed (click keeps a ``\\b`` paragraph as it is)."""
    return "\b\nExamples:\n" + "\n".join(f"  $ {command}" for command in commands)


def table_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A click callback: DB.TABLE, or a usage error (exit 2)."""
    if value is not None and not re.fullmatch(TABLE_PATTERN, value):
        raise click.BadParameter(f"{value!r} is not DB.TABLE (letters, digits and _ on each side of one dot)")
    return value


class InterruptWatchdog:
    """Ends the process with exit code 130 when Ctrl-C has not ended it within ``grace_s``.

    Python runs its SIGINT handler (which raises KeyboardInterrupt) only once the main thread is back
    in Python code; a call blocked in C (librdkafka's metadata request to an unreachable broker: up to
    its 30 s timeout) defers it. The C-level handler also writes the signal's number to the wakeup
    file descriptor at once, so a thread reading it sees every Ctrl-C in time. The main thread usually
    unwinds by itself (``finally`` blocks release locks and close clients) and exits 130; when it has
    not within the grace, this thread says "interrupted" and ends the process.
    """

    _STOP = b"\0"  # no signal has number 0

    def __init__(self, grace_s: float = INTERRUPT_GRACE_S) -> None:
        self._grace_s = grace_s
        self._reader, self._writer = socket.socketpair()
        self._writer.setblocking(False)
        self._seen = threading.Event()
        self._reported = threading.Lock()
        self._previous_fd = signal.set_wakeup_fd(self._writer.fileno(), warn_on_full_buffer=False)
        self._thread = threading.Thread(target=self._watch, name="acidclean-interrupt-watchdog", daemon=True)
        self._thread.start()

    @staticmethod
    def install() -> InterruptWatchdog | None:
        """A watchdog, when this is the main thread (only it receives signals) and Ctrl-C is not ignored."""
        if threading.current_thread() is not threading.main_thread():
            return None
        if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, None):
            return None
        return InterruptWatchdog()

    def _watch(self) -> None:
        while not self._seen.is_set():
            try:
                data = self._reader.recv(64)
            except OSError:
                return
            if not data or self._STOP in data:
                return
            if bytes([signal.SIGINT]) in data:
                self._seen.set()
        time.sleep(self._grace_s)
        self.report()
        flush_logs()
        os._exit(EXIT_INTERRUPTED)  # past the grace: threads blocked in C would hold up a normal exit

    def seen(self) -> bool:
        """Whether Ctrl-C was pressed (also when a command handled SIGINT itself and returned)."""
        if not self._seen.is_set():
            # The byte may not have reached the watching thread yet; whichever thread reads it, tells.
            with contextlib.suppress(OSError):
                if bytes([signal.SIGINT]) in self._reader.recv(64, socket.MSG_DONTWAIT):
                    self._seen.set()
        return self._seen.is_set()

    def report(self) -> None:
        """Print "interrupted" on standard error, once per process."""
        if self._reported.acquire(blocking=False):
            os.write(2, b"interrupted\n")

    def uninstall(self) -> None:
        """Stop watching (after a command that ended without Ctrl-C)."""
        signal.set_wakeup_fd(self._previous_fd)
        self._writer.send(self._STOP)
        self._thread.join()
        self._reader.close()
        self._writer.close()


# The optional dependencies (pyproject's extras) and the modules each brings: the cleaner, the audit
# and the stack install without them, so the commands that need one check before they start.
EXTRAS: dict[str, tuple[str, ...]] = {"vacuum": ("pyspark", "pyorc", "numpy"), "plot": ("matplotlib",)}


def require_extra(extra: str, command: str) -> None:
    """Exit 1 with one line naming the extra to install when a module of ``extra`` does not import."""
    for module in EXTRAS[extra]:
        try:
            importlib.import_module(module)
        except ImportError:
            click.echo(f"error: {command} needs the {extra} extra: pip install 'acidclean[{extra}]'", err=True)
            sys.exit(EXIT_FAILED)


def service_unavailable(error: AcidCleanError) -> bool:
    """Whether ``error`` says a service did not answer (exit 4) rather than refused or failed (exit 1).

    Kafka's are :class:`ServiceUnavailableError`; the metastore client says "cannot reach" when no URI
    accepts a connection, and chains the socket error when a connection broke twice during a call.
    """
    if any(kind.__name__ == "ServiceUnavailableError" for kind in type(error).__mro__):
        return True  # not imported: acidclean.shared.bus.kafka_errors loads confluent-kafka
    if type(error).__name__ == "MetastoreError":
        cause = error.__cause__
        return (
            str(error).startswith("cannot reach the Hive Metastore")
            or isinstance(cause, (OSError, EOFError))
            or (cause is not None and type(cause).__name__ == "TTransportException")
        )
    return False


# The watchdog of this process: signals and their wakeup descriptor are per process, not per command.
_watchdog: InterruptWatchdog | None = None


def _interrupted() -> NoReturn:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not turn the exit into a traceback
    if _watchdog is not None:
        _watchdog.report()
    else:
        click.echo("interrupted", err=True)
    sys.exit(EXIT_INTERRUPTED)


# (module, attribute) of every sub-command; a module is imported only when the CLI starts.
COMMANDS: tuple[tuple[str, str], ...] = (
    ("acidclean.cli.stack", "stack"),
    ("acidclean.cli.demo", "demo"),
    ("acidclean.cli.acid", "acid_state"),
    ("acidclean.cli.acid", "scan"),
    ("acidclean.cli.audit", "audit"),
    ("acidclean.cli.undo", "undo"),
    ("acidclean.cli.cleaner", "cleaner"),
    ("acidclean.cli.initiator", "initiator"),
    ("acidclean.cli.hive_queue", "hive_queue"),
    ("acidclean.cli.producers", "vacuum"),
    ("acidclean.cli.producers", "create_table"),
    ("acidclean.cli.producers", "ingest"),
    ("acidclean.cli.producers", "read"),
    ("acidclean.cli.producers", "outbox"),
    ("acidclean.cli.vacuum_service", "vacuum_service"),
    ("acidclean.cli.vacuum_service", "vacuum_request"),
)


class _Group(click.Group):
    def main(self, *args: Any, **kwargs: Any) -> Any:
        global _watchdog
        _watchdog = InterruptWatchdog.install()
        try:
            return super().main(*args, **kwargs)
        except SystemExit:
            if _watchdog is not None and _watchdog.seen():  # a command that stopped on Ctrl-C by itself
                _interrupted()
            raise
        finally:
            if _watchdog is not None and not _watchdog.seen():
                _watchdog.uninstall()
                _watchdog = None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            _interrupted()
        except ConfigurationError as error:
            click.echo(f"error: {error}", err=True)
            sys.exit(EXIT_USAGE)
        except AcidCleanError as error:
            click.echo(f"error: {error}", err=True)
            sys.exit(EXIT_UNAVAILABLE if service_unavailable(error) else EXIT_FAILED)


@click.group(
    cls=_Group,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=examples(
        "acidclean stack up",
        "acidclean vacuum sales.orders --partition ds=2026-11-22",
        "acidclean audit sales.orders",
    )
    + "\n\n"
    + EXIT_CODES
    + '\n\nShell completion (bash; zsh and fish alike): eval "$(_ACIDCLEAN_COMPLETE=bash_source acidclean)"',
)
@click.version_option(package_name="acidclean")
def main() -> None:
    """An event-driven cleaner for Hive ACID tables.

    Vacuum (compact) a table, let the cleaners delete what the vacuum made obsolete once no reader
    needs it, audit what happened. Run `acidclean COMMAND -h` for a command's options and examples.
    """


for _module, _attribute in COMMANDS:
    main.add_command(getattr(importlib.import_module(_module), _attribute))
