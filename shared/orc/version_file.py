"""The side files Hive writes beside a base's or delta's ORC files: ``_orc_acid_version`` (Hive 3+, in
every base and delta) and ``_metadata_acid`` (its compactor's mark of a compacted base). Apart from the
ORC writer (pyorc, numpy: the vacuum extra) because committing and recovering a vacuum's directories,
which the base install's ``acidclean outbox flush`` does, writes only these files."""

from __future__ import annotations

import pyarrow.fs as pafs

from acidclean.shared.acid.events import ORC_ACID_VERSION
from acidclean.shared.acid.names import COMPACTED_METADATA, METADATA_FILE, ORC_ACID_VERSION_FILE


def write_acid_version_file(fs: pafs.FileSystem, directory: str, version: int = ORC_ACID_VERSION) -> None:
    """The ``_orc_acid_version`` side file Hive 3+ writes into every base and delta."""
    fs.create_dir(directory, recursive=True)
    with fs.open_output_stream(f"{directory}/{ORC_ACID_VERSION_FILE}") as out:
        out.write(str(version).encode())


def write_compacted_marker(fs: pafs.FileSystem, directory: str) -> None:
    """The ``_metadata_acid`` Hive's compactor writes into a base it made: readers of Hive 3 and 4 then
    take the base for compacted (readable only where every id up to its own is in their history)
    instead of an insert overwrite's (readable once its write id committed)."""
    fs.create_dir(directory, recursive=True)
    with fs.open_output_stream(f"{directory}/{METADATA_FILE}") as out:
        out.write(COMPACTED_METADATA)


__all__ = ["write_acid_version_file", "write_compacted_marker"]
