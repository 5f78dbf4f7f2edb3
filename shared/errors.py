"""The one exception family of acidclean.

Every error says what went wrong and what to do about it, so a message can be shown to an operator
as it is.
"""

from __future__ import annotations


class AcidCleanError(Exception):
    """Base of every error acidclean raises on purpose."""


class ConfigurationError(AcidCleanError):
    """A setting is missing, unknown or has a value of the wrong kind."""


class StackError(AcidCleanError):
    """A local-stack service could not be resolved, started, reached or stopped."""


class MetastoreError(AcidCleanError):
    """The Hive Metastore refused a call or could not be reached."""


class MetastoreAuthenticationError(MetastoreError, ConfigurationError):
    """Kerberos or the metastore refused this client's credentials (wrong principal, keytab or ticket).

    A configuration error too: like credentials a Kafka broker refuses, it is fixed in the settings,
    not by waiting (the command line's exit code 2); the cleaner still waits on it as on any
    metastore failure, deleting nothing."""


class TableNotFoundError(MetastoreError):
    """The metastore has no such database, table or partition."""


class BusError(AcidCleanError):
    """Kafka refused a call, or a delivery was not acknowledged in time."""


class AcidLayoutError(AcidCleanError):
    """A table directory does not follow Hive's ACID layout rules."""


class UnsafePathError(AcidCleanError):
    """A path the cleaner was asked to delete fails the safety rules (docs/design.md section 7, rule 4)."""


class NotEnoughHistoryError(AcidLayoutError):
    """No base is usable for a snapshot although compacted bases exist: the compactor erased the
    history the snapshot needs (Hive's ACID_NOT_ENOUGH_HISTORY). Retry with a newer snapshot."""

    def __init__(self, message: str, *, oldest_base: str) -> None:
        super().__init__(message)
        self.oldest_base = oldest_base


class UnreadableFileError(AcidCleanError):
    """A data file of an ACID table could not be read (missing, truncated, or not ORC)."""


class VacuumError(AcidCleanError):
    """A vacuum (compaction) failed; what it wrote is only under a hidden ``_tmp`` directory."""


class VacuumRefusedError(VacuumError):
    """A vacuum was not started because it must not or need not run (non-transactional table,
    nothing to compact, an open transaction below every delta); nothing was written."""


class NothingToCompactError(VacuumRefusedError):
    """The table or partition has nothing a vacuum of this type would compact now (no second delta, a
    base that already holds every row, or only deltas above an open transaction); nothing was written."""


class VacuumBusyError(VacuumRefusedError):
    """Another vacuum holds the table's or partition's vacuum lock: nothing was written; try later."""


class VacuumFencedError(VacuumError):
    """The vacuum no longer holds its vacuum lock (another vacuum took it over, or the metastore timed
    it out): it made nothing visible; its staging directory is left for a later vacuum to remove."""
