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

A commit that must not happen is *set aside*: its marker is renamed ``_SET_ASIDE.json`` (keeping the
draft and saying why), which makes the staging directory an ordinary leftover that no later vacuum
tries to finish and that the abandoned-staging window removes. That happens when the vacuum lost its
vacuum lock just before its rename (fencing), when another vacuum committed one of its target names
first (a collision), and when recovery finds that another writer put directories over the write ids
of an interrupted commit since it was planned. One log line says which; nothing a leftover holds ever
stops another vacuum (docs/design.md section 7, rule 6).

A minor vacuum with deletes commits two directories, ``delete_delta_M_N`` then ``delta_M_N`` (the
order of Hive's ``CompactorOutputCommitter``), and a reader that lists between the two renames (a few
milliseconds) sees the delete delta alone, which hides the single deltas it covers. Hive 3 has the
same window; Hive 4 closes it by naming compactor output ``_v<txn>`` and committing a transaction,
which Hive 2 and 3 readers cannot parse. Every other vacuum commits one directory, atomically.
Task output is written under its final name, so Spark speculation (off by default) must stay off.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

from acidclean.shared.acid.names import BASE_PREFIX, parse_directory_name
from acidclean.shared.acid.overlaps import conflicting_directories
from acidclean.shared.errors import AcidLayoutError, VacuumError
from acidclean.shared.orc.version_file import write_acid_version_file, write_compacted_marker
from acidclean.shared.vacuum_marker import VACUUM_MARKER, VacuumMarker

STAGING_PREFIX = "_tmp_acidclean_"
COMMIT_MARKER = "_COMMITTING.json"
SET_ASIDE_MARKER = "_SET_ASIDE.json"

LOGGER = logging.getLogger(__name__)


class CommitCollision(VacuumError):
    """Another vacuum committed one of this commit's target names first; the commit was set aside."""


def staging_name(job_id: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in job_id)
    return f"{STAGING_PREFIX}{safe}"


def _join(directory: str, name: str) -> str:
    return f"{directory.rstrip('/')}/{name}"


def _exists(fs: pafs.FileSystem, path: str) -> bool:
    return bool(fs.get_file_info(path).type != pafs.FileType.NotFound)


def finish_directories(fs: pafs.FileSystem, staging_dir: str, targets: Sequence[str]) -> list[str]:
    """Give every staged target directory the side files Hive's compactor gives its output: the
    ``_orc_acid_version`` of every directory, and a base's ``_metadata_acid`` (``compacted``). Create the
    insert target even when every row was deleted: an empty base still supersedes what it compacted.
    Returns the targets that exist in staging, in commit order."""
    present = []
    for index, target in enumerate(targets):
        path = _join(staging_dir, target)
        is_insert_target = index == len(targets) - 1
        if not _exists(fs, path) and not is_insert_target:
            continue  # a delete delta no bucket had events for
        write_acid_version_file(fs, path)
        if target.startswith(BASE_PREFIX):
            write_compacted_marker(fs, path)
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


def set_aside(fs: pafs.FileSystem, staging_dir: str, reason: str) -> None:
    """Turn a staging directory's commit marker into a set-aside note: no vacuum will finish that
    commit, and the directory becomes a leftover the abandoned-staging window removes."""
    note = {"reason": reason, "set_aside_at": time.time()}
    marker = read_marker(fs, staging_dir)
    if marker is not None:
        note["draft"] = marker
    with fs.open_output_stream(_join(staging_dir, SET_ASIDE_MARKER)) as out:
        out.write(json.dumps(note, sort_keys=True).encode())
    if marker is not None:
        fs.delete_file(_join(staging_dir, COMMIT_MARKER))


def _collisions(fs: pafs.FileSystem, location: str, staging_dir: str, targets: Sequence[str]) -> list[str]:
    """Targets another vacuum committed: present in the location while this commit still holds them."""
    return [t for t in targets if _exists(fs, _join(location, t)) and _exists(fs, _join(staging_dir, t))]


