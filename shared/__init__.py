"""Adapters (file system, metastore, bus, settings) and the pure ACID rules in ``acid``."""
