"""The end of a batch: every deferred outcome and every parked vacuum's next record, published in one
``publish_many`` with one wait for the acknowledgements. A lane's parked vacuums are merged by key
(one record per key), and the records of many tables of one delay partition are packed into bundles;
a record the broker refuses fails every outcome it carries. Once the broker answered, what it took
is logged, counted and remembered (:mod:`acidclean.consumers.own_checks`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timezone
from functools import partial

from acidclean.consumers.logs import log
from acidclean.consumers.outcome_batch import (
    BundleCheck,
    DelayOut,
    OutcomeBatch,
    Outgoing,
    PendingEnvelope,
    StillWaiting,
    UnchangedGroup,
    unchanged_members,
    whole_part,
)
from acidclean.consumers.outcome_notes import OutcomeNotes
from acidclean.consumers.own_checks import OwnChecks
from acidclean.consumers.publishing import OutcomePublisher
from acidclean.consumers.scheduling import in_due_order_by_key
from acidclean.consumers.table_check import TableLockCheck
from acidclean.consumers.waiting import (
    EntryFacts,
    GroupOut,
    build_envelope,
    build_groups,
    carry_unchanged,
    entry_of_envelope,
)
from acidclean.consumers.work import CleanerContext
from acidclean.schemas.common import EventBase
from acidclean.schemas.events import MAX_WAITING_PER_ENVELOPE, CleanupDone, DelayEnvelope
from acidclean.shared.bus.bundle import (
    Bundle,
    BundleSummary,
    CarriedBundle,
    PrebuiltRecord,
    Republished,
    bundles_of,
    summary_of_members,
)
from acidclean.shared.bus.codec import due_at_ms, header_due_at_ms
from acidclean.shared.errors import BusError

LOGGER = logging.getLogger("acidclean.cleaner")


class BatchWriter:
    """Publishes a batch's outcomes and parked vacuums' records, and notes what the broker took."""

    def __init__(
        self, context: CleanerContext, publisher: OutcomePublisher, notes: OutcomeNotes, own_checks: OwnChecks
    ) -> None:
        self._context = context
        self._publisher = publisher
        self._notes = notes
        self._own_checks = own_checks

    def flush_batch(self, batch: OutcomeBatch) -> dict[str, BusError]:
        """Publish every deferred outcome of ``batch`` (delay envelopes, CleanupDone, dead letters) in one
        ``publish_many`` and wait for the acknowledgements. Returns the outcomes the broker did not take,
        by event id (empty when it took them all): if the batch fails, each is published on its own, so
        one event Kafka refuses for good does not hold back the others' partitions."""
        outgoing, batch.outbox = batch.outbox, []
        outs: list[DelayOut] = []
        for locks in batch.tables:
            outs.extend(self._delay_outs(locks))
        checks, batch.bundles = batch.bundles, []
        for check in checks:
            outs.extend(check.carried)
        items: list[tuple[str, EventBase | PrebuiltRecord]] = [
            (item.topic, item.event)
            for item in outgoing
            if not self._context.config.dry_run or isinstance(item.event, CleanupDone)
        ]
        alone, bundles = (outs, []) if self._context.config.dry_run else self._bundled(outs, checks)
        if not self._context.config.dry_run:
            items += [(self._context.config.topics.cleanup_delay, out.event) for out in alone]
            items += [(self._context.config.topics.cleanup_delay, bundle) for bundle, _ in bundles]
            items += [(self._context.config.topics.cleanup_delay, spill) for check in checks for spill in check.spilled]
            items += [
                (self._context.config.topics.cleanup_delay, check.whole) for check in checks if check.whole is not None
            ]
        for out in alone:
            batch.carry_all(out.event, out.outcome_ids)
        for bundle, packed in bundles:
            batch.carry_all(bundle, (i for out in packed for i in (str(out.event.event_id), *out.outcome_ids)))
        for check in checks:
            for spill in check.spilled:
                batch.carry(spill, check.outcome_id)
            if check.whole is not None:
                batch.carry(check.whole, check.outcome_id)
        failed = self._publisher.publish_isolating(items)
        try:
            self._note_published(batch, outgoing, alone, bundles, checks, failed)
        except Exception as note_error:
            # The broker has the records: this process's own notes of them (metrics, logs, due times
            # for joiners) are all that is lost. Raised, the loop took the batch for never publishable
            # and dead-lettered its source records although their successors were out.
            self._context.metrics.events.labels("notes_failed").inc()
            LOGGER.error(
                "the batch's records were acknowledged but noting them failed; they stay published "
                "and their sources are committed (report this: it is a bug)",
                exc_info=note_error,
            )
        # An outcome that went out inside another record fails with it: a work is finished only once
        # every record carrying its outcome was acknowledged.
        for published, outcome_ids in batch.carried_by.items():
            error = failed.get(published)
            if error is not None:
                for outcome_id in outcome_ids:
                    failed.setdefault(outcome_id, error)
        batch.carried_by.clear()
        if any(isinstance(item.event, CleanupDone) and str(item.event.event_id) not in failed for item in outgoing):
            self._context.crash.reached("after-done")
        return failed

    def _note_published(
        self,
        batch: OutcomeBatch,
        outgoing: Sequence[Outgoing],
        alone: Sequence[DelayOut],
        bundles: Sequence[tuple[Bundle, list[DelayOut]]],
        checks: Sequence[BundleCheck],
        failed: dict[str, BusError],
    ) -> None:
        """After the broker answered: log, count and remember what it took."""
        for item in outgoing:
            if str(item.event.event_id) not in failed:
                item.after()
        for out in alone:
            if str(out.event.event_id) not in failed:
                self._delay_published(out)
                self._own_checks.remember([(out.event, out.checked_at)], self._context.now_ms())
        for bundle, packed in bundles:
            if str(bundle.event_id) not in failed:
                for out in packed:
                    self._delay_published(out)  # a fresh vacuum of its table waits for it (the loop's joiners)
                self._context.metrics.events.labels("bundled").inc(len(packed))
                self._own_checks.remember([(bundle, min(out.checked_at for out in packed))], self._context.now_ms())
        for check in checks:
            if check.whole is not None and str(check.whole.event_id) not in failed:
                self._carried_whole(check.whole, check.keys)
            for spill in check.spilled:
                if str(spill.event_id) not in failed:
                    self._spill_published(spill)
        self._own_checks.bundles_acknowledged(checks, failed, batch.carried_by, self._context.now_ms())
        spilled = sum(len(check.spilled) for check in checks if check.outcome_id not in failed)
        if spilled:
            self._context.metrics.events.labels("bundle_spilled").inc(spilled)

    def _delay_outs(self, locks: TableLockCheck) -> list[DelayOut]:
        """One lane's delay records of this batch (its table's vacuums still waiting), merged by key."""
        classic, merged, unread_groups = self._merge_delays(locks.pending, locks.waiting, locks.unchanged)
        locks.pending, locks.waiting, locks.unchanged = [], [], []
        outs = [
            DelayOut(
                envelope,
                (),
                locks.read_from,
                envelope.occurred_at,
                envelope.vacuum.occurred_at,
                partial(self._notes.delays_published, [entry]),
            )
            for entry in classic
            for envelope in (entry[2],)
        ]
        outs += [
            DelayOut(
                out.event,
                tuple(member.outcome_id for member in members),
                locks.read_from,
                min(member.checked_at for member in members),
                min(member.facts.committed_at for member in members),
                partial(self._notes.group_published, out, members),
                whole_part(out.event.key, out.unchanged),
            )
            for out, members in merged
        ]
        outs += [
            DelayOut(
                out.event,
                (str(unread.group.event_id),),
                unread.group.read_from,
                unread.checked_at,
                unread.group.oldest_commit,
                partial(self._notes.carried_published, out, unread),
                whole_part(out.event.key, out.unchanged),
            )
            for out, unread in unread_groups
        ]
        if locks.carries_for:
            outs = [dataclasses.replace(out, outcome_ids=out.outcome_ids + locks.carries_for) for out in outs]
        return outs

    def _carried_whole(self, whole: CarriedBundle, keys: Sequence[str]) -> None:
        """A bundle carried on whole is acknowledged: its tables' next records are in it (a fresh vacuum
        of one of them joins it), and the loop may answer it with a lock list asked after this check."""
        self._own_checks.note_chain_due([(key, whole.due_at_ms) for key in keys])
        self._own_checks.remember([(whole, whole.occurred_at)], self._context.now_ms())
        self._context.metrics.events.labels("bundle_carried_whole").inc()
        self._context.metrics.events.labels("bundled").inc(len(keys))
        log(
            LOGGER,
            logging.DEBUG,
            f"not ready; every lock its {len(keys)} records wait on still listed: bundle carried on whole",
            outcome="delayed",
            event_id=whole.event_id,
            causation_id=whole.previous,
            due_at=datetime.fromtimestamp(whole.due_at_ms / 1000, timezone.utc).isoformat(),
        )

    def _spill_published(self, spill: Republished) -> None:
        """A bundle's member published again on its own is its table's latest record, due as it was
        packed (in the past: a bundle carried on whole keeps its members' bytes): a record of its table
        read before it waits for no later one."""
        due = header_due_at_ms(spill.record)
        self._own_checks.note_chain_due([(spill.record.key.decode("utf-8", "replace"), due)])

    def _delay_published(self, out: DelayOut) -> None:
        out.published()
        self._own_checks.note_chain_due([(out.event.key, due_at_ms(out.event.due_at))])

    def _bundled(
        self, outs: list[DelayOut], checks: Sequence[BundleCheck]
    ) -> tuple[list[DelayOut], list[tuple[Bundle, list[DelayOut]]]]:
        """The delay records that go on in bundles, by the delay partition their keys' records were read
        from (at least ``bundle_min`` of one partition, or any carried by a bundle's check, at most
        ``bundle_max`` a bundle), and those that go on alone (their partition unknown: a table seen only
        on the vacuum topic so far, or too few of one partition). The same record twice (two copies of
        one bundle, a forged one) goes on once, carrying the outcomes of both."""
        by_partition: dict[int, dict[str, DelayOut]] = {}
        alone: list[DelayOut] = []
        for out in outs:
            if out.read_from is None:
                alone.append(out)
                continue
            packed = by_partition.setdefault(out.read_from, {})
            key = str(out.event.event_id)
            known = packed.get(key)
            packed[key] = (
                out if known is None else dataclasses.replace(known, outcome_ids=known.outcome_ids + out.outcome_ids)
            )
        from_bundles = {check.partition for check in checks if check.carried or check.absorbed}
        bundles: list[tuple[Bundle, list[DelayOut]]] = []
        parts_off = self._context.config.parts_off
        for partition, by_id in by_partition.items():
            partition_outs = list(by_id.values())
            if len(partition_outs) < max(1, self._context.config.bundle_min) and partition not in from_bundles:
                alone.extend(partition_outs)
                continue
            # One run of a partition's records a batch, cut into bundles by size alone. Spread windows
            # (a run per records due together) and cohorts (a run per records with about as many
            # carries left) were measured against this and removed: no clear win (docs/performance.md).
            packed_outs = in_due_order_by_key(
                partition_outs, lambda out: due_at_ms(out.event.due_at), lambda out: out.event.key
            )
            made = bundles_of(
                [out.event for out in packed_outs],
                tenant=self._context.config.tenant,
                partition=partition,
                source_id=packed_outs[0].event.event_id,
                occurred_at=min(out.checked_at for out in packed_outs),
                oldest_commit=min(out.oldest_commit for out in packed_outs),
                max_records=max(1, self._context.config.bundle_max),
                compressed=self._context.config.bundle_compressed,
            )
            start = 0
            for bundle in made:
                chunk = packed_outs[start : start + len(bundle.members)]
                summary = None if "whole_carries" in parts_off else _summary_of(chunk)
                bundles.append((dataclasses.replace(bundle, summary=summary), chunk))
                start += len(bundle.members)
        return alone, bundles

    def _merge_delays(
        self,
        pending: list[PendingEnvelope],
        waiting: list[StillWaiting],
        unchanged: list[UnchangedGroup],
    ) -> tuple[list[PendingEnvelope], list[tuple[GroupOut, list[StillWaiting]]], list[tuple[GroupOut, UnchangedGroup]]]:
        """One batch's delays of one lane: a key with a single waiting vacuum keeps its DelayEnvelope;
        the vacuums of a key with several (or of a DelayedVacuums) go out in DelayedVacuums records. A
        DelayedVacuums a check left unchanged is written on unread when it is its key's only delay."""
        by_key: dict[tuple[str, str, str | None], list[StillWaiting]] = {}
        for item in waiting:
            by_key.setdefault(item.key, []).append(item)
        unchanged_keys: Counter[tuple[str, str, str | None]] = Counter()
        if unchanged:
            unchanged_keys.update((item.group.tenant, item.group.table, item.group.partition) for item in unchanged)
        classic_by_key: dict[tuple[str, str, str | None], list[PendingEnvelope]] = {}
        for entry in pending:
            envelope = entry[2]
            classic_by_key.setdefault((envelope.tenant, envelope.table, envelope.partition), []).append(entry)
        classic: list[PendingEnvelope] = []
        for key, entries in classic_by_key.items():
            if len(entries) == 1 and key not in by_key and key not in unchanged_keys:
                classic.extend(entries)
                continue
            for processed, _, envelope in entries:
                source = processed.event_id
                by_key.setdefault(key, []).append(
                    StillWaiting(
                        source,
                        key,
                        entry_of_envelope(envelope),
                        envelope.occurred_at,
                        envelope.due_at,
                        envelope.stuck and not (isinstance(processed, DelayEnvelope) and processed.stuck),
                        str(envelope.event_id),
                        str(envelope.vacuum.event_id),
                        EntryFacts(tuple(lock.lock_id for lock in envelope.locks_held), envelope.vacuum.occurred_at),
                    )
                )
        carried: list[tuple[GroupOut, UnchangedGroup]] = []
        for unread in unchanged:
            key = (unread.group.tenant, unread.group.table, unread.group.partition)
            expanded = None
            if unchanged_keys[key] > 1 or key in by_key:
                expanded = unchanged_members(unread, self._context.config.max_wait_s)
            if expanded is None:
                out = carry_unchanged(unread.group, checked_at=unread.checked_at, due_at=unread.due_at)
                carried.append((out, unread))
            else:
                by_key.setdefault(key, []).extend(expanded)
        merged: list[tuple[GroupOut, list[StillWaiting]]] = []
        for (tenant, table, partition), items in by_key.items():
            # One vacuum may come twice (a record delivered again with its own earlier outcome): it is
            # written once, and each copy's outcome is carried by the record that carries it.
            kept: dict[str, StillWaiting] = {}
            for item in sorted(items, key=lambda item: (item.checked_at, -item.entry.attempt)):
                kept.setdefault(item.vacuum_id, item)
            unique = list(kept.values())
            if len(unique) == 1 and unique[0].single:
                item = unique[0]
                envelope = build_envelope(
                    tenant=tenant,
                    table=table,
                    partition=partition,
                    entry=item.entry,
                    source=item.source,
                    checked_at=item.checked_at,
                    due_at=item.due_at,
                )
                merged.append((GroupOut(envelope, (item.entry,)), items))
                continue
            outs = build_groups(
                tenant=tenant,
                table=table,
                partition=partition,
                entries=[item.entry for item in unique],
                vacuum_ids=[item.vacuum_id for item in unique],
                facts=[item.facts for item in unique],
                sources=list(dict.fromkeys(item.source for item in items)),
                checked_at=min(item.checked_at for item in unique),
                due_at=max(item.due_at for item in unique),
                summaries="summaries" not in self._context.config.parts_off,
            )
            chunk_of = {item.vacuum_id: index // MAX_WAITING_PER_ENVELOPE for index, item in enumerate(unique)}
            for index, out in enumerate(outs):
                merged.append((out, [item for item in items if chunk_of[item.vacuum_id] == index]))
        return classic, merged, carried


def _summary_of(outs: Sequence[DelayOut]) -> BundleSummary | None:
    """The summary of a bundle of these records when each waits on snapshot locks alone (its next check
    may carry the bundle on whole), else None: also when a table has two records in it, which its
    next check merges into one."""
    parts = [out.whole for out in outs if out.whole is not None]
    if len(parts) != len(outs) or len({out.event.key for out in outs}) != len(outs):
        return None
    return summary_of_members(
        [part.lock_ids for part in parts], [part.carries_left for part in parts], [out.oldest_commit for out in outs]
    )
