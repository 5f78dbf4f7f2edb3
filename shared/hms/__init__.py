"""The parts of :class:`~acidclean.shared.hive_metastore.HiveMetastore`, one seam a module: the connection
(URIs, transport, retry, which Hive), the catalog (tables and partitions), transactions and write ids,
locks, Hive's compaction queue, and the Thrift messages the Hive 3.0 IDL lacks."""
