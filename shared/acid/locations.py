"""When two table or partition locations are the same directory, or one lies inside the other.

Safety rule 8 (docs/design.md section 7): locks, lock snapshots and the vacuum lock are about directories,
not names. A partition added with ``LOCATION`` pointing at another partition's directory (a "latest"
alias), or two tables created on one ``LOCATION``, read and write the same ACID directories under
different names; whatever guards one name must guard them all.

Locations are compared as the metastore stores them (Hadoop ``Path`` strings), after a pure
normalisation: ``file:`` and ``file://localhost`` mean a plain path, ``.``/``..``/repeated and trailing
slashes are folded, scheme and host are compared without case. Every doubt is resolved towards
"overlapping", because a false overlap only makes a cleanup wait for one more reader or one vacuum wait
for another, while a missed one deletes under a reader:

- paths are compared without case (HDFS and S3 are case sensitive, but a case-insensitive store or a
  metastore that lower-cased a name would otherwise hide an overlap);
- a path is compared both as written and percent-decoded (``file:/a%20b`` is ``/a b``; a Hive-escaped
  partition value such as ``p=a%2Fb`` then also overlaps ``p=a``);
- a location without a scheme (resolved against the cluster's default file system) or without a host
  (``hdfs:///x``: the default name node) may be on any store of that scheme; ``s3``, ``s3a`` and ``s3n``
  are one store; ports are ignored.

Symbolic links are not followed here (no I/O): rule 4 already refuses to delete through one.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from urllib.parse import unquote

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(.*)$", re.DOTALL)
_SAME_STORE = {"s3a": "s3", "s3n": "s3"}


@dataclass(frozen=True)
class Location:
    """A location split into the store it is on and its normalised absolute path."""

    scheme: str | None  # None: a plain path (or ``file:``)
    host: str | None  # None: no authority (the default of the scheme)
    path: str  # absolute, no trailing slash except for the root itself

    def __str__(self) -> str:
        if self.scheme is None:
            return self.path
        return f"{self.scheme}://{self.host or ''}{self.path}"


def _clean_path(path: str) -> str:
    folded = posixpath.normpath("/" + path.lstrip("/"))
    return "/" + folded.lstrip("/")  # normpath keeps a leading '//'; one is enough


def parse_location(uri: str) -> Location:
    """``uri`` (``hdfs://nn:8020/w/t``, ``file:/w/t/``, ``/w/t``) normalised; see the module docstring."""
    match = _SCHEME.match(uri)
    if match is None or len(match.group(1)) == 1:  # one letter: a Windows drive, read as a path
        return Location(None, None, _clean_path(uri))
    scheme, rest = match.group(1).lower(), match.group(2)
    host: str | None = None
    if rest.startswith("//"):
        authority, slash, path = rest[2:].partition("/")
        rest = slash + path
        host_port = authority.rpartition("@")[2]
        host, colon, port = host_port.rpartition(":")
        if not colon or not port.isdigit():
            host = host_port
        host = host.lower() or None
    if scheme == "file":  # a host in a file URI names no other store acidclean can reach: ignore it
        return Location(None, None, _clean_path(rest))
    return Location(_SAME_STORE.get(scheme, scheme), host, _clean_path(rest))


def normalise_location(uri: str) -> str:
    """``uri`` in one spelling: ``file:///w/t/`` and ``/w//t`` are both ``/w/t``. Idempotent."""
    return str(parse_location(uri))


def _same_store(first: Location, second: Location) -> bool:
    if first.scheme is None or second.scheme is None:
        return True
    if first.scheme != second.scheme:
        return False
    return first.host is None or second.host is None or first.host == second.host


def _paths_overlap(first: str, second: str) -> bool:
    if first == second or first == "/" or second == "/":
        return True
    return first.startswith(second + "/") or second.startswith(first + "/")


def locations_overlap(first: str, second: str) -> bool:
    """True when ``first`` and ``second`` may be the same directory or one may lie inside the other."""
    a, b = parse_location(first), parse_location(second)
    if not _same_store(a, b):
        return False
    pa, pb = a.path.casefold(), b.path.casefold()
    if _paths_overlap(pa, pb):
        return True
    return _paths_overlap(_clean_path(unquote(pa)).casefold(), _clean_path(unquote(pb)).casefold())
