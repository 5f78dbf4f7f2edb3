"""Where the local stack keeps its tables on the local disk: a path every Hive reader reads.

Hive 4's ``AcidUtils`` skips every file whose path contains ``/.`` or ``/_`` (it takes them for
hidden or temporary files), so a table under ``./.stack/warehouse`` reads 0 rows in Hive 4, silently.
The warehouse is therefore ``<state dir>/warehouse`` only when no component of that absolute path
starts with ``.`` or ``_``; else beside the state directory, named after it without its leading dots
(``./stack-warehouse`` for the default ``.stack``); and when that folder too lies under such a
component (a project inside ``~/.local``), in the system's temporary directory, named after the state
directory's path, so ``acidclean stack up`` works from any folder.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

from acidclean.shared.errors import StackError


def hive_readable(path: Path) -> bool:
    """No component of the absolute ``path`` starts with ``.`` or ``_`` (Hive 4 would skip it)."""
    return not any(part.startswith((".", "_")) for part in path.resolve().parts[1:])


def local_warehouse(state_dir: Path) -> Path:
    """The local stack's warehouse folder for ``state_dir`` (see the module docstring)."""
    state_dir = state_dir.resolve()
    inside = state_dir / "warehouse"
    beside = state_dir.parent / f"{state_dir.name.lstrip('._') or 'acidclean'}-warehouse"
    digest = hashlib.sha256(str(state_dir).encode()).hexdigest()[:10]
    temporary = Path(tempfile.gettempdir()) / f"acidclean-warehouse-{digest}"
    for candidate in (inside, beside, temporary):
        if hive_readable(candidate):
            return candidate
    raise StackError(
        f"no warehouse folder for the stack in {state_dir} that Hive 4 would read: {inside}, {beside} and {temporary} "
        "all have a component starting with '.' or '_'; set TMPDIR to a folder without one, or use another --state-dir"
    )
