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

import contextlib
import dataclasses
import getpass
import socket
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar, cast

from hmsclient import hmsclient
from hmsclient.genthrift.hive_metastore import ttypes
from thrift.protocol import TBinaryProtocol
from thrift.Thrift import TApplicationException, TException, TMessageType, TType
from thrift.transport import TTransport

from acidclean.shared.acid.id_lists import MetastoreKind
from acidclean.shared.acid.partition_names import (
    escape_path_name,
    lock_covers_partition,
    make_partition_name,
    unescape_path_name,
    value_readings,
)
from acidclean.shared.errors import MetastoreAuthenticationError, MetastoreError, TableNotFoundError
from acidclean.shared.metastore import (
    NO_MIN_OPEN,
    CompactionInfo,
    LockInfo,
    LockRequestComponent,
    LockResult,
    TableInfo,
    parse_metastore_uris,
    partition_name,
)
from acidclean.shared.metastore_transport import (
    SASL_KEY,
    SERVICE_PRINCIPAL_KEY,
    KerberosSettings,
    kerberos_from_settings,
    open_transport,
)
from acidclean.shared.settings import Settings

T = TypeVar("T")

ORC_SERDE = "org.apache.hadoop.hive.ql.io.orc.OrcSerde"
ORC_INPUT = "org.apache.hadoop.hive.ql.io.orc.OrcInputFormat"
ORC_OUTPUT = "org.apache.hadoop.hive.ql.io.orc.OrcOutputFormat"
# What Hive 4's metastore asks of a client that creates a full ACID table (MetastoreDefaultTransformer).
ACID_CAPABILITIES = ("HIVEFULLACIDREAD", "HIVEFULLACIDWRITE")


