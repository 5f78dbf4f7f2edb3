"""The local stack: a real Kafka broker and a real Hive Metastore as local JVM processes."""