def _rename_out(fs: pafs.FileSystem, location: str, staging_dir: str, targets: Sequence[str]) -> None:
    collided = _collisions(fs, location, staging_dir, targets)
    if collided:
        # Checked for every target before the first rename, so a collision never commits half a vacuum.
        reason = (
            f"another vacuum committed {', '.join(collided)} in {location} first; this vacuum's output is set "
            f"aside in {staging_dir} and removed by a later vacuum once quiet"
        )
        set_aside(fs, staging_dir, reason)
        raise CommitCollision(f"cannot commit: {reason}")
    for target in targets:
        source, destination = _join(staging_dir, target), _join(location, target)
        if _exists(fs, destination):
            continue  # renamed by an earlier attempt
        if not _exists(fs, source):
            raise VacuumError(f"cannot commit {target}: {source} is missing")
        try:
            fs.move(source, destination)
        except OSError as error:
            if _exists(fs, destination) and not _exists(fs, source):
                continue  # the vacuum that took over the lock finished this commit at the same moment
            raise VacuumError(f"cannot rename {source} to {destination}: {error}") from error


def write_vacuum_markers(fs: pafs.FileSystem, parent: str, targets: Sequence[str], draft: dict[str, Any]) -> None:
    """Mark each target directory (under ``parent``) as this vacuum's output, just before its commit."""
    vacuum_marker = VacuumMarker.from_draft(draft).to_bytes()
    for target in targets:
        with fs.open_output_stream(_join(_join(parent, target), VACUUM_MARKER)) as out:
            out.write(vacuum_marker)


def commit(
    fs: pafs.FileSystem,
    location: str,
    staging_dir: str,
    targets: Sequence[str],
    draft: dict[str, Any],
    fence: Callable[[], None] | None = None,
) -> None:
    """Mark each target as this vacuum's output, write the commit marker, call ``fence`` (which raises
    when the vacuum may no longer commit: the commit is then set aside), rename the targets out of
    staging in order, then remove the staging directory (only the marker is left in it by then)."""
    write_vacuum_markers(fs, staging_dir, targets, draft)
    _write_marker(fs, staging_dir, {**draft, "targets": list(targets)})
    if fence is not None:
        try:
            fence()
        except BaseException as error:
            set_aside(fs, staging_dir, f"fenced before its rename: {error}")
            raise
    _rename_out(fs, location, staging_dir, targets)
    if _exists(fs, staging_dir):  # a vacuum that took over this one's lock may have finished it already
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
    """Finish every commit of ``location`` that has a marker, or set it aside (one log line) when it
    can no longer be finished safely; leave other staging directories. Run it only while holding the
    location's vacuum lock: a commit finished meanwhile by nobody else is then this vacuum's to finish."""
    recovered = []
    for staging_dir in staging_directories(fs, location):
        try:
            draft = read_marker(fs, staging_dir)
        except (OSError, ValueError) as error:
            LOGGER.warning("setting aside %s: its commit marker cannot be read (%s)", staging_dir, error)
            set_aside(fs, staging_dir, f"unreadable commit marker: {error}")
            continue
        if draft is None:
            continue
        # The marker is data from storage: only plain ACID directory names are renamed.
        targets = [t for t in draft.get("targets", []) if isinstance(t, str) and _is_directory_name(t)]
        inputs = [i for i in draft.get("obsolete_directories", []) if isinstance(i, str)]
        listing = [info.base_name for info in fs.get_file_info(pafs.FileSelector(location, allow_not_found=True))]
        conflicts = conflicting_directories(listing, targets, inputs)
        if conflicts:
            reason = (
                f"{', '.join(conflicts)} now cover write ids of its {', '.join(targets)}: another vacuum or writer "
                "committed over them since this commit was planned, so finishing it would make rows appear twice"
            )
            LOGGER.warning("setting aside the interrupted commit in %s: %s", staging_dir, reason)
            set_aside(fs, staging_dir, reason)
            continue
        try:
            _rename_out(fs, location, staging_dir, targets)
        except VacuumError as error:
            LOGGER.warning("setting aside the interrupted commit in %s: %s", staging_dir, error)
            if not isinstance(error, CommitCollision):  # a collision set it aside already
                set_aside(fs, staging_dir, str(error))
            continue
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
    """Remove staging directories of vacuums that died while writing (docs/design.md section 7, rule 6).

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
