"""Commit a vacuum's new directories atomically, and finish a commit a crash interrupted.

A vacuum writes everything under ``_tmp_acidclean_<job>/`` beside its target directories: the name
starts with ``_``, so Hive, Trino and acidclean's own reader never look inside. Committing is a
rename of each new directory out of it; a rename is atomic on HDFS and local file systems, so a
reader sees either the old directories or a complete new one. Before the first rename a marker
(``_COMMITTING.json``, holding the vacuum's event draft) is written into the staging directory; a
later run that finds the marker finishes the renames a crash interrupted and publishes the event.
A staging directory without the marker is a vacuum that died while writing (or one still running):
it is left alone while it may still be written, and removed by a later vacuum of the same location
once nothing in it has changed for the abandoned-staging window (``abandoned_staging_s``, one hour by
default: far longer than any write of a running vacuum stays quiet).

A minor vacuum with deletes commits two directories, ``delete_delta_M_N`` then ``delta_M_N`` (the
order of Hive's ``CompactorOutputCommitter``), and a reader that lists between the two renames (a few
milliseconds) sees the delete delta alone, which hides the single deltas it covers. Hive 3 has the
same window; Hive 4 closes it by naming compactor output ``_v<txn>`` and committing a transaction,
which Hive 2 and 3 readers cannot parse. Every other vacuum commits one directory, atomically.
Task output is written under its final name, so Spark speculation (off by default) must stay off.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

from acidclean.shared.acid.names import parse_directory_name
from acidclean.shared.errors import AcidLayoutError, VacuumError
from acidclean.shared.orc.version_file import write_acid_version_file
from acidclean.shared.vacuum_marker import VACUUM_MARKER, VacuumMarker

STAGING_PREFIX = "_tmp_acidclean_"
COMMIT_MARKER = "_COMMITTING.json"


def staging_name(job_id: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in job_id)
    return f"{STAGING_PREFIX}{safe}"


def _join(directory: str, name: str) -> str:
    return f"{directory.rstrip('/')}/{name}"


def _exists(fs: pafs.FileSystem, path: str) -> bool:
    return bool(fs.get_file_info(path).type != pafs.FileType.NotFound)


def finish_directories(fs: pafs.FileSystem, staging_dir: str, targets: Sequence[str]) -> list[str]:
    """Give every staged target directory its ``_orc_acid_version`` side file (and create the insert
    target even when every row was deleted: an empty base still supersedes what it compacted).
    Returns the targets that exist in staging, in commit order."""
    present = []
    for index, target in enumerate(targets):
        path = _join(staging_dir, target)
        is_insert_target = index == len(targets) - 1
        if not _exists(fs, path) and not is_insert_target:
            continue  # a delete delta no bucket had events for
        write_acid_version_file(fs, path)
        present.append(target)
    return present


def _write_marker(fs: pafs.FileSystem, staging_dir: str, draft: dict[str, Any]) -> None:
    with fs.open_output_stream(_join(staging_dir, COMMIT_MARKER)) as out:
        out.write(json.dumps(draft, sort_keys=True).encode())


def read_marker(fs: pafs.FileSystem, staging_dir: str) -> dict[str, Any] | None:
    path = _join(staging_dir, COMMIT_MARKER)
    if not _exists(fs, path):
        return None
    with fs.open_input_stream(path) as stream:
        loaded: dict[str, Any] = json.loads(stream.read())
    return loaded


def _rename_out(fs: pafs.FileSystem, location: str, staging_dir: str, targets: Sequence[str]) -> None:
    for target in targets:
        source, destination = _join(staging_dir, target), _join(location, target)
        if _exists(fs, destination):
            if _exists(fs, source):
                raise VacuumError(
                    f"cannot commit {target}: {destination} already exists (another vacuum of the same "
                    f"table committed it); this vacuum's output stays in {staging_dir}"
                )
            continue  # renamed by an earlier attempt
        if not _exists(fs, source):
            raise VacuumError(f"cannot commit {target}: {source} is missing")
        try:
            fs.move(source, destination)
        except OSError as error:
            raise VacuumError(f"cannot rename {source} to {destination}: {error}") from error


def write_vacuum_markers(fs: pafs.FileSystem, parent: str, targets: Sequence[str], draft: dict[str, Any]) -> None:
    """Mark each target directory (under ``parent``) as this vacuum's output, just before its commit."""
    vacuum_marker = VacuumMarker.from_draft(draft).to_bytes()
    for target in targets:
        with fs.open_output_stream(_join(_join(parent, target), VACUUM_MARKER)) as out:
            out.write(vacuum_marker)


def commit(fs: pafs.FileSystem, location: str, staging_dir: str, targets: Sequence[str], draft: dict[str, Any]) -> None:
    """Mark each target as this vacuum's output, write the commit marker, rename the targets out of
    staging in order, then remove the staging directory (only the marker is left in it by then)."""
    write_vacuum_markers(fs, staging_dir, targets, draft)
    _write_marker(fs, staging_dir, {**draft, "targets": list(targets)})
    _rename_out(fs, location, staging_dir, targets)
    fs.delete_dir(staging_dir)


@dataclass(frozen=True)
class Recovered:
    """A commit a crash interrupted, now finished: its staging directory and event draft."""

    staging_dir: str
    draft: dict[str, Any]


def _is_directory_name(name: str) -> bool:
    try:
        return "/" not in name and parse_directory_name(name) is not None
    except AcidLayoutError:
        return False


def staging_directories(fs: pafs.FileSystem, location: str) -> list[str]:
    infos = fs.get_file_info(pafs.FileSelector(location, allow_not_found=True))
    return sorted(
        info.path
        for info in infos
        if info.type == pafs.FileType.Directory and info.base_name.startswith(STAGING_PREFIX)
    )


def recover_commits(fs: pafs.FileSystem, location: str) -> list[Recovered]:
    """Finish every commit of ``location`` that has a marker; leave other staging directories."""
    recovered = []
    for staging_dir in staging_directories(fs, location):
        draft = read_marker(fs, staging_dir)
        if draft is None:
            continue
        # The marker is data from storage: only plain ACID directory names are renamed.
        targets = [t for t in draft.get("targets", []) if isinstance(t, str) and _is_directory_name(t)]
        _rename_out(fs, location, staging_dir, targets)
        fs.delete_dir(staging_dir)
        recovered.append(Recovered(staging_dir, draft))
    return recovered


def _last_written_s(fs: pafs.FileSystem, staging_dir: str) -> float:
    """The newest modification time of the staging directory or anything in it (epoch seconds)."""
    infos = [fs.get_file_info(staging_dir), *fs.get_file_info(pafs.FileSelector(staging_dir, recursive=True))]
    times = [info.mtime.timestamp() for info in infos if info.mtime is not None]
    return max(times, default=0.0)


def remove_abandoned_staging(
    fs: pafs.FileSystem, location: str, older_than_s: float, now_s: float | None = None
) -> list[str]:
    """Remove staging directories of vacuums that died while writing (DESIGN.md section 7, rule 6).

    Only this module's own ``_tmp_acidclean_`` directories without a commit marker qualify, and only
    once nothing in them changed for ``older_than_s``: a younger one may belong to a vacuum still
    running, and a marked one holds a commit to finish (:func:`recover_commits`).
    """
    now_s = time.time() if now_s is None else now_s
    removed = []
    for staging_dir in staging_directories(fs, location):
        if read_marker(fs, staging_dir) is not None:
            continue
        if now_s - _last_written_s(fs, staging_dir) < older_than_s:
            continue
        fs.delete_dir(staging_dir)
        removed.append(staging_dir)
    return removed
