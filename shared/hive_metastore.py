"""The Hive Metastore over Thrift (hmsclient): tables, transactions, write ids, locks.

It speaks to Hive 2.3 metastores (deltas named by transaction id) and Hive 3+ metastores (deltas
named by per-table write id) alike, detects which one it talks to, and hides the difference behind
:class:`~acidclean.shared.metastore.Metastore`:
on Hive 2 the "write id" of a transaction is its transaction id and the valid
id list is built from the open and aborted transactions.

Hive 4 metastores are Hive 3+ to this adapter; the client speaks the Hive 3.0 IDL, and where Hive 4
removed a call (``get_table``, HIVE-26537) or refuses one without the caller's capabilities
(``create_table`` of an ACID table) the adapter makes the Hive 4 call itself.

Every lock component sets ``operationType`` and ``isTransactional`` (``isAcid`` on the wire), which
the metastore requires of a lock taken inside a transaction. Calls are serialised per client (Thrift
clients are not thread-safe) and a broken connection is reopened once before a call fails.
"""

from __future__ import annotations

from acidclean.shared.hms.catalog import CatalogCalls
from acidclean.shared.hms.compactions import CompactionCalls
from acidclean.shared.hms.locks import LockCalls
from acidclean.shared.hms.transactions import TransactionCalls
from acidclean.shared.metastore_transport import kerberos_from_settings
from acidclean.shared.settings import Settings


class HiveMetastore(CatalogCalls, TransactionCalls, LockCalls, CompactionCalls):
    """A :class:`Metastore` over hmsclient. Safe to share between threads.

    Each group of calls is its own class in :mod:`acidclean.shared.hms`, all over one
    :class:`~acidclean.shared.hms.connection.MetastoreConnection`."""

    @classmethod
    def from_settings(cls, settings: Settings) -> HiveMetastore:
        """The client of every command and of the cleaner: the settings' URIs, timeout and transport
        (plain, or Kerberos with ``hive.metastore.sasl.enabled``)."""
        return cls(settings.metastore_uris, settings.metastore_timeout_s, kerberos=kerberos_from_settings(settings))