class HiveMetastore:
    """A :class:`Metastore` over hmsclient. Safe to share between threads."""

    def __init__(
        self, uris: str, timeout_s: float = 10.0, user: str | None = None, *, kerberos: KerberosSettings | None = None
    ) -> None:
        self._endpoints = parse_metastore_uris(uris)
        self._timeout_s = timeout_s
        self._kerberos = kerberos
        self._client: Any = None  # an open hmsclient.HMSClient, or None
        self._guard = threading.Lock()
        self.user = user or getpass.getuser()
        self.hostname = socket.gethostname()
        self._kind: MetastoreKind | None = None
        self._get_table_call = "get_table"  # "get_table_req" once a Hive 4 metastore refused get_table
        self._get_tables_call = "get_table_objects_by_name"  # or its "_req", as for get_table
        self._major_version: int | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> HiveMetastore:
        """The client of every command and of the cleaner: the settings' URIs, timeout and transport
        (plain, or Kerberos with ``hive.metastore.sasl.enabled``)."""
        return cls(settings.metastore_uris, settings.metastore_timeout_s, kerberos=kerberos_from_settings(settings))

    # connection handling -------------------------------------------------------------------------

    def _connect(self) -> Any:
        errors = []
        refusals: list[MetastoreAuthenticationError] = []
        for host, port in self._endpoints:
            try:
                transport = open_transport(host, port, self._timeout_s, self._kerberos)
            except MetastoreAuthenticationError as error:
                refusals.append(error)  # another URI's metastore may still accept us
                continue
            except TException as error:
                errors.append(f"{host}:{port}: {error}")
                continue
            # The C codec (thrift's fastbinary) where the transport allows it, else the same wire format
            # in Python: a show_locks listing 10,000 locks decodes in 15 ms instead of 170 ms of held GIL.
            return hmsclient.HMSClient(iprot=TBinaryProtocol.TBinaryProtocolAccelerated(transport))
        if refusals:
            raise refusals[0]
        raise MetastoreError(
            "cannot reach the Hive Metastore at "
            + ", ".join(f"thrift://{h}:{p}" for h, p in self._endpoints)
            + f" ({'; '.join(errors)}); check hive.metastore.uris and that the metastore runs"
        )

    def _call(self, what: str, operation: Callable[[Any], T]) -> T:
        with self._guard:
            for attempt in (1, 2):
                if self._client is None:
                    self._client = self._connect()
                try:
                    return operation(self._client)
                except (TTransport.TTransportException, OSError, EOFError) as error:
                    self._drop_connection()
                    if attempt == 2 and self._kerberos is None and _closed_on_us(error):
                        raise MetastoreAuthenticationError(
                            f"the Hive Metastore at {self._endpoints_text()} dropped {what} twice, as a metastore "
                            f"that requires Kerberos does with a plain client ({error}): set {SASL_KEY}=true "
                            f"(ACIDCLEAN_METASTORE_SASL_ENABLED), {SERVICE_PRINCIPAL_KEY} and a keytab or ticket cache"
                        ) from error
                    if attempt == 2:
                        raise MetastoreError(f"metastore call {what} failed: {error}") from error
                except ttypes.NoSuchObjectException as error:
                    raise TableNotFoundError(f"{what}: {error.message}") from error
                except TApplicationException as error:
                    raise MetastoreError(f"metastore refused {what}: {error.message}") from error
                except TException as error:
                    message = getattr(error, "message", None) or str(error)
                    raise MetastoreError(f"metastore refused {what}: {message}") from error
        raise AssertionError("unreachable")

    def call(self, what: str, operation: Callable[[Any], T]) -> T:
        """``operation`` on the shared connection, with its reconnect and errors: for the bindings of the
        calls the Hive 3.0 IDL lacks (:mod:`acidclean.shared.hive4_queue`)."""
        return self._call(what, operation)

    def _endpoints_text(self) -> str:
        return ", ".join(f"thrift://{host}:{port}" for host, port in self._endpoints)

    def _drop_connection(self) -> None:
        if self._client is not None:
            # Closing a broken socket may fail in many ways; it is gone either way.
            with contextlib.suppress(Exception):
                self._client._oprot.trans.close()
            self._client = None

    def close(self) -> None:
        with self._guard:
            self._drop_connection()

    def __enter__(self) -> HiveMetastore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # kind -----------------------------------------------------------------------------------------

    @property
    def kind(self) -> MetastoreKind:
        """Hive 2 or Hive 3+, found out once: catalogs came with Hive 3 (``getVersion`` says 3.0 on both)."""
        if self._kind is None:
            try:
                self._call("get_catalogs", lambda c: c.get_catalogs())
                self._kind = MetastoreKind.HIVE3
            except MetastoreError as error:
                if _unknown_method(error):
                    self._kind = MetastoreKind.HIVE2
                else:
                    raise
        return self._kind

    @property
    def major_version(self) -> int:
        """2 or 3 for Hive 2 and 3 (whose ``getVersion`` says "3.0" on both), 4 for Hive 4 (which says
        "4.0.1")."""
        if self._major_version is None:
            if self.kind is MetastoreKind.HIVE2:
                self._major_version = 2
            else:
                version = str(self._call("getVersion", lambda c: c.getVersion()))
                leading = version.split(".")[0]
                self._major_version = max(3, int(leading)) if leading.isdigit() else 3
        return self._major_version

    def describe(self) -> str:
        host, port = self._endpoints[0]
        names = {MetastoreKind.HIVE2: "Hive 2 (transaction ids)", MetastoreKind.HIVE3: "Hive 3+ (write ids)"}
        return f"thrift://{host}:{port}: {names[self.kind]}"

    # catalog --------------------------------------------------------------------------------------

    def get_all_databases(self) -> list[str]:
        return list(self._call("get_all_databases", lambda c: c.get_all_databases()))

    def get_all_tables(self, db: str) -> list[str]:
        return list(self._call(f"get_all_tables({db})", lambda c: c.get_all_tables(db)))

    def create_database(self, db: str, location: str | None = None) -> None:
        """Create ``db`` unless it exists."""
        database = ttypes.Database(name=db, description="", locationUri=location, parameters={})
        try:
            self._call(f"create_database({db})", lambda c: c.create_database(database))
        except MetastoreError as error:
            if not isinstance(error.__cause__, ttypes.AlreadyExistsException):
                raise

    def create_transactional_table(
        self,
        db: str,
        table: str,
        columns: Sequence[tuple[str, str]],
        buckets: int = 1,
        bucket_columns: Sequence[str] | None = None,
        partition_keys: Sequence[tuple[str, str]] = (),
        location: str | None = None,
        orc_compress: str = "ZLIB",
    ) -> TableInfo:
        """Create a bucketed, transactional ORC table (``transactional=true``)."""
        cols = [ttypes.FieldSchema(name=n, type=t, comment=None) for n, t in columns]
        bucket_cols = list(bucket_columns or [columns[0][0]])
        storage = ttypes.StorageDescriptor(
            cols=cols,
            location=location,
            inputFormat=ORC_INPUT,
            outputFormat=ORC_OUTPUT,
            compressed=False,
            numBuckets=buckets,
            serdeInfo=ttypes.SerDeInfo(name=table, serializationLib=ORC_SERDE, parameters={}),
            bucketCols=bucket_cols,
            sortCols=[],
            parameters={},
        )
        definition = ttypes.Table(
            tableName=table,
            dbName=db,
            owner=self.user,
            sd=storage,
            partitionKeys=[ttypes.FieldSchema(name=n, type=t, comment=None) for n, t in partition_keys],
            parameters={"transactional": "true", "orc.compress": orc_compress},
            tableType="MANAGED_TABLE",
        )
        try:
            self._call(f"create_table({db}.{table})", lambda c: c.create_table(definition))
        except MetastoreError as error:
            # Hive 4 creates an ACID table only for a client that declares it can read and write one.
            if "no capabilities" not in str(error):
                raise
            request = _CreateTableRequest(definition, ACID_CAPABILITIES, f"acidclean@{self.hostname}")
            self._call(
                f"create_table_req({db}.{table})",
                lambda c: _call_hive4_method(c, "create_table_req", request, _CREATE_TABLE_ERRORS),
            )
        return self.get_table(db, table)

    def add_partition(self, db: str, table: str, partition: str) -> str:
        """Add a partition unless it exists (in any spelling :meth:`get_table` accepts); returns its
        location. A new partition's values are ``partition`` read as Hive reads a partition name
        (``city=St. John%27s%232``; without escapes, the values as typed: ``city=a/b`` is ``a/b``)."""
        try:
            return self.get_table(db, table, partition).location
        except TableNotFoundError:
            pass
        keys = self.get_table(db, table).partition_keys
        readings = value_readings(partition, keys)
        if not readings:
            raise MetastoreError(f"{partition!r} is not a partition of {db}.{table} (partitioned by {list(keys)})")
        values = list(readings[0])
        try:
            self._call(f"append_partition({db}.{table}/{partition})", lambda c: c.append_partition(db, table, values))
        except MetastoreError as error:
            if not isinstance(error.__cause__, ttypes.AlreadyExistsException):
                raise
        return self.get_table(db, table, make_partition_name(keys, values)).location

    def drop_table(self, db: str, table: str, delete_data: bool = True) -> None:
        self._call(f"drop_table({db}.{table})", lambda c: c.drop_table(db, table, delete_data))

    def get_table(self, db: str, table: str, partition: str | None = None) -> TableInfo:
        """The table, or one of its partitions (location of the partition, parameters of the table).
        ``partition`` may be spelled escaped or not (:meth:`find_partition`); the result carries the
        metastore's own name for it."""
        return self._table_info(self._get_thrift_table(db, table), partition)

    def get_tables(self, db: str, tables: Sequence[str]) -> dict[str, TableInfo]:
        """Several tables of one database in one call, by lower-cased name; a table that does not
        exist is absent. ``get_table_objects_by_name``, or on Hive 4, which removed it, its ``_req``."""
        if not tables:
            return {}
        names = list(tables)
        found: Any = None
        if self._get_tables_call == "get_table_objects_by_name":
            try:
                found = self._call(
                    f"get_table_objects_by_name({db}, {len(names)} tables)",
                    lambda c: c.get_table_objects_by_name(db, names),
                )
            except MetastoreError as error:
                if not _unknown_method(error):
                    raise
                self._get_tables_call = "get_table_objects_by_name_req"
        if found is None:
            request = ttypes.GetTablesRequest(dbName=db, tblNames=names)
            found = self._call(
                f"get_table_objects_by_name_req({db}, {len(names)} tables)",
                lambda c: c.get_table_objects_by_name_req(request),
            ).tables
        return {thrift_table.tableName.lower(): self._table_info(thrift_table, None) for thrift_table in found or []}

    def partition_info(self, table: TableInfo, partition: str | None) -> TableInfo:
        """``table`` (from :meth:`get_table` or :meth:`get_tables`) narrowed to one of its partitions,
        as ``get_table(db, table, partition)`` answers, with one call instead of two."""
        name = partition_name(partition)
        if name is None:
            return table
        thrift_partition = self.find_partition(table.db, table.table, table.partition_keys, name)
        return dataclasses.replace(
            table,
            location=thrift_partition.sd.location or "",
            partition=make_partition_name(table.partition_keys, thrift_partition.values),
            partition_create_time=_create_time(thrift_partition),
        )

    def _table_info(self, thrift_table: Any, partition: str | None) -> TableInfo:
        sd = thrift_table.sd
        location = sd.location or ""
        keys = tuple(key.name for key in thrift_table.partitionKeys or [])
        name = partition_name(partition)
        partition_created = None
        if name is not None:
            thrift_partition = self.find_partition(thrift_table.dbName, thrift_table.tableName, keys, name)
            location = thrift_partition.sd.location or ""
            name = make_partition_name(keys, thrift_partition.values)
            partition_created = _create_time(thrift_partition)
        return TableInfo(
            db=thrift_table.dbName,
            table=thrift_table.tableName,
            location=location,
            parameters=dict(thrift_table.parameters or {}),
            partition_keys=keys,
            bucket_columns=tuple(sd.bucketCols or []),
            bucket_count=int(sd.numBuckets or -1),
            columns=tuple((column.name, column.type) for column in sd.cols or []),
            partition=name,
            table_id=_table_id(thrift_table),
            create_time=_create_time(thrift_table),
            partition_create_time=partition_created,
        )

    def _get_thrift_table(self, db: str, table: str) -> Any:
        """``get_table``, or on Hive 4, which removed it, ``get_table_req`` (Hive 3 has both)."""
        if self._get_table_call == "get_table":
            try:
                return self._call(f"get_table({db}.{table})", lambda c: c.get_table(db, table))
            except MetastoreError as error:
                if not _unknown_method(error):
                    raise
                self._get_table_call = "get_table_req"
        request = ttypes.GetTableRequest(dbName=db, tblName=table)
        return self._call(f"get_table_req({db}.{table})", lambda c: c.get_table_req(request)).table

    def find_partition(self, db: str, table: str, keys: Sequence[str], spelling: str) -> Any:
        """The thrift partition ``spelling`` names: read as an escaped name first
        (``city=St. John%27s%232``), then as values typed as they are (``city=St. John's#2``,
        ``city=a/b``), keys without case. The metastore's own name wins; two partitions that both fit
        another spelling are refused, naming both."""
        found: dict[str, Any] = {}
        for values in value_readings(spelling, keys):
            try:
                candidate = self._get_partition(db, table, list(values))
            except TableNotFoundError:
                continue
            name = make_partition_name(keys, candidate.values)
            if name == spelling:
                return candidate
            found.setdefault(name, candidate)
        if len(found) > 1:
            raise MetastoreError(
                f"partition {spelling!r} of {db}.{table} may mean {' or '.join(sorted(found))}: give the "
                "metastore's name of the one you mean (as `SHOW PARTITIONS` prints it)"
            )
        if not found:
            partitioned = f"partitioned by {', '.join(keys)}" if keys else "not partitioned"
            raise TableNotFoundError(f"{db}.{table} ({partitioned}) has no partition {spelling}")
        return next(iter(found.values()))

    def _get_partition(self, db: str, table: str, values: list[str]) -> Any:
        return self._call(f"get_partition({db}.{table}, {values})", lambda c: c.get_partition(db, table, values))

    def list_partitions(self, db: str, table: str) -> list[str]:
        return list(self._call(f"get_partition_names({db}.{table})", lambda c: c.get_partition_names(db, table, -1)))

    def partition_locations(self, table: TableInfo) -> dict[str, str]:
        """Every partition of ``table`` by the metastore's name, with its location, in one call."""
        found = self._call(
            f"get_partitions({table.db}.{table.table})", lambda c: c.get_partitions(table.db, table.table, -1)
        )
        return {make_partition_name(table.partition_keys, part.values): part.sd.location or "" for part in found or []}

    def partitions_located(self, table: TableInfo, names: Sequence[str]) -> dict[str, str]:
        """The partitions of ``table`` named ``names`` (the metastore's names) with their locations, in one
        call; a name the metastore does not know is absent. Where ``get_partitions_by_names`` is gone
        (Hive 4), every partition (:meth:`partition_locations`), filtered."""
        try:
            found = self._call(
                f"get_partitions_by_names({table.db}.{table.table}, {len(names)} names)",
                lambda c: c.get_partitions_by_names(table.db, table.table, list(names)),
            )
        except MetastoreError as error:
            if not _unknown_method(error):
                raise
            wanted = set(names)
            return {name: where for name, where in self.partition_locations(table).items() if name in wanted}
        return {make_partition_name(table.partition_keys, part.values): part.sd.location or "" for part in found or []}

    # transactions and write ids ---------------------------------------------------------------------

    def open_txn(self) -> int:
        request = ttypes.OpenTxnRequest(num_txns=1, user=self.user, hostname=self.hostname, agentInfo="acidclean")
        response = self._call("open_txns", lambda c: c.open_txns(request))
        return int(response.txn_ids[0])

    def commit_txn(self, txn_id: int) -> None:
        self._call(f"commit_txn({txn_id})", lambda c: c.commit_txn(ttypes.CommitTxnRequest(txnid=txn_id)))

    def abort_txn(self, txn_id: int) -> None:
        self._call(f"abort_txn({txn_id})", lambda c: c.abort_txn(ttypes.AbortTxnRequest(txnid=txn_id)))

    def heartbeat(self, txn_id: int | None = None, lock_id: int | None = None) -> None:
        request = ttypes.HeartbeatRequest(lockid=lock_id, txnid=txn_id)
        self._call("heartbeat", lambda c: c.heartbeat(request))

    def allocate_write_id(self, txn_id: int, db: str, table: str) -> int:
        """The write id of ``txn_id`` on the table: allocated on Hive 3+, the transaction id on Hive 2."""
        if self.kind is MetastoreKind.HIVE2:
            return txn_id
        request = ttypes.AllocateTableWriteIdsRequest(dbName=db, tableName=table, txnIds=[txn_id])
        response = self._call(f"allocate_table_write_ids({db}.{table})", lambda c: c.allocate_table_write_ids(request))
        return int(response.txnToWriteIds[0].writeId)

    def valid_txn_list(self) -> str:
        """Hive's ValidReadTxnList string ``hwm:minOpen:open,ids:aborted,ids`` of all transactions."""
        info = self._call("get_open_txns_info", lambda c: c.get_open_txns_info())
        open_ids = sorted(int(t.id) for t in info.open_txns or [] if t.state == ttypes.TxnState.OPEN)
        aborted_ids = sorted(int(t.id) for t in info.open_txns or [] if t.state == ttypes.TxnState.ABORTED)
        min_open = open_ids[0] if open_ids else NO_MIN_OPEN
        hwm = int(info.txn_high_water_mark)
        return f"{hwm}:{min_open}:{_ids(open_ids)}:{_ids(aborted_ids)}"

    def valid_write_ids(self, db: str, table: str) -> str:
        """The table's valid id list in Hive's string form ``db.table:hwm:minOpen:open:aborted``.

        On Hive 2 the ids are transaction ids (that is what Hive 2's delta names carry).
        """
        return self.valid_write_ids_of([(db, table)], self.valid_txn_list())[0]

    def valid_write_ids_of(self, tables: Sequence[tuple[str, str]], txn_list: str) -> list[str]:
        """The valid id lists of several tables (``(db, table)``, in that order) in the snapshot of the
        transaction list ``txn_list`` (:meth:`valid_txn_list`'s form): one call on Hive 3+, none on
        Hive 2, whose id lists are the transaction list itself."""
        full_names = [f"{db}.{table}" for db, table in tables]
        if self.kind is MetastoreKind.HIVE2 or not full_names:
            return [f"{full_name}:{txn_list}" for full_name in full_names]
        request = ttypes.GetValidWriteIdsRequest(fullTableNames=full_names, validTxnList=txn_list)
        what = f"get_valid_write_ids({', '.join(full_names[:3])}{', ...' if len(full_names) > 3 else ''})"
        response = self._call(what, lambda c: c.get_valid_write_ids(request))
        by_name = {str(ids.fullTableName).lower(): ids for ids in response.tblValidWriteIds or []}
        texts = []
        for full_name in full_names:
            ids = by_name.get(full_name.lower())
            if ids is None:
                raise MetastoreError(f"metastore answered {what} without {full_name}'s write ids")
            texts.append(_write_ids_text(full_name, ids))
        return texts

    # locks ------------------------------------------------------------------------------------------

    def lock(self, components: Sequence[LockRequestComponent], txn_id: int | None = None) -> LockResult:
        """Request locks (all or nothing). The state may be WAITING; poll with :meth:`check_lock`."""
        thrift_components = [
            ttypes.LockComponent(
                type=getattr(ttypes.LockType, component.lock_type.value),
                level=_level(component),
                dbname=component.db,
                tablename=component.table,
                partitionname=component.partition,
                operationType=getattr(ttypes.DataOperationType, component.operation.value),
                isTransactional=component.transactional,
            )
            for component in components
        ]
        request = ttypes.LockRequest(
            component=thrift_components, txnid=txn_id, user=self.user, hostname=self.hostname, agentInfo="acidclean"
        )
        response = self._call("lock", lambda c: c.lock(request))
        return LockResult(int(response.lockid), _state_name(response.state))

    def check_lock(self, lock_id: int) -> LockResult:
        response = self._call(f"check_lock({lock_id})", lambda c: c.check_lock(ttypes.CheckLockRequest(lockid=lock_id)))
        return LockResult(int(response.lockid), _state_name(response.state))

    def unlock(self, lock_id: int) -> None:
        self._call(f"unlock({lock_id})", lambda c: c.unlock(ttypes.UnlockRequest(lockid=lock_id)))

    def show_locks(
        self, db: str | None = None, table: str | None = None, partition: str | None = None
    ) -> list[LockInfo]:
        """Locks held or requested, optionally only those on one database, table or partition. The
        metastore matches ``partition`` as a string against the name it stored (lower-cased by Hive 3),
        and leaves out table-level locks: to find the locks on a partition, list the table's and
        keep those :func:`~acidclean.shared.acid.partition_names.lock_covers_partition` accepts."""
        requested = partition_name(partition)
        hive4 = self.major_version >= 4
        if hive4 and requested is not None:
            requested = _hive4_lock_name(requested)
        request = ttypes.ShowLocksRequest(dbname=db, tablename=table, partname=requested)
        response = self._call("show_locks", lambda c: c.show_locks(request))
        return _lock_infos(response.locks or [], hive4)

    # Hive's compactor ----------------------------------------------------------------------------

    def compactions(self, db: str, table: str, partition: str | None = None) -> list[CompactionInfo]:
        """Hive's compactions of ``db.table`` (with ``partition``: of that partition, in any spelling,
        or of the whole table), from ``show_compact``: the queue and the history the metastore keeps.
        Hive 4 filters by table itself; Hive 2 and 3 list all and the rest is left out here."""
        request = _ShowCompactRequest(db.lower(), table.lower())
        response = self._call("show_compact", lambda c: c.show_compact(request))
        found = []
        for element in response.compacts or []:
            info = _compaction_info(element)
            if info.db.lower() != db.lower() or info.table.lower() != table.lower():
                continue
            if partition is not None and not lock_covers_partition(info.partition, partition):
                continue
            found.append(info)
        return found

    def request_compaction(self, db: str, table: str, partition: str | None, compaction_type: str) -> int | None:
        """Queue a compaction in Hive's compaction queue (``compact2``), as ``ALTER TABLE ... COMPACT``
        does; returns its id. For tests and operators: acidclean itself never asks Hive to compact."""
        request = ttypes.CompactionRequest(
            dbname=db,
            tablename=table,
            partitionname=partition,
            type=getattr(ttypes.CompactionType, compaction_type.upper()),
            runas=self.user,
        )
        response = self._call(f"compact2({db}.{table})", lambda c: c.compact2(request))
        return int(response.id) if response.id is not None else None


