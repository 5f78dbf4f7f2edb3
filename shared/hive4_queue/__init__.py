"""Hive 4's compaction queue over Thrift: the bindings generated from the IDL subset beside this file
(``generated/``: generated code, exempt from the size limits; ``make hive4-thrift`` regenerates it) and
the adapter that calls them (:mod:`.queue`)."""
