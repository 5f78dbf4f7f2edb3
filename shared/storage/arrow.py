"""Storage through ``pyarrow.fs``: :class:`ArrowFileSystem`, the base every backend extends, and the
local backend (plain paths and ``file:`` URIs).

:mod:`acidclean.shared.storage.hdfs` and :mod:`acidclean.shared.storage.s3` subclass
:class:`ArrowFileSystem`; this module imports neither (the registry chooses among them by scheme).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import quote

import pyarrow.fs as pafs

from acidclean.shared.storage.interface import Entry, ListedFile, StorageError, TreeSize


class ArrowFileSystem:
    """:class:`FileSystem` over a ``pyarrow.fs.FileSystem``."""

    def __init__(self, arrow: pafs.FileSystem) -> None:
        self.arrow = arrow
        self.is_local = isinstance(arrow, pafs.LocalFileSystem)

    def list_dir(self, path: str) -> list[Entry]:
        try:
            infos = self.arrow.get_file_info(pafs.FileSelector(path, recursive=False))
        except FileNotFoundError as error:
            raise StorageError(f"directory {path} does not exist") from error
        except OSError as error:
            raise StorageError(f"cannot list {path}: {error}") from error
        return [
            Entry(
                name=info.base_name,
                is_dir=info.type == pafs.FileType.Directory,
                size=int(info.size or 0),
                is_symlink=self.is_local and os.path.islink(info.path),
            )
            for info in infos
        ]

    def exists(self, path: str) -> bool:
        return bool(self.arrow.get_file_info(path).type != pafs.FileType.NotFound)

    def tree_size(self, path: str) -> TreeSize:
        infos = self.arrow.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
        files = [info for info in infos if info.type == pafs.FileType.File]
        return TreeSize(len(files), sum(int(info.size or 0) for info in files))

    def delete_dir(self, path: str) -> None:
        try:
            self.arrow.delete_dir(path)
        except FileNotFoundError:
            return  # already gone: deleting is idempotent
        except OSError as error:
            raise StorageError(f"cannot delete {path}: {error}") from error

    def rename(self, source: str, target: str) -> None:
        if self.exists(target):
            raise StorageError(f"cannot rename {source} to {target}: the target exists")
        try:
            self.arrow.move(source, target)
        except OSError as error:
            raise StorageError(f"cannot rename {source} to {target}: {error}") from error

    def make_dirs(self, path: str) -> None:
        self.arrow.create_dir(path, recursive=True)

    def read_file(self, path: str) -> bytes | None:
        try:
            with self.arrow.open_input_stream(path) as stream:
                data: bytes = stream.read()
                return data
        except FileNotFoundError:
            return None
        except OSError as error:
            if not self.exists(path):
                return None
            raise StorageError(f"cannot read {path}: {error}") from error

    def real_path(self, path: str) -> str:
        """The path with symlinks resolved (local storage; HDFS and S3 have none to follow)."""
        return os.path.realpath(path) if self.is_local else path

    def list_files(self, path: str) -> list[ListedFile]:
        """Locally the inode, device, size and modification time (ns) of each file, a symbolic link
        as itself (never followed); elsewhere pyarrow's size and modification time."""
        if self.is_local:
            return _local_files(path)
        try:
            infos = self.arrow.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
        except OSError as error:
            raise StorageError(f"cannot list {path}: {error}") from error
        start = len(path.rstrip("/")) + 1
        return [
            ListedFile(info.path[start:], int(info.size or 0), f"mtime_ns={info.mtime_ns}")
            for info in infos
            if info.type == pafs.FileType.File
        ]

    def delete_files(self, path: str, names: list[str]) -> None:
        for name in names:
            full = f"{path.rstrip('/')}/{name}"
            try:
                if self.is_local:
                    os.unlink(full)  # a symbolic link itself, never its target
                else:
                    self.arrow.delete_file(full)
            except FileNotFoundError:
                continue
            except OSError as error:
                raise StorageError(f"cannot delete {full}: {error}") from error

    def delete_empty_dir(self, path: str) -> bool:
        if self.is_local:
            return _remove_empty_tree(path)
        if self.list_files(path):
            return False
        self.delete_dir(path)  # only directories were listed under it
        return True


def normalise_uri(uri: str) -> str:
    """A metastore location as the URI pyarrow wants. Hive writes Hadoop ``Path`` strings: local
    locations as ``file:/path``, and paths not percent-encoded: the directory of the partition
    ``city=St. John's#2`` is literally ``city=St. John%27s%232``, spaces and ``%`` included. pyarrow
    wants ``file:///path`` and decodes ``%XX``, so the path is percent-encoded here."""
    scheme, _, rest = uri.partition(":")
    if rest.startswith("//"):
        authority, slash, path = rest[2:].partition("/")
        path = slash + path
    else:
        authority, path = "", rest
    if scheme.lower() == "s3a":
        scheme = "s3"
    return f"{scheme}://{authority}{quote(path, safe='/')}"


def open_local(uri: str, environ: Mapping[str, str] | None = None) -> tuple[ArrowFileSystem, str]:
    """The local file system and the path of a plain path (made absolute) or a ``file:`` URI."""
    if "://" not in uri and not uri.startswith("file:"):
        return ArrowFileSystem(pafs.LocalFileSystem()), os.path.abspath(uri)
    return open_arrow_uri(uri, environ)


def open_arrow_uri(uri: str, environ: Mapping[str, str] | None = None) -> tuple[ArrowFileSystem, str]:
    """The file system pyarrow itself makes for ``uri`` (``file:``, and a scheme no backend registers)."""
    try:
        arrow, path = pafs.FileSystem.from_uri(normalise_uri(uri))
    except (OSError, ValueError) as error:
        raise StorageError(
            f"cannot open storage location {uri}: {error}. Supported: local paths, file:, hdfs://, s3:// and s3a://"
        ) from error
    return ArrowFileSystem(arrow), path


def _local_files(path: str) -> list[ListedFile]:
    if os.path.islink(path):
        # os.walk would list the target's files; an obsolete directory is never a link (rule 4).
        raise StorageError(f"{path} is a symbolic link, not a directory of the table; nothing under it is deleted")
    files: list[ListedFile] = []
    start = len(path.rstrip("/")) + 1
    try:
        for directory, subdirectories, names in os.walk(path, onerror=_raise):
            for name in names + [d for d in subdirectories if os.path.islink(os.path.join(directory, d))]:
                full = os.path.join(directory, name)
                try:
                    stat = os.lstat(full)
                except FileNotFoundError:
                    continue
                identity = f"ino={stat.st_ino},dev={stat.st_dev},mtime_ns={stat.st_mtime_ns}"
                files.append(ListedFile(full[start:], stat.st_size, identity))
    except FileNotFoundError:
        return []
    except OSError as error:
        raise StorageError(f"cannot list {path}: {error}") from error
    return files


def _raise(error: OSError) -> None:
    raise error


def _remove_empty_tree(path: str) -> bool:
    """``rmdir`` from the deepest directory up: refused by the kernel when anything is left, so a
    file written meanwhile is never removed."""
    try:
        for directory, _, _ in sorted(os.walk(path, onerror=_raise), key=lambda item: -item[0].count("/")):
            os.rmdir(directory)
    except FileNotFoundError:
        return not os.path.lexists(path)
    except OSError:
        return False
    return True
