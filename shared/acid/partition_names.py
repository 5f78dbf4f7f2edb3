"""Hive's partition names: escaping, building, parsing, and comparing two spellings of one partition.

A partition ``city=St. John's#2`` is named ``city=St. John%27s%232`` by the metastore and by every
engine that locks it (Hive's ``FileUtils.escapePathName`` and ``Warehouse.makePartName``; Trino
copies them), and Hive 3's metastore stores lock names lower-cased
(``city=st. john%27s%232``). An operator may type either spelling. Comparing such strings as they
are misses readers, so every comparison here goes through the canonical escaped name; the lock
comparison also ignores case, and when a name cannot be read at all it counts as a match: a lock
wrongly waited for costs a delay, a lock wrongly left out costs a reader its files.

Pure: no I/O. The rules follow Hive's Java source name for name; ``escape_path_name`` escapes the
same characters (Hive's ``charToEscape``, not the Windows-only extras) and ``unescape_path_name``
decodes ``%XX`` one character at a time, as Hive does (``%C3%A9`` is two characters, not ``é``).
"""

from __future__ import annotations

import contextlib
import functools
import unicodedata
from collections.abc import Sequence

from acidclean.shared.errors import AcidCleanError

DEFAULT_PARTITION_NAME = "__HIVE_DEFAULT_PARTITION__"  # Hive's name for a null or empty value

# FileUtils.charToEscape: the control characters, then the list Hive spells out.
_ESCAPED = frozenset(chr(code) for code in range(0x20)) | frozenset("\"#%'*/:=?\\\x7f{[]^")


class PartitionNameError(AcidCleanError, ValueError):
    """A string that is not a partition name of the form ``k=v/k2=v2``."""


def escape_path_name(path: str | None, default: str | None = None) -> str:
    """Hive's ``FileUtils.escapePathName``: every character of ``charToEscape`` as ``%XX`` (upper
    case hex); an empty or missing value is ``default``, else :data:`DEFAULT_PARTITION_NAME`."""
    if not path:
        return DEFAULT_PARTITION_NAME if default is None else default
    return "".join(f"%{ord(char):02X}" if char in _ESCAPED else char for char in path)


def unescape_path_name(path: str) -> str:
    """Hive's ``FileUtils.unescapePathName``: each ``%`` followed by two characters that Java's
    ``Integer.parseInt(s, 16)`` accepts with a value >= 0 becomes that one character; anything
    else stays as it is."""
    out: list[str] = []
    i = 0
    while i < len(path):
        char = path[i]
        if char == "%" and i + 2 < len(path):
            code = _java_parse_hex(path[i + 1 : i + 3])
            if code is not None and code >= 0:
                out.append(chr(code))
                i += 3
                continue
        out.append(char)
        i += 1
    return "".join(out)


def _java_parse_hex(text: str) -> int | None:
    """``Integer.parseInt(text, 16)`` for a two-character ``text``, or None where Java throws.
    Java takes a leading sign and any Unicode decimal digit or Latin (also full-width) letter."""
    sign = 1
    digits = text
    if text[:1] in ("+", "-"):
        sign = -1 if text[0] == "-" else 1
        digits = text[1:]
    if not digits:
        return None
    value = 0
    for char in digits:
        digit = _java_hex_digit(char)
        if digit is None:
            return None
        value = value * 16 + digit
    return sign * value


def _java_hex_digit(char: str) -> int | None:
    """Java's ``Character.digit(char, 16)``."""
    if char.isdecimal():  # Unicode decimal digits (Nd), as Character.isDigit
        return unicodedata.decimal(char)
    code = ord(char)
    for first in (ord("a"), ord("A"), 0xFF41, 0xFF21):  # Latin and full-width Latin letters
        if first <= code < first + 6:
            return code - first + 10
    return None


def make_partition_name(keys: Sequence[str], values: Sequence[str | None]) -> str:
    """Hive's ``Warehouse.makePartName`` / ``FileUtils.makePartName``: ``k=v`` pairs joined by ``/``,
    keys lower-cased, keys and values escaped, an empty or missing value as the default partition."""
    if len(keys) != len(values) or not keys:
        raise PartitionNameError(
            f"a partition name needs one value per partition key and at least one key: keys {list(keys)}, "
            f"values {list(values)}"
        )
    pairs = zip(keys, values, strict=True)
    return "/".join(f"{escape_path_name(key.lower())}={escape_path_name(value)}" for key, value in pairs)


def parse_partition_name(name: str) -> tuple[tuple[str, str], ...]:
    """The ``(key, value)`` pairs of an escaped partition name, unescaped (Hive's
    ``Warehouse.makeValsFromName``: split at ``/``, then at the first ``=``). Keys keep their case;
    the default partition keeps its name. Raises :class:`PartitionNameError` for anything that is
    not ``k=v[/k2=v2...]`` with non-empty keys."""
    if not name:
        raise PartitionNameError("an empty string is not a partition name (expected k=v[/k2=v2...])")
    pairs = []
    for component in name.split("/"):
        key, equals, value = component.partition("=")
        if not equals or not key:
            raise PartitionNameError(
                f"partition {name!r} is not of the form k=v[/k2=v2...]: component {component!r} has no key"
            )
        pairs.append((unescape_path_name(key), unescape_path_name(value)))
    return tuple(pairs)