def _unknown_method(error: MetastoreError) -> bool:
    cause = error.__cause__
    return isinstance(cause, TApplicationException) and cause.type == TApplicationException.UNKNOWN_METHOD


class _CreateTableRequest:
    """Hive 4's ``CreateTableRequest`` (absent from the Hive 3.0 IDL of hmsclient): the table (field 1)
    and the caller's processor capabilities (9) and identifier (10)."""

    def __init__(self, table: Any, capabilities: Sequence[str], identifier: str) -> None:
        self.table = table
        self.capabilities = list(capabilities)
        self.identifier = identifier

    def write(self, oprot: Any) -> None:
        oprot.writeStructBegin("CreateTableRequest")
        oprot.writeFieldBegin("table", TType.STRUCT, 1)
        self.table.write(oprot)
        oprot.writeFieldEnd()
        oprot.writeFieldBegin("processorCapabilities", TType.LIST, 9)
        oprot.writeListBegin(TType.STRING, len(self.capabilities))
        for capability in self.capabilities:
            oprot.writeString(capability)
        oprot.writeListEnd()
        oprot.writeFieldEnd()
        oprot.writeFieldBegin("processorIdentifier", TType.STRING, 10)
        oprot.writeString(self.identifier)
        oprot.writeFieldEnd()
        oprot.writeFieldStop()
        oprot.writeStructEnd()


