"""A bundle of waiting tables' ``DelayedVacuums`` as the cleaner's loop reads it (see
:mod:`acidclean.shared.bus.bundle` for the wire format, and ``BundleChecker.check_bundle`` in
:mod:`acidclean.consumers.bundle_check` for its check).

The loop hands a bundle over as one work item, due at the latest due time of its members. Its check
carries on, in a new bundle of the same partition, every member whose ``unchanged`` locks are all
still listed (:func:`acidclean.consumers.waiting.unchanged_now`: only ever "still waiting"), and
publishes every other member again on its own, byte for byte, due at once: that record is then read,
checked in full and cleaned by the usual path of its table's lane. Nothing in a bundle is ever
cleaned, refused or trusted without that path.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime

from acidclean.schemas.events import VacuumCommitted
from acidclean.shared.bus.bundle import BUNDLE_TYPE, BundleSummary, ReadBundle, unpack
from acidclean.shared.bus.records import RawRecord


@dataclass(frozen=True)
class WaitingBundle:
    """A bundle read by the loop: what the loop's bookkeeping and the check read of it."""

    read: ReadBundle
    due_at: datetime
    # Keys whose members its check must send out on their own whatever their locks: records of those
    # tables wait to be checked with them (the loop's joiners), which happens in their lanes.
    spill: set[bytes] = field(default_factory=set, compare=False)
    # Fresh vacuums of its tables that ride in its lane, by key: its check may take them into their
    # table's next record (BundleChecker._kept_in_bundle); those it does not go back to their own lanes.
    riders: dict[bytes, tuple[VacuumCommitted, ...]] = field(default_factory=dict, compare=False)
    event_type = BUNDLE_TYPE
    table = ""  # a bundle has no table of its own: each member names its own
    partition = None
    correlation_id = None
    key = ""

    @property
    def event_id(self) -> uuid.UUID:
        return self.read.event_id

    @property
    def tenant(self) -> str:
        return self.read.tenant

    @property
    def occurred_at(self) -> datetime:
        return self.read.occurred_at

    @property
    def oldest_commit(self) -> datetime:
        return self.read.oldest_commit or self.read.occurred_at

    @property
    def members(self) -> tuple[RawRecord, ...]:
        """Its members, read when first asked for (see :class:`ReadBundle`)."""
        return self.read.members

    @property
    def count(self) -> int:
        return self.read.count

    @property
    def summary(self) -> BundleSummary | None:
        """Its summary (every member waits on snapshot locks alone): see acidclean.shared.bus.bundle.
        None: its members are checked one by one."""
        return self.read.summary

    @property
    def records(self) -> bytes | memoryview | None:
        """Its members' bytes, when it has a summary."""
        return self.read.records

    @property
    def compressed(self) -> bool:
        return self.read.compressed

    @property
    def carried(self) -> int:
        """Checks that carried it on whole since its members were written: each member's own
        ``unchanged.checks`` is that many behind."""
        return 0 if self.summary is None else self.summary.carried

    @property
    def lane(self) -> str:
        return f"\x00bundle/{self.event_id}"

    def member_keys(self) -> set[bytes]:
        """Its members' keys, read from its members (what riders are matched against)."""
        return self.read.member_keys()

    @property
    def listed_keys(self) -> tuple[str, ...]:
        """Its members' keys as its header lists them (see ReadBundle.listed_keys): for a whole carry."""
        return self.read.listed_keys

    def listed_member_keys(self) -> set[bytes]:
        return self.read.listed_member_keys()


def read_bundle(record: RawRecord, tenant: str, due_at: datetime) -> WaitingBundle | None:
    """The bundle in ``record`` if it is a well-formed bundle of ``tenant``, else None (the models then
    refuse it, with its raw bytes, on the dead-letter topic)."""
    bundle: ReadBundle | None = unpack(record)
    if bundle is None or bundle.tenant != tenant:
        return None
    return WaitingBundle(bundle, due_at)
