"""Storage: the :class:`FileSystem` interface, one module per backend, and a registry by URI scheme.

- :mod:`.interface`: the protocol and its plain values (no pyarrow, no backend);
- :mod:`.arrow`: :class:`ArrowFileSystem` over ``pyarrow.fs``, the base of every backend, and local paths;
- :mod:`.hdfs`, :mod:`.s3`: one backend each, importing only :mod:`.arrow` and :mod:`.interface`;
- :mod:`.registry`: scheme -> backend, and :func:`open_location`.

The interface's names load eagerly; the others on first use, so that importing the interface (as the
pure rules and the unit tests' fakes do) loads no pyarrow (tests/unit/test_pure_rules.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from acidclean.shared.storage.interface import Entry, FileSystem, ListedFile, StorageError, TreeSize, file_difference

if TYPE_CHECKING:
    from acidclean.shared.storage.arrow import ArrowFileSystem, normalise_uri
    from acidclean.shared.storage.registry import (
        BACKENDS,
        STORAGE_ENV_PREFIXES,
        Opener,
        StorageLocation,
        location_scheme,
        open_location,
        register_backend,
        storage_environment,
    )

_LAZY = {
    "ArrowFileSystem": "arrow",
    "normalise_uri": "arrow",
    "BACKENDS": "registry",
    "STORAGE_ENV_PREFIXES": "registry",
    "Opener": "registry",
    "StorageLocation": "registry",
    "location_scheme": "registry",
    "open_location": "registry",
    "register_backend": "registry",
    "storage_environment": "registry",
}

__all__ = [
    "BACKENDS",
    "STORAGE_ENV_PREFIXES",
    "ArrowFileSystem",
    "Entry",
    "FileSystem",
    "ListedFile",
    "Opener",
    "StorageError",
    "StorageLocation",
    "TreeSize",
    "file_difference",
    "location_scheme",
    "normalise_uri",
    "open_location",
    "register_backend",
    "storage_environment",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
