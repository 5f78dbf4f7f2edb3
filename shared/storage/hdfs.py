"""HDFS storage for table locations at ``hdfs://``: the Rust client ``hdfs-native`` (no JVM, no libhdfs)
behind ``pyarrow.fs`` through its fsspec binding, wrapped in :class:`ArrowFileSystem`.

A location ``hdfs://namenode:8020/warehouse/db.db/t`` opens the client of ``namenode:8020`` (one per
NameNode authority and settings, shared by all threads) and the path ``/warehouse/db.db/t``, taken
literally: Hive writes Hadoop ``Path`` strings, so the partition directory ``city=St. John%27s`` is
named exactly that, ``%`` included. ``hdfs:///path`` uses ``fs.defaultFS``; ``hdfs://ns1/path`` a
name service (HA) defined in the Hadoop configuration. A directory rename is the NameNode's single
``rename2`` call, atomic and refused when the target exists; :meth:`HdfsFileSystem.tree_size` is one
``getContentSummary`` call instead of a walk of the tree.

Settings. hdfs-native reads ``core-site.xml`` and ``hdfs-site.xml`` from ``$HADOOP_CONF_DIR``, else
``$HADOOP_HOME/etc/hadoop``, like a Hadoop client (it uses name services, ``dfs.ha.namenodes.*``,
``dfs.namenode.rpc-address.*``, ``hadoop.security.authentication``, ``dfs.data.transfer.protection``,
``dfs.client.use.datanode.hostname``, ``dfs.client.failover.*``, ``dfs.client.socket-timeout`` and a few
more; every other Hadoop key is ignored). Without Kerberos the user is ``$HADOOP_USER_NAME``, else the
login user. These variables, which Spark executors inherit, add to or override that:

``ACIDCLEAN_HDFS_CONF_DIR``
    A directory with ``core-site.xml``/``hdfs-site.xml`` to read instead of ``$HADOOP_CONF_DIR``.
``ACIDCLEAN_HDFS_CONFIG``
    Hadoop client settings as ``key=value`` pairs separated by ``;`` or new lines, over the files'
    values, e.g. ``dfs.ha.namenodes.ns1=nn1,nn2;dfs.namenode.rpc-address.ns1.nn1=host1:8020``. A
    stopped NameNode makes each call retry ``dfs.client.failover.max.attempts`` times (Hadoop's
    default 15, about three minutes); lower it here to fail sooner.
``ACIDCLEAN_HDFS_AUTHENTICATION``
    ``simple`` or ``kerberos`` (``hadoop.security.authentication``). Setting a principal implies
    ``kerberos``.
``ACIDCLEAN_HDFS_KERBEROS_PRINCIPAL``, ``ACIDCLEAN_HDFS_KERBEROS_KEYTAB``, ``ACIDCLEAN_HDFS_KERBEROS_CACHE``
    With a principal and a keytab the client logs in by itself and keeps its tickets in a private
    in-memory cache (or in the named cache). With a principal alone it uses that identity from the
    default ticket cache. With none of them and Kerberos on, it uses the default ticket cache
    (``$KRB5CCNAME``): run ``kinit -kt /etc/security/keytabs/cleaner.keytab cleaner/host@REALM`` first
    and renew it (``k5start`` or a cron ``kinit``) before it expires. Kerberos needs the system's
    ``libgssapi_krb5`` (``apt install libgssapi-krb5-2`` or ``yum install krb5-libs``).

Errors are :class:`StorageError` with the NameNode's exception reduced to one line and what to do.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyarrow.fs as pafs

from acidclean.shared.errors import ConfigurationError
from acidclean.shared.storage.arrow import ArrowFileSystem
from acidclean.shared.storage.interface import Entry, ListedFile, StorageError, TreeSize

AUTHENTICATION_KEY = "hadoop.security.authentication"
AUTHENTICATIONS = ("simple", "kerberos")


@dataclass(frozen=True)
class HdfsOptions:
    """How to reach HDFS, from the environment (see the module docstring). Equal options share a client."""

    config: tuple[tuple[str, str], ...] = ()
    config_dir: str | None = None
    kerberos_principal: str | None = None
    kerberos_keytab: str | None = None
    kerberos_cache: str | None = None

    @property
    def config_dict(self) -> dict[str, str]:
        return dict(self.config)

    @property
    def kerberos(self) -> bool:
        return self.config_dict.get(AUTHENTICATION_KEY, "").lower() == "kerberos"


@dataclass(frozen=True)
class HdfsLocation:
    """The parts of an ``hdfs://`` URI: the NameNode authority (``host:port``, a name service, or empty
    for ``fs.defaultFS``) and the absolute path inside it."""

    authority: str
    path: str
    client_url: str | None = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "client_url", f"hdfs://{self.authority}" if self.authority else None)


def _value(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name, "").strip()
    return value or None


def parse_config(text: str, variable: str = "ACIDCLEAN_HDFS_CONFIG") -> tuple[tuple[str, str], ...]:
    """``key=value`` pairs separated by ``;`` or new lines, in order (a later key wins). Values may hold
    ``,`` and ``=`` (``dfs.ha.namenodes.ns1=nn1,nn2``)."""
    pairs: dict[str, str] = {}
    for item in re.split(r"[;\n]", text):
        item = item.strip()
        if not item:
            continue
        key, separator, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not separator or not key or any(character.isspace() for character in key):
            raise ConfigurationError(
                f"{variable}: {item!r} is not a key=value pair; write Hadoop settings as "
                "key=value separated by ';', e.g. "
                "dfs.client.failover.max.attempts=3;dfs.client.use.datanode.hostname=true"
            )
        pairs[key] = value
    return tuple(pairs.items())


def hdfs_options(environ: Mapping[str, str]) -> HdfsOptions:
    """The HDFS settings in ``environ`` (normally ``os.environ``)."""
    config = dict(parse_config(environ.get("ACIDCLEAN_HDFS_CONFIG", "")))
    principal = _value(environ, "ACIDCLEAN_HDFS_KERBEROS_PRINCIPAL")
    keytab = _value(environ, "ACIDCLEAN_HDFS_KERBEROS_KEYTAB")
    cache = _value(environ, "ACIDCLEAN_HDFS_KERBEROS_CACHE")
    if (keytab or cache) and not principal:
        raise ConfigurationError(
            "ACIDCLEAN_HDFS_KERBEROS_KEYTAB or ACIDCLEAN_HDFS_KERBEROS_CACHE is set without "
            "ACIDCLEAN_HDFS_KERBEROS_PRINCIPAL: name the principal to log in as (e.g. cleaner/host@REALM), "
            "or unset both and `kinit` into the default ticket cache"
        )
    if keytab and not os.path.isfile(keytab):
        raise ConfigurationError(f"ACIDCLEAN_HDFS_KERBEROS_KEYTAB={keytab!r} is not a readable file")
    authentication = _value(environ, "ACIDCLEAN_HDFS_AUTHENTICATION")
    if authentication is not None:
        if authentication.lower() not in AUTHENTICATIONS:
            raise ConfigurationError(
                f"ACIDCLEAN_HDFS_AUTHENTICATION={authentication!r}: use {' or '.join(AUTHENTICATIONS)}"
            )
        config[AUTHENTICATION_KEY] = authentication.lower()
    elif principal and AUTHENTICATION_KEY not in config:
        config[AUTHENTICATION_KEY] = "kerberos"
    return HdfsOptions(
        config=tuple(sorted(config.items())),
        config_dir=_value(environ, "ACIDCLEAN_HDFS_CONF_DIR"),
        kerberos_principal=principal,
        kerberos_keytab=keytab,
        kerberos_cache=cache,
    )


def split_hdfs_uri(uri: str) -> HdfsLocation:
    """Authority and path of ``hdfs://authority/path``; the path is taken literally, not percent-decoded,
    and has no trailing ``/`` (except the root)."""
    scheme, separator, rest = uri.partition("://")
    if scheme.lower() != "hdfs" or not separator:
        raise StorageError(f"{uri!r} is not an HDFS location: expected hdfs://namenode:port/path")
    authority, slash, path = rest.partition("/")
    if "@" in authority or any(character.isspace() for character in authority):
        raise StorageError(f"{uri!r}: the NameNode part {authority!r} is not host[:port] or a name service")
    path = "/" + path.rstrip("/") if slash else "/"
    return HdfsLocation(authority.lower(), path)


# --- error messages ------------------------------------------------------------------------------

_RPC_ERROR = re.compile(r'^RPCError\("(?P<exception>[\w.$]+)", "(?P<message>.*)"\)$', re.DOTALL)

SPACE_QUOTA_ADVICE = "a directory quota is full: free space or raise it (`hdfs dfsadmin -setSpaceQuota`)"
ADVICE = {
    "AccessControlException": (
        "the HDFS user may not do this: grant it access (`hdfs dfs -chmod`/`-setfacl`), or run as a user who "
        "may (HADOOP_USER_NAME without Kerberos, else the principal of ACIDCLEAN_HDFS_KERBEROS_PRINCIPAL or kinit)"
    ),
    "SafeModeException": (
        "the NameNode is in safe mode and refuses changes: wait until it leaves (`hdfs dfsadmin -safemode get`)"
    ),
    "StandbyException": "the NameNode is a standby: name the name service (hdfs://ns1/...) so the active one is used",
    "RetriableException": "the NameNode asked to retry later (it may be starting): retry in a minute",
    "QuotaExceededException": SPACE_QUOTA_ADVICE,
    "DSQuotaExceededException": SPACE_QUOTA_ADVICE,
    "NSQuotaExceededException": "a directory's name quota is full: remove files or raise (`hdfs dfsadmin -setQuota`)",
}
KERBEROS_ADVICE = (
    "Kerberos login failed: run `kinit -kt <keytab> <principal>` (or set ACIDCLEAN_HDFS_KERBEROS_PRINCIPAL and "
    "ACIDCLEAN_HDFS_KERBEROS_KEYTAB), check KRB5CCNAME and /etc/krb5.conf, and that libgssapi_krb5 is installed"
)


def describe_hdfs_error(error: BaseException, authority: str) -> str:
    """One line on what failed and what to do, from an hdfs-native exception (a NameNode RPC error
    carries the Java exception class and its stack trace; only the class and first line are kept)."""
    namenode = authority or "fs.defaultFS"
    text = str(error)
    match = _RPC_ERROR.match(text)
    if match:
        exception = match["exception"].rsplit(".", 1)[-1]
        message = match["message"].replace("\\n", "\n").replace('\\"', '"').split("\n", 1)[0].strip()
        advice = ADVICE.get(exception)
        if advice is None and ("Sasl" in exception or "GSS" in message or "Kerberos" in message):
            advice = KERBEROS_ADVICE
        described = f"{exception}: {message}"
        return f"{described}; {advice}" if advice else described
    first_line = text.split("\n", 1)[0].strip() or type(error).__name__
    lowered = first_line.lower()
    if "gss" in lowered or "kerberos" in lowered or "sasl" in lowered or "credential" in lowered:
        return f"{first_line}; {KERBEROS_ADVICE}"
    if isinstance(error, (ConnectionError, TimeoutError)) or any(
        word in lowered
        for word in (
            "connection refused",
            "timed out",
            "connection reset",
            "broken pipe",
            "no route",
            "name or service not known",
            "failed to lookup",
        )
    ):
        return (
            f"{first_line}; is the NameNode {namenode} running and reachable from here? Check the location's "
            "host and port, HADOOP_CONF_DIR/ACIDCLEAN_HDFS_CONF_DIR and ACIDCLEAN_HDFS_CONFIG"
        )
    return first_line


class _TranslatingClient:
    """The hdfs-native client, with each call's error turned into an ``OSError`` of one readable line.

    hdfs-native raises ``RuntimeError("RPCError(...)")`` with a Java stack trace for most NameNode
    refusals; pyarrow and :class:`ArrowFileSystem` expect ``OSError``. ``FileNotFoundError`` and
    ``FileExistsError`` keep their type (callers rely on it) and get a one-line message.
    """

    def __init__(self, client: Any, authority: str) -> None:
        self._client = client
        self._authority = authority

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._client, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return method(*args, **kwargs)
            except (FileNotFoundError, FileExistsError, IsADirectoryError) as error:
                raise type(error)(describe_hdfs_error(error, self._authority)) from error
            except (OSError, RuntimeError) as error:
                raise OSError(describe_hdfs_error(error, self._authority)) from error

        return call


def _fsspec_hdfs(client: Any, location: HdfsLocation) -> Any:
    """hdfs-native's fsspec file system over ``client`` (its constructor cannot take the Kerberos
    arguments, so the client is made here and put in its place)."""
    from fsspec import AbstractFileSystem
    from hdfs_native.fsspec import HdfsFileSystem as NativeFsspec

    class _Fsspec(NativeFsspec):
        cachable = False  # one instance per client, cached by open_hdfs, shared by all threads

        def __init__(self) -> None:
            AbstractFileSystem.__init__(self)
            host, _, port = location.authority.partition(":")
            self.host = host or None
            self.port = int(port) if port.isdigit() else None
            self.client = client

        @classmethod
        def _strip_protocol(cls, path: str) -> str:
            # Paths arrive without scheme; take them literally (urlparse would cut at '#' or '?').
            if path.startswith("/"):
                return path.rstrip("/") or "/"
            return str(super()._strip_protocol(path))

        # fsspec's isdir/isfile answer False on any error and its walk skips a directory it cannot
        # list: a NameNode that is down or refuses would look like a missing file or an empty
        # directory, and the cleaner would act on that. Only "not found" means not there.
        def isdir(self, path: str) -> bool:
            try:
                return bool(self.info(path)["type"] == "directory")
            except FileNotFoundError:
                return False

        def isfile(self, path: str) -> bool:
            try:
                return bool(self.info(path)["type"] == "file")
            except FileNotFoundError:
                return False

        def walk(
            self, path: str, maxdepth: int | None = None, topdown: bool = True, on_error: str = "raise", **kwargs: Any
        ) -> Any:
            return super().walk(path, maxdepth=maxdepth, topdown=topdown, on_error="raise", **kwargs)

    return _Fsspec()


class HdfsFileSystem(ArrowFileSystem):
    """:class:`ArrowFileSystem` on HDFS through hdfs-native; every failure is a :class:`StorageError`."""

    def __init__(self, arrow: pafs.FileSystem, native: Any, location: HdfsLocation) -> None:
        super().__init__(arrow)
        self.native = native  # the hdfs-native Client (errors translated), for calls pyarrow lacks
        self.namenode = location.authority or "fs.defaultFS"

    @contextmanager
    def _storage_errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except StorageError:
            raise
        except (OSError, RuntimeError) as error:
            raise StorageError(f"cannot {action} on HDFS {self.namenode}: {error}") from error

    def list_dir(self, path: str) -> list[Entry]:
        with self._storage_errors(f"list {path}"):
            return super().list_dir(path)

    def exists(self, path: str) -> bool:
        with self._storage_errors(f"check {path}"):
            return super().exists(path)

    def tree_size(self, path: str) -> TreeSize:
        """Files and bytes under ``path`` from one ``getContentSummary`` call; a missing path is empty."""
        with self._storage_errors(f"measure {path}"):
            try:
                summary = self.native.get_content_summary(path)
            except FileNotFoundError:
                return TreeSize(0, 0)
            return TreeSize(int(summary.file_count), int(summary.length))

    def delete_dir(self, path: str) -> None:
        with self._storage_errors(f"delete {path}"):
            super().delete_dir(path)

    def rename(self, source: str, target: str) -> None:
        """One ``rename2`` RPC (fsspec ``mv`` of hdfs-native): atomic, and refused when ``target``
        exists, so a directory is never moved into another by accident."""
        with self._storage_errors(f"rename {source} to {target}"):
            super().rename(source, target)

    def make_dirs(self, path: str) -> None:
        with self._storage_errors(f"create {path}"):
            super().make_dirs(path)

    def read_file(self, path: str) -> bytes | None:
        with self._storage_errors(f"read {path}"):
            return super().read_file(path)

    def real_path(self, path: str) -> str:
        return path  # HDFS has no symlinks the cleaner follows

    def list_files(self, path: str) -> list[ListedFile]:
        """Size and modification time of each file: hdfs-native does not expose HDFS's file id, so a
        file written again with the same size within the same millisecond is not told apart."""
        with self._storage_errors(f"list {path}"):
            return super().list_files(path)

    def delete_files(self, path: str, names: list[str]) -> None:
        with self._storage_errors(f"delete files of {path}"):
            super().delete_files(path, names)

    def delete_empty_dir(self, path: str) -> bool:
        """Non-recursive deletes from the deepest directory up: the namenode refuses one that is not
        empty, so a file written meanwhile is never removed."""
        with self._storage_errors(f"delete {path}"):
            try:
                infos = self.arrow.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
            except FileNotFoundError:
                return True
            directories = [info.path for info in infos if info.type == pafs.FileType.Directory]
            for directory in [*sorted(directories, key=lambda name: -name.count("/")), path]:
                try:
                    self.native.delete(directory, False)
                except FileNotFoundError:
                    continue
                except (OSError, RuntimeError):
                    return False
            return True


_cache: dict[tuple[str, HdfsOptions], HdfsFileSystem] = {}
_cache_lock = threading.Lock()


def _new_filesystem(location: HdfsLocation, options: HdfsOptions) -> HdfsFileSystem:
    try:
        from hdfs_native import Client
    except ImportError as error:
        raise StorageError(
            "reading hdfs:// locations needs the hdfs-native package: `pip install hdfs-native`"
        ) from error
    try:
        client = Client(
            location.client_url,
            options.config_dict,
            options.config_dir,
            kerberos_principal=options.kerberos_principal,
            kerberos_keytab=options.kerberos_keytab,
            kerberos_cache=options.kerberos_cache,
        )
    except (OSError, RuntimeError, ValueError) as error:
        raise StorageError(
            f"cannot make an HDFS client for {location.client_url or 'fs.defaultFS'}: "
            f"{describe_hdfs_error(error, location.authority)}"
        ) from error
    native = _TranslatingClient(client, location.authority)
    arrow = pafs.PyFileSystem(pafs.FSSpecHandler(_fsspec_hdfs(native, location)))
    return HdfsFileSystem(arrow, native, location)


def open_hdfs(uri: str, environ: Mapping[str, str] | None = None) -> tuple[ArrowFileSystem, str]:
    """The file system and the path of an ``hdfs://`` location; settings from ``environ`` (default
    ``os.environ``), one cached client per NameNode authority and settings."""
    location = split_hdfs_uri(uri)
    options = hdfs_options(os.environ if environ is None else environ)
    key = (location.authority, options)
    with _cache_lock:
        fs = _cache.get(key)
        if fs is None:
            fs = _new_filesystem(location, options)
            _cache[key] = fs
    return fs, location.path
