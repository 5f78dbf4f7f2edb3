"""``python -m acidclean``: the same command line as ``acidclean``."""

from acidclean.cli import main

main()
