"""Hive ACID ORC files on storage: listing a table directory, reading a snapshot's rows, writing
bucket files with Hive's metadata. The only part of the ACID code that does I/O (pyarrow, pyorc);
the rules it applies are in :mod:`acidclean.shared.acid`."""