_CREATE_TABLE_ERRORS = (
    ttypes.AlreadyExistsException,
    ttypes.InvalidObjectException,
    ttypes.MetaException,
    ttypes.NoSuchObjectException,
)


def _call_hive4_method(client: Any, name: str, request: Any, errors: Sequence[type[Any]]) -> None:
    """Call a void Thrift method that the Hive 3.0 IDL lacks, whose one argument is ``request`` (field
    1) and whose declared exceptions are ``errors`` (fields 1, 2, ...), as generated clients do."""
    oprot, iprot = client._oprot, client._iprot
    oprot.writeMessageBegin(name, TMessageType.CALL, client._seqid)
    oprot.writeStructBegin(f"{name}_args")
    oprot.writeFieldBegin("request", TType.STRUCT, 1)
    request.write(oprot)
    oprot.writeFieldEnd()
    oprot.writeFieldStop()
    oprot.writeStructEnd()
    oprot.writeMessageEnd()
    oprot.trans.flush()
    _, message_type, _ = iprot.readMessageBegin()
    if message_type == TMessageType.EXCEPTION:
        failure = TApplicationException()
        failure.read(iprot)
        iprot.readMessageEnd()
        raise failure
    declared: Exception | None = None
    iprot.readStructBegin()
    while True:
        _, field_type, field_id = iprot.readFieldBegin()
        if field_type == TType.STOP:
            break
        if field_type == TType.STRUCT and 1 <= field_id <= len(errors):
            declared = errors[field_id - 1]()
            declared.read(iprot)  # type: ignore[union-attr]
        else:
            iprot.skip(field_type)
        iprot.readFieldEnd()
    iprot.readStructEnd()
    iprot.readMessageEnd()
    if declared is not None:
        raise declared


