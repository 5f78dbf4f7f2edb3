// Lines copied verbatim from apache/hive standalone-metastore/metastore-common/src/main/thrift/hive_metastore.thrift
// (the struct blocks and service lines of the compaction queue; ids equal in 4.0.1, checked against its jar).
// test_hive4_idl_subset.py compares shared/hive4_queue/hive4_compaction_queue.thrift with them.

enum CompactionType {
    MINOR = 1,
    MAJOR = 2,
    REBALANCE = 3,
    ABORT_TXN_CLEANUP = 4,
}

exception MetaException {
  1: string message
}

struct CompactionRequest {
    1: required string dbname
    2: required string tablename
    3: optional string partitionname
    4: required CompactionType type
    5: optional string runas
    6: optional map<string, string> properties
    7: optional string initiatorId
    8: optional string initiatorVersion
    9: optional string poolName
    10: optional i32 numberOfBuckets
    11: optional string orderByClause;
}

struct CompactionInfoStruct {
    1: required i64 id,
    2: required string dbname,
    3: required string tablename,
    4: optional string partitionname,
    5: required CompactionType type,
    6: optional string runas,
    7: optional string properties,
    8: optional bool toomanyaborts,
    9: optional string state,
    10: optional string workerId,
    11: optional i64 start,
    12: optional i64 highestWriteId,
    13: optional string errorMessage,
    14: optional bool hasoldabort,
    15: optional i64 enqueueTime,
    16: optional i64 retryRetention,
    17: optional string poolname
    18: optional i32 numberOfBuckets
    19: optional string orderByClause;
}

struct OptionalCompactionInfoStruct {
    1: optional CompactionInfoStruct ci,
}

struct CompactionResponse {
    1: required i64 id,
    2: required string state,
    3: required bool accepted,
    4: optional string errormessage
}

struct ShowCompactRequest {
    1: optional i64 id,
    2: optional string poolName,
    3: optional string dbName,
    4: optional string tbName,
    5: optional string partName,
    6: optional CompactionType type,
    7: optional string state,
    8: optional i64 limit,
    9: optional string order
}

struct ShowCompactResponseElement {
    1: required string dbname,
    2: required string tablename,
    3: optional string partitionname,
    4: required CompactionType type,
    5: required string state,
    6: optional string workerid,
    7: optional i64 start,
    8: optional string runAs,
    9: optional i64 hightestTxnId, // Highest Txn ID handled by this compaction
    10: optional string metaInfo,
    11: optional i64 endTime,
    12: optional string hadoopJobId = "None",
    13: optional i64 id,
    14: optional string errorMessage,
    15: optional i64 enqueueTime,
    16: optional string workerVersion,
    17: optional string initiatorId,
    18: optional string initiatorVersion,
    19: optional i64 cleanerStart,
    20: optional string poolName,
    21: optional i64 nextTxnId,
    22: optional i64 txnId,
    23: optional i64 commitTime,
    24: optional i64 hightestWriteId

}

struct ShowCompactResponse {
    1: required list<ShowCompactResponseElement> compacts,
}

struct FindNextCompactRequest {
    1: optional string workerId,
    2: optional string workerVersion,
    3: optional string poolName
}

service ThriftHiveMetastore {
  CompactionResponse compact2(1:CompactionRequest rqst)
  ShowCompactResponse show_compact(1:ShowCompactRequest rqst)
  OptionalCompactionInfoStruct find_next_compact(1: string workerId) throws(1:MetaException o1)
  OptionalCompactionInfoStruct find_next_compact2(1: FindNextCompactRequest rqst) throws(1:MetaException o1)
  void update_compactor_state(1: CompactionInfoStruct cr, 2: i64 txn_id)
  void mark_cleaned(1:CompactionInfoStruct cr) throws(1:MetaException o1)
  void mark_compacted(1: CompactionInfoStruct cr) throws(1:MetaException o1)
  void mark_failed(1: CompactionInfoStruct cr) throws(1:MetaException o1)
  void mark_refused(1: CompactionInfoStruct cr) throws(1:MetaException o1)
  void set_hadoop_jobid(1: string jobId, 2: i64 cq_id)
}
