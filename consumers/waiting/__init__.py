"""A delay record carrying several waiting vacuums of one key (``DelayedVacuums``), read and written
without the event models.

A cleaner with tens of thousands of vacuums parked behind held locks re-checks every one of them each
cleanup interval. Through the pydantic models, one vacuum's decode, envelope and encode cost 0.3-0.5 ms
of Python, which caps a process at a few thousand parked vacuums. Here a ``DelayedVacuums`` is read
with msgspec into thin views (the few fields a re-check needs) while each vacuum's JSON is kept as raw
bytes, and a not-ready vacuum is written back with those same bytes: a vacuum is parsed by the models
only when it leaves the group (found ready, or refused).

A ``DelayedVacuums`` whose vacuums all wait on snapshot locks alone carries an ``unchanged`` summary
(the ids of those locks, how many checks found them all still listed, the oldest commits). A check
that finds every one of those locks listed cannot find any vacuum ready: it writes the same entries on
unread (:func:`carry_unchanged`), ``checks`` one higher. Every
:func:`~acidclean.schemas.events.MAX_UNCHANGED_CHECKS` checks or fewer, and whenever a lock is gone,
the vacuums are read and checked in full.

Nothing here decides safety. A group whose bytes do not read exactly as expected gives ``None`` and
the caller decodes it with the models (which refuse it with the reason, or accept it and
:func:`group_of_model` reads it again from the models' own JSON). A vacuum found ready leaves the group
as an ordinary :class:`DelayEnvelope` due at once, checked again and cleaned by the usual path, where
the models validate it in full.
"""

from acidclean.consumers.waiting.carried import CarriedOn, EnvelopeCarried, carry_envelope_on, carry_on_unread
from acidclean.consumers.waiting.group import (
    EntryFacts,
    Unchanged,
    UnreadableGroup,
    WaitingGroup,
    facts_of,
    group_of_model,
    read_envelope,
    read_group,
    summary_of,
    unchanged_checks_limit,
    unchanged_now,
)
from acidclean.consumers.waiting.wire import (
    LockRef,
    Member,
    VacuumKey,
    VacuumView,
    WireEnvelope,
    WireGroup,
    WireGroupCarried,
    WireUnchanged,
    WireWaiting,
    iso,
    vacuum_id_of,
)
from acidclean.consumers.waiting.written import (
    GroupOut,
    build_envelope,
    build_groups,
    carry_unchanged,
    counting_prior_checks,
    empty_group_shell,
    entry_of_envelope,
    still_waiting,
)

__all__ = [
    "CarriedOn",
    "EntryFacts",
    "EnvelopeCarried",
    "GroupOut",
    "LockRef",
    "Member",
    "Unchanged",
    "UnreadableGroup",
    "VacuumKey",
    "VacuumView",
    "WaitingGroup",
    "WireEnvelope",
    "WireGroup",
    "WireGroupCarried",
    "WireUnchanged",
    "WireWaiting",
    "build_envelope",
    "build_groups",
    "carry_envelope_on",
    "carry_on_unread",
    "carry_unchanged",
    "counting_prior_checks",
    "empty_group_shell",
    "entry_of_envelope",
    "facts_of",
    "group_of_model",
    "iso",
    "read_envelope",
    "read_group",
    "still_waiting",
    "summary_of",
    "unchanged_checks_limit",
    "unchanged_now",
    "vacuum_id_of",
]