class _ShowCompactRequest:
    """``ShowCompactRequest`` with Hive 4's filters on database (field 3) and table (4). Hive 2 and 3
    know no fields and skip them (Thrift skips unknown fields), so they list every compaction."""

    def __init__(self, db: str, table: str) -> None:
        self.db = db
        self.table = table

    def write(self, oprot: Any) -> None:
        oprot.writeStructBegin("ShowCompactRequest")
        for field_id, name, value in ((3, "dbName", self.db), (4, "tbName", self.table)):
            oprot.writeFieldBegin(name, TType.STRING, field_id)
            oprot.writeString(value)
            oprot.writeFieldEnd()
        oprot.writeFieldStop()
        oprot.writeStructEnd()


# Thrift's CompactionType: Hive 2 and 3 know the first two.
_COMPACTION_TYPES = {1: "MINOR", 2: "MAJOR", 3: "REBALANCE", 4: "ABORT_TXN_CLEANUP"}


def _compaction_info(element: Any) -> CompactionInfo:
    return CompactionInfo(
        compaction_id=int(element.id) if element.id is not None else None,
        db=element.dbname,
        table=element.tablename,
        partition=element.partitionname or None,
        compaction_type=_COMPACTION_TYPES.get(element.type, str(element.type)),
        state=element.state or "",
        worker_id=element.workerid or None,
        run_as=element.runAs or None,
        started_at_ms=int(element.start) if element.start else None,
    )


