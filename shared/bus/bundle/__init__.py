"""Several records of one partition carried in one Kafka record (a bundle), and read back (pure, no I/O).

A cleaner with thousands of tables waiting re-checks each table's ``DelayedVacuums`` every cleanup
interval. One Kafka record per table costs a produce, its acknowledgement, a fetch and the loop's
bookkeeping whatever it carries, and on a small machine that, not the check itself, bounds how many
tables one process keeps up with. A bundle carries many such records of one delay partition in one:
each member keeps its own key, headers (``ce_id``, ``causation_id``, ``x-due-at`` ...) and value,
byte for byte, so a reader that unpacks a bundle sees exactly the records that were packed.

On the wire a bundle is a record keyed ``<tenant>/~bundle``, produced to an explicit partition (the
one its members' keys belong to), with the usual CloudEvents headers (``ce_type``
``acidclean.bus.bundle``), ``x-due-at`` the latest due time of its members (so a consumer that honours
it is never early for any of them) and ``x-bundle`` the member count. Its value is JSON::

    {"schema_version": 1, "event_id": "...", "tenant": "...", "occurred_at": "...",
     "oldest_commit": "..." | null,
     "records": [{"key": "...", "headers": [["ce_id", "..."], ...], "value": {...}}, ...]}

Header values are written as Latin-1 text (one character per byte, so any bytes survive JSON).

A compressed bundle (``schema_version`` 2, what the cleaner writes unless
``cleanup_bundle_compression`` is ``none``) has the same fields, and ``"records_encoding":
"zlib+base64"`` before ``records``, which is then one JSON string: the members' array above,
compressed by zlib and written as base64. A waiting vacuum's JSON repeats its table's names and
paths, so this is about a twelfth of the bytes to produce, store, fetch and hold while it waits. A
reader older than it refuses such a bundle (its schema version), so a group upgraded one process at a
time writes ``none`` until every process reads both.

A bundle whose every member is a ``DelayedVacuums`` waiting on snapshot locks alone (each with its
``unchanged`` summary) also carries a summary of its own, in the ``x-bundle-unchanged`` header (a
reader that does not know it unpacks the bundle as any other)::

    {"lock_ids": [...], "carries_left": n, "carried": k, "oldest_commit": "...", "records_crc": c}

the union of its members' summary locks, how many more checks may carry it on whole (the fewest any
member has left before its entries must be read in full), how many checks carried it on whole since
its members were written (each member's ``checks`` is that many behind) and its oldest vacuum's
commit; ``records_crc`` is the CRC-32 of the members' JSON array as written (of the base64 text, in
a compressed bundle: it is checked without decompressing; a bundle whose members
were changed since is checked member by member, where the models refuse what does not read). A check
that finds every one of those locks listed carries the bundle on whole
(:func:`carried_on`): the same member bytes, unread, in a bundle with a new id and due time caused by
this one (``causation_id``), ``carries_left`` one lower and ``carried`` one higher.

A bundle with a summary also lists its members' keys, in order, in the ``x-bundle-keys`` header::

    {"records_crc": c, "keys": ["<tenant>/<db>.<table>", ...]}

with the same ``records_crc`` as its summary. A whole carry needs the keys alone (the next record of
each of those tables is in the bundle it writes), so with them a check carries a compressed bundle on
without inflating it. Keys whose CRC is not the summary's are not used (the members are read for
them). The list is only ever used to carry a bundle on unread or to tell which tables a batch sees
twice: a wrong one can make a table's vacuums wait longer, never clean anything (what is cleaned is
read from the members and checked in full). A reader older than it ignores the header.
"""

from __future__ import annotations

from acidclean.shared.bus.bundle.read import (
    ReadBundle,
    is_bundle,
    unpack,
)
from acidclean.shared.bus.bundle.whole_carry import (
    CarriableBundle,
    carried_on,
    whole_carry_refused,
)
from acidclean.shared.bus.bundle.wire import (
    BUNDLE_KEY_SUFFIX,
    BUNDLE_TYPE,
    CAUSATION_HEADER,
    COMPRESSED_ENCODING,
    COUNT_HEADER,
    KEYS_HEADER,
    MAX_BUNDLE_BYTES,
    MAX_BUNDLE_RECORDS,
    MAX_INFLATED_BYTES,
    MAX_WHOLE_CARRIES,
    SUMMARY_HEADER,
    BundleKeys,
    BundleSummary,
    WireBundleEitherWay,
    WireBundleHead,
    WireBundleUnread,
    WireCompressedBundleUnread,
    WireMember,
    WireMemberKey,
    bundle_key,
    compress_members,
    inflate_members,
)
from acidclean.shared.bus.bundle.written import (
    HEADERS_ALLOWANCE,
    Bundle,
    CarriedBundle,
    PrebuiltRecord,
    Republished,
    bundles_of,
    republished,
    summary_of_members,
)

__all__ = [
    "BUNDLE_KEY_SUFFIX",
    "BUNDLE_TYPE",
    "CAUSATION_HEADER",
    "COMPRESSED_ENCODING",
    "COUNT_HEADER",
    "HEADERS_ALLOWANCE",
    "KEYS_HEADER",
    "MAX_BUNDLE_BYTES",
    "MAX_BUNDLE_RECORDS",
    "MAX_INFLATED_BYTES",
    "MAX_WHOLE_CARRIES",
    "SUMMARY_HEADER",
    "Bundle",
    "BundleKeys",
    "BundleSummary",
    "CarriableBundle",
    "CarriedBundle",
    "PrebuiltRecord",
    "ReadBundle",
    "Republished",
    "WireBundleEitherWay",
    "WireBundleHead",
    "WireBundleUnread",
    "WireCompressedBundleUnread",
    "WireMember",
    "WireMemberKey",
    "bundle_key",
    "bundles_of",
    "carried_on",
    "compress_members",
    "inflate_members",
    "is_bundle",
    "republished",
    "summary_of_members",
    "unpack",
    "whole_carry_refused",
]