def canonical_partition_name(name: str) -> str:
    """The name the metastore gives the partition ``name`` names when read as an escaped name:
    keys lower-cased, values escaped exactly as Hive escapes them (``CITY=St. John's#2`` and
    ``city=St. John%27s%232`` are both ``city=St. John%27s%232``)."""
    pairs = parse_partition_name(name)
    return make_partition_name([key for key, _ in pairs], [value for _, value in pairs])


def value_readings(spelling: str, keys: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """Every list of values (one per key of ``keys``, in order) that ``spelling`` may mean: first as
    an escaped name (``city=St. John%27s%232``), then as values typed as they are
    (``city=St. John's#2``, ``city=a/b=c`` for the value ``a/b=c``). Keys match without case; an
    empty value is the default partition. Empty when ``spelling`` fits none of them."""
    wanted = [key.lower() for key in keys]
    readings: list[tuple[str, ...]] = []
    try:
        pairs = parse_partition_name(spelling)
    except PartitionNameError:
        pairs = ()
    if pairs and [key.lower() for key, _ in pairs] == wanted:
        readings.append(tuple(value for _, value in pairs))
    if wanted:
        readings.extend(_raw_readings(spelling, wanted))
    normalised = (tuple(value or DEFAULT_PARTITION_NAME for value in values) for values in readings)
    return tuple(dict.fromkeys(normalised))


def _raw_readings(spelling: str, keys: Sequence[str]) -> list[tuple[str, ...]]:
    """The ways to split ``k1=v1/k2=v2...`` into the values of ``keys`` when values are not escaped
    (so a value may hold ``/`` and ``=``): each value ends where ``/<next key>=`` starts."""
    prefix = f"{keys[0]}="
    if spelling[: len(prefix)].lower() != prefix:
        return []
    rest = spelling[len(prefix) :]
    if len(keys) == 1:
        return [(rest,)]
    readings = []
    for start, char in enumerate(rest):
        if char == "/":  # where the next key may start (compared without case, slice by slice)
            for tail in _raw_readings(rest[start + 1 :], keys[1:]):
                readings.append((rest[:start], *tail))
    return readings


@functools.lru_cache(maxsize=4096)  # one table's few partition names come back for every lock and event
def _readings(name: str, key_lists: tuple[tuple[str, ...], ...]) -> frozenset[str]:
    """The canonical names ``name`` may stand for: as an escaped name, and as typed values for each
    of ``key_lists``."""
    names = set()
    with contextlib.suppress(PartitionNameError):
        names.add(canonical_partition_name(name))
    for keys in key_lists:
        for values in value_readings(name, keys):
            names.add(make_partition_name(keys, values))
    return frozenset(names)


@functools.lru_cache(maxsize=4096)
def _parsed_keys(name: str) -> tuple[str, ...] | None:
    """The keys of ``name`` read as an escaped name, or None when it is not one."""
    try:
        return tuple(key for key, _ in parse_partition_name(name))
    except PartitionNameError:
        return None


def _key_lists(*names: str) -> tuple[tuple[str, ...], ...]:
    return tuple(dict.fromkeys(keys for keys in map(_parsed_keys, names) if keys))


def lock_covers_partition(lock_partition: str | None, partition: str | None) -> bool:
    """Whether a lock on ``lock_partition`` (None: the whole table) may protect a reader of
    ``partition`` (None: the whole table). Both names may be spelled escaped or not and in any
    case (Hive 3 lower-cases lock names). When in doubt (a name that is not a partition name) the
    answer is yes: the caller then waits for a lock it did not need to, never the other way round."""
    if lock_partition is None or partition is None or lock_partition == partition:
        return True
    if _parsed_keys(lock_partition) is None or _parsed_keys(partition) is None:
        return True
    key_lists = _key_lists(lock_partition, partition)
    lock_names = {_fold(name) for name in _readings(lock_partition, key_lists)}
    return not lock_names.isdisjoint(_fold(name) for name in _readings(partition, key_lists))


def _fold(name: str) -> str:
    """``name`` without case. The metastore lower-cases lock names with the JVM's locale, where
    ``\u0130`` (capital I with a dot) becomes ``i`` plus a combining dot and, in a Turkish locale,
    ``I`` becomes a dotless ``\u0131``: both fold to ``i`` here, so no locale makes a lock name
    differ from its partition's."""
    return name.casefold().replace("\u0307", "").replace("\u0131", "i")


def may_be_same_partition(first: str | None, second: str | None) -> bool:
    """Whether two spellings may name one partition (each read escaped or as typed; keys without
    case, values with case, as the metastore compares them): for filters on what an operator typed.
    Names that cannot be read compare as they are."""
    if first is None or second is None or first == second:
        return first == second
    key_lists = _key_lists(first, second)
    return not _readings(first, key_lists).isdisjoint(_readings(second, key_lists))
