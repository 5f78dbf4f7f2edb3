"""The ``_orc_acid_version`` side file Hive 3+ writes into every base and delta. Apart from the ORC
writer (pyorc, numpy: the vacuum extra) because committing and recovering a vacuum's directories,
which the base install's ``acidclean outbox flush`` does, writes only this file."""

from __future__ import annotations

import pyarrow.fs as pafs

from acidclean.shared.acid.events import ORC_ACID_VERSION
from acidclean.shared.acid.names import ORC_ACID_VERSION_FILE


def write_acid_version_file(fs: pafs.FileSystem, directory: str, version: int = ORC_ACID_VERSION) -> None:
    """The ``_orc_acid_version`` side file Hive 3+ writes into every base and delta."""
    fs.create_dir(directory, recursive=True)
    with fs.open_output_stream(f"{directory}/{ORC_ACID_VERSION_FILE}") as out:
        out.write(str(version).encode())


__all__ = ["write_acid_version_file"]
