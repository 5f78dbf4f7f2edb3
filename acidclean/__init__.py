"""acidclean: an event-driven cleaner for Hive ACID tables.

The top-level folders of the repository (``shared``, ``schemas``, ``producers``, ``consumers``,
``deploy``) are mapped into this one import namespace, so they import as ``acidclean.shared`` and so
on, never as bare generic names.
"""

__version__ = "0.1.0"
