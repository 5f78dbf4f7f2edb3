"""``python -m acidclean`` and the ``acidclean`` command: the command line of :mod:`acidclean.cli`.

Importing the command line takes a second or more (every command's modules, pyarrow, the Kafka
client), longer on a busy machine, and its Ctrl-C handling is installed only once it is imported: a
Ctrl-C before that ends the same way, exit 130 and the one line "interrupted", not a traceback.
"""

from __future__ import annotations

import sys

# acidclean.cli.EXIT_INTERRUPTED (128 + SIGINT), written out: that module is what may be interrupted.
EXIT_INTERRUPTED = 130


def run() -> None:
    """Import the command line and run it; a Ctrl-C while importing it exits as the CLI would."""
    try:
        from acidclean.cli import main
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(EXIT_INTERRUPTED) from None
    main()


if __name__ == "__main__":
    run()
