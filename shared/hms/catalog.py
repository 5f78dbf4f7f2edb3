"""The catalog calls of :class:`~acidclean.shared.hive_metastore.HiveMetastore`: databases, tables and
their partitions, read as :class:`~acidclean.shared.metastore.TableInfo`. Where Hive 4 removed a call
(``get_table``, ``get_table_objects_by_name``, ``get_partitions_by_names``; HIVE-26537) or refuses one
without the caller's capabilities (``create_table`` of an ACID table), the Hive 4 call is made instead,
and remembered per client.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from hmsclient.genthrift.hive_metastore import ttypes

from acidclean.shared.acid.partition_names import make_partition_name, value_readings
from acidclean.shared.errors import MetastoreError, TableNotFoundError
from acidclean.shared.hms.connection import MetastoreConnection, unknown_method
from acidclean.shared.hms.wire import CREATE_TABLE_ERRORS, CreateTableRequest, call_hive4_method
from acidclean.shared.metastore import TableInfo, partition_name

ORC_SERDE = "org.apache.hadoop.hive.ql.io.orc.OrcSerde"
ORC_INPUT = "org.apache.hadoop.hive.ql.io.orc.OrcInputFormat"
ORC_OUTPUT = "org.apache.hadoop.hive.ql.io.orc.OrcOutputFormat"
# What Hive 4's metastore asks of a client that creates a full ACID table (MetastoreDefaultTransformer).
ACID_CAPABILITIES = ("HIVEFULLACIDREAD", "HIVEFULLACIDWRITE")


class CatalogCalls(MetastoreConnection):
    """Databases, tables and partitions."""

    _get_table_call = "get_table"  # "get_table_req" once a Hive 4 metastore refused get_table
    _get_tables_call = "get_table_objects_by_name"  # or its "_req", as for get_table

    def get_all_databases(self) -> list[str]:
        return list(self._call("get_all_databases", lambda c: c.get_all_databases()))

    def database_parameters(self, db: str) -> dict[str, str]:
        """The database's parameters (``repl.source.for`` among them)."""
        return dict(self._call(f"get_database({db})", lambda c: c.get_database(db)).parameters or {})

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
            request = CreateTableRequest(definition, ACID_CAPABILITIES, f"acidclean@{self.hostname}")
            self._call(
                f"create_table_req({db}.{table})",
                lambda c: call_hive4_method(c, "create_table_req", request, CREATE_TABLE_ERRORS),
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
                if not unknown_method(error):
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
                if not unknown_method(error):
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
            if not unknown_method(error):
                raise
            wanted = set(names)
            return {name: where for name, where in self.partition_locations(table).items() if name in wanted}
        return {make_partition_name(table.partition_keys, part.values): part.sd.location or "" for part in found or []}


def _create_time(thrift_object: Any) -> int | None:
    value = getattr(thrift_object, "createTime", None)
    return int(value) if value else None


def _table_id(thrift_table: Any) -> int | None:
    """Hive 4's table id (``Table.id``, absent from the Hive 2 and 3 Thrift API and then None)."""
    value = getattr(thrift_table, "id", None)
    return int(value) if value is not None and int(value) > 0 else None
