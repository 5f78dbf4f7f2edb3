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


class TableNotFoundError(MetastoreError):
    """The metastore has no such database, table or partition."""


class BusError(AcidCleanError):
    """Kafka refused a call, or a delivery was not acknowledged in time."""


class AcidLayoutError(AcidCleanError):
    """A table directory does not follow Hive's ACID layout rules."""


class UnsafePathError(AcidCleanError):
    """A path the cleaner was asked to delete fails the safety rules (DESIGN.md section 7, rule 4)."""