def _write_ids_text(full_name: str, ids: Any) -> str:
    """A thrift ``TableValidWriteIds`` in Hive's string form ``db.table:hwm:minOpen:open:aborted``."""
    invalid = [int(i) for i in ids.invalidWriteIds or []]
    aborted_flags = _bits(ids.abortedBits or b"", len(invalid))
    open_write_ids = [i for i, aborted in zip(invalid, aborted_flags, strict=True) if not aborted]
    aborted_write_ids = [i for i, aborted in zip(invalid, aborted_flags, strict=True) if aborted]
    min_open_write_id = int(ids.minOpenWriteId) if ids.minOpenWriteId is not None else NO_MIN_OPEN
    return (
        f"{full_name}:{int(ids.writeIdHighWaterMark)}:{min_open_write_id}:"
        f"{_ids(open_write_ids)}:{_ids(aborted_write_ids)}"
    )


def _ids(ids: Sequence[int]) -> str:
    return ",".join(str(i) for i in ids)


def _bits(bitset: bytes, count: int) -> list[bool]:
    """Java BitSet.toByteArray (little-endian bit order) as booleans."""
    return [bool(bitset[i // 8] >> (i % 8) & 1) if i // 8 < len(bitset) else False for i in range(count)]


def _level(component: LockRequestComponent) -> int:
    if component.partition:
        return cast(int, ttypes.LockLevel.PARTITION)
    if component.table:
        return cast(int, ttypes.LockLevel.TABLE)
    return cast(int, ttypes.LockLevel.DB)


def _state_name(state: int) -> str:
    return str(ttypes.LockState._VALUES_TO_NAMES.get(state, str(state)))


def _hive4_lock_name(name: str) -> str:
    """The name a Hive 4 metastore stores for a lock on partition ``name`` (``TxnUtils.normalizePartitionCase``):
    split at ``/`` and ``=``, then ``FileUtils.makePartName``, which lower-cases the keys and escapes keys
    and values once more. Hive's escaped ``city=St. John%27s%232`` becomes ``city=St. John%2527s%25232``."""
    pairs = (component.partition("=") for component in name.split("/"))
    return "/".join(f"{escape_path_name(key.lower())}={escape_path_name(value)}" for key, _, value in pairs)


def _sent_lock_name(stored: str) -> str:
    """The partition name a client sent, from the name a Hive 4 metastore stored for its lock: each key
    and value unescaped once (the inverse of :func:`_hive4_lock_name`, keys lower-cased)."""
    pairs = (component.partition("=") for component in stored.split("/"))
    return "/".join(f"{unescape_path_name(key)}={unescape_path_name(value)}" for key, _, value in pairs)


def _lock_infos(elements: Iterable[Any], hive4: bool = False) -> list[LockInfo]:
    """``show_locks``'s rows as :class:`LockInfo`. Built positionally with the name tables looked up
    once: an unfiltered list of 10,000 locks is converted once or twice a cleanup interval, and a
    keyword call per row took twice as long (about 50 ms of held GIL against 25 ms)."""
    make = LockInfo._make
    types, states = ttypes.LockType._VALUES_TO_NAMES, ttypes.LockState._VALUES_TO_NAMES
    rows = []
    for element in elements:
        partition, lock_type, state = element.partname, element.type, element.state
        acquired, heartbeat = element.acquiredat, element.lastheartbeat
        rows.append(
            make(
                (
                    int(element.lockid),
                    int(element.txnid or 0),
                    element.dbname,
                    element.tablename,
                    _sent_lock_name(partition) if hive4 and partition else partition,
                    str(types[lock_type]) if lock_type in types else str(lock_type),
                    str(states[state]) if state in states else str(state),
                    element.user or "",
                    element.hostname or "",
                    int(acquired) if acquired else None,
                    int(heartbeat) if heartbeat else None,
                )
            )
        )
    return rows


def _closed_on_us(error: BaseException) -> bool:
    """Whether a fresh connection failed the way a metastore that requires SASL fails a plain call:
    it reads the call as a bad negotiation and hangs up (Hive 2, 4), or first sends a SASL ERROR
    frame, whose status and length read as a Thrift message of 64 MiB (Hive 3)."""
    return isinstance(error, TTransport.TTransportException) and error.type in (
        TTransport.TTransportException.END_OF_FILE,
        TTransport.TTransportException.SIZE_LIMIT,
    )


def _create_time(thrift_object: Any) -> int | None:
    value = getattr(thrift_object, "createTime", None)
    return int(value) if value else None


def _table_id(thrift_table: Any) -> int | None:
    """Hive 4's table id (``Table.id``, absent from the Hive 2 and 3 Thrift API and then None)."""
    value = getattr(thrift_table, "id", None)
    return int(value) if value is not None and int(value) > 0 else None
