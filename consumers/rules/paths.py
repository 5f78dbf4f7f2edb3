"""Rule 4 (docs/design.md section 7): what may be deleted is a direct child of the table's location, named
by the ACID grammar, not a symbolic link, under the tenant's allowed roots and not under another
tenant's; ``..`` anywhere is refused outright, percent-encoded or not, and on HDFS and object stores
so are ``.`` and empty path segments. Roots and locations compare scheme (``s3a`` is ``s3``),
authority (the bucket or the NameNode) and path.

The event's location must be the one the *metastore* gives; roots are compared as written and with
symbolic links resolved. Pure: callers pass the locations and resolved paths.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

from acidclean.consumers.rules.verdicts import Refusal
from acidclean.schemas.events import VacuumCommitted
from acidclean.shared.errors import UnsafePathError


@dataclass(frozen=True)
class StoragePath:
    """A location as scheme, authority and a normalised absolute path, comparable across spellings
    (``file:/w/t``, ``file:///w/t`` and ``/w/t`` are the same; ``s3a://`` is ``s3://``)."""

    scheme: str
    authority: str
    path: str

    def is_under(self, root: StoragePath) -> bool:
        """Strictly below ``root`` (a location equal to a root is not inside it)."""
        if (self.scheme, self.authority) != (root.scheme, root.authority) or self.path == root.path:
            return False
        return root.path == "/" or self.path.startswith(root.path + "/")

    def __str__(self) -> str:
        if self.scheme == "file" and not self.authority:
            return self.path
        return f"{self.scheme}://{self.authority}{self.path}"


_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "": "file"}


def storage_path(uri: str) -> StoragePath:
    """Parse a location; raises :class:`UnsafePathError` for ``..``, a relative path, a NUL byte or
    anything ``urlparse`` cannot parse (e.g. ``hdfs://[nn/x``, an unclosed IPv6 bracket)."""
    if "\x00" in uri or not uri.strip():
        raise UnsafePathError(f"location {uri!r} is empty or holds a NUL byte")
    try:
        parsed = urlparse(uri)
    except ValueError as error:  # a location nobody can resolve is refused like any other unsafe one
        raise UnsafePathError(f"location {uri!r} is not a valid URI ({error})") from None
    scheme = parsed.scheme.lower()
    scheme = _SCHEME_ALIASES.get(scheme, scheme)
    authority = parsed.netloc.lower()
    if scheme == "file" and authority == "localhost":
        authority = ""
    raw_path = parsed.path
    segments = raw_path.split("/")
    if ".." in segments:
        raise UnsafePathError(f"location {uri!r} contains '..'")
    if any(unquote(segment) in (".", "..") for segment in segments if "%" in segment):
        raise UnsafePathError(f"location {uri!r} contains an encoded '.' or '..' segment")
    if not raw_path.startswith("/"):
        raise UnsafePathError(f"location {uri!r} is not an absolute path")
    if scheme != "file" and ("." in segments or "" in segments[1:-1]):
        # Object store keys and HDFS paths are taken as written by some calls and normalised by
        # others (pyarrow's S3 client drops '.' from single-object requests, not from listings), so
        # the checked path and the deleted keys could differ.
        raise UnsafePathError(f"location {uri!r} contains a '.' or an empty path segment")
    return StoragePath(scheme, authority, posixpath.normpath(raw_path).replace("//", "/"))


@dataclass(frozen=True)
class TenantRoots:
    """Every tenant's allowed roots, as declared and with symbolic links resolved."""

    tenant: str
    declared: Mapping[str, tuple[StoragePath, ...]]
    resolved: Mapping[str, tuple[StoragePath, ...]]

    @classmethod
    def build(
        cls, tenant: str, allowed_roots: Mapping[str, Sequence[str]], real_path: Callable[[str], str] = lambda p: p
    ) -> TenantRoots:
        """``real_path`` resolves a local root's symbolic links (identity elsewhere)."""
        declared: dict[str, tuple[StoragePath, ...]] = {}
        resolved: dict[str, tuple[StoragePath, ...]] = {}
        for name, roots in allowed_roots.items():
            paths = tuple(storage_path(root) for root in roots)
            declared[name] = paths
            resolved[name] = tuple(storage_path(real_path(p.path)) if p.scheme == "file" else p for p in paths)
        return cls(tenant, declared, resolved)

    def own(self) -> tuple[StoragePath, ...]:
        return self.declared.get(self.tenant, ())

    def check(self, location: StoragePath, real_location: StoragePath) -> Refusal | None:
        """Refuse a location outside this tenant's roots, or inside another tenant's narrower root,
        as written and with symbolic links resolved."""
        for roots, where, shown in ((self.declared, location, ""), (self.resolved, real_location, " (links resolved)")):
            refusal = self._check(roots, where, shown)
            if refusal is not None:
                return refusal
        return None

    def _check(self, roots: Mapping[str, tuple[StoragePath, ...]], where: StoragePath, shown: str) -> Refusal | None:
        best_own = _deepest(roots.get(self.tenant, ()), where)
        for other, other_roots in roots.items():
            if other == self.tenant:
                continue
            best_other = _deepest(other_roots, where)
            if best_other is not None and (best_own is None or len(best_other.path) > len(best_own.path)):
                return Refusal(
                    "other_tenant",
                    f"location {where}{shown} lies under {best_other}, an allowed root of tenant {other!r}, "
                    f"not of tenant {self.tenant!r}; nothing deleted",
                )
        if best_own is None:
            allowed = ", ".join(str(root) for root in roots.get(self.tenant, ())) or "none configured"
            return Refusal(
                "unsafe_path",
                f"location {where}{shown} is not under an allowed root of tenant {self.tenant!r} "
                f"({allowed}); nothing deleted",
            )
        return None


def _deepest(roots: Sequence[StoragePath], where: StoragePath) -> StoragePath | None:
    containing = [root for root in roots if where.is_under(root)]
    return max(containing, key=lambda root: len(root.path)) if containing else None


def plain_name_problem(name: str) -> str | None:
    if "/" in name or "\\" in name or "\x00" in name or name in (".", "..") or ".." in name:
        return f"{name!r} is not a plain directory name (a path separator or '..')"
    return None


def check_location(
    vacuum: VacuumCommitted, table_location: str, real_table_location: str, roots: TenantRoots
) -> Refusal | None:
    """The event's location must be the metastore's, and under the tenant's allowed roots."""
    try:
        claimed = storage_path(vacuum.location)
        actual = storage_path(table_location)
        real = storage_path(real_table_location)
    except UnsafePathError as error:
        return Refusal("unsafe_path", f"{error}; nothing deleted")
    if claimed != actual:
        return Refusal(
            "unsafe_path",
            f"the event's location {vacuum.location} is not the metastore's location {table_location} of "
            f"{vacuum.table}{'/' + vacuum.partition if vacuum.partition else ''}; nothing deleted",
        )
    return roots.check(actual, real)
