"""acidclean as the worker and cleaner of Hive's own compaction queue (issue 53): requests entered the
Hive way (``ALTER TABLE ... COMPACT``, ``compact2``) become ``VacuumRequested``, and the queue entry
follows the vacuum and its cleanup through Hive's states, so ``SHOW COMPACTIONS`` shows acidclean's
work. :mod:`.progress` is the pure part (what the event log says, what the entry should become);
:mod:`.bridge` is the process around it."""
