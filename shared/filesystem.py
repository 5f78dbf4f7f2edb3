"""What acidclean needs of storage: the :class:`FileSystem` protocol and its plain values.

Nothing here touches storage or imports pyarrow; the cleaner's rules and the unit tests' fakes use
these types alone. :mod:`acidclean.shared.arrow_filesystem` implements the protocol over
``pyarrow.fs`` for local paths, HDFS and S3.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from acidclean.shared.errors import AcidCleanError


@dataclass(frozen=True)
class Entry:
    """One child of a directory."""

    name: str
    is_dir: bool
    size: int
    is_symlink: bool = False


@dataclass(frozen=True)
class TreeSize:
    files: int
    bytes: int


class FileSystem(Protocol):
    """The storage operations of acidclean, on absolute paths of one file system."""

    def list_dir(self, path: str) -> list[Entry]: ...

    def exists(self, path: str) -> bool: ...

    def tree_size(self, path: str) -> TreeSize: ...

    def delete_dir(self, path: str) -> None: ...

    def rename(self, source: str, target: str) -> None: ...

    def make_dirs(self, path: str) -> None: ...

    def real_path(self, path: str) -> str: ...

    def read_file(self, path: str) -> bytes | None:
        """A small file's bytes, or None if it does not exist."""
        ...


class StorageError(AcidCleanError):
    """A storage call failed."""
