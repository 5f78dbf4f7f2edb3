"""The cleaner's Prometheus metrics, in a registry of its own (served on ``--metrics-port``).

Alert on ``acidclean_cleaner_overdue_seconds`` (a partition stalled: a record due long ago not yet
finished), ``acidclean_cleaner_oldest_pending_seconds`` and ``acidclean_cleaner_stuck_events``, not on
the consumer lag of the delay topic: that lag is naturally about one interval's worth of waiting
vacuums and says nothing about health.

The same port serves Kubernetes' probes: ``/healthz`` (liveness: the loop stepped recently) and
``/readyz`` (readiness: every check of :class:`Probes` passes; the body names the ones that fail).
"""

from __future__ import annotations

from collections.abc import Callable
from http.server import ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from acidclean.shared.probes import ProbeResult, Probes, ReadinessCheck, serve_http

__all__ = ["CleanerMetrics", "ProbeResult", "Probes", "ReadinessCheck", "serve_http"]

LATENESS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
WAIT_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600, 7 * 24 * 3600)


class CleanerMetrics:
    """Every metric the cleaner exports. Gauges that are computed on demand take callables."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.events = Counter(
            "acidclean_cleaner_events",
            "Events handled, by outcome (cleaned, delayed, dead_lettered, table_dropped, skipped_other_tenant, "
            "dry_run, ready_in_group, carried_unread: delayed again unread, every lock still listed, "
            "bundled: waiting tables' records carried on in a bundle, bundle_spilled: a bundle's record sent out "
            "on its own to be read in full, bundle_read_in_full: a bundle's record read in full by its check and "
            "kept, bundle_merged: a table's records in one bundle merged into one, joined_in_bundle: a fresh "
            "vacuum taken into its table's record by a bundle's check, rejoined: one handed back to its table's "
            "lane, bundle_carried_whole: a bundle carried on whole, its members unread, every lock of its "
            "summary still listed, bundle_replayed: a bundle read again "
            "after its check was acknowledged, skipped, dropped: not even a dead letter could be built).",
            ["outcome"],
            registry=r,
        )
        self.bundles_by_member = Counter(
            "acidclean_cleaner_bundles_checked_by_member",
            "Bundle checks that read their members one by one instead of carrying the bundle on whole, by "
            "reason (no_lock_list, spill: records of its tables wait to be checked with them, riders: fresh "
            "vacuums of its tables ride with it, shared_keys: a table of it is also in another record of the "
            "batch, no_summary, no_carries_left, no_keys, max_wait, lock_gone). A steady state of held locks "
            "should show few: each costs a read of every member.",
            ["reason"],
            registry=r,
        )
        self.requeues = Counter(
            "acidclean_cleaner_requeues", "Delay envelopes published (locks still held).", registry=r
        )
        self.dead_letters = Counter(
            "acidclean_cleaner_dead_letters",
            "Events sent to the dead-letter topic, by reason code.",
            ["reason"],
            registry=r,
        )
        self.check_errors = Counter(
            "acidclean_cleaner_check_errors",
            "readyToClean checks that failed closed (metastore or storage).",
            registry=r,
        )
        self.metastore_calls = Counter(
            "acidclean_cleaner_metastore_calls", "Metastore calls made, by call.", ["call"], registry=r
        )
        self.lock_lists = Counter(
            "acidclean_cleaner_lock_lists",
            "show_locks answers received, by how they were asked (renewal: every lock, in the background, "
            "before the shared list grew too old; batch: every lock, for a batch that no fresh list served; "
            "table: one table's locks, for a batch that one call per table costs less).",
            ["asked"],
            registry=r,
        )
        self.wait_seconds = Histogram(
            "acidclean_cleaner_wait_seconds",
            "From the vacuum's commit to its cleanup.",
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.lateness_seconds = Histogram(
            "acidclean_cleaner_lateness_seconds",
            "Re-check time minus due time of delayed events (never negative).",
            buckets=LATENESS_BUCKETS,
            registry=r,
        )
        self.batch_tables = Histogram(
            "acidclean_cleaner_batch_tables",
            "Tables (lanes) a worker checked together in one batch: one lock list, one table lookup per "
            "database and one publish for all of them. Its count is the batches; many small batches with "
            "more threads mean more calls for the same cleanups.",
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.deleted_bytes = Counter("acidclean_cleaner_deleted_bytes", "Bytes deleted.", registry=r)
        self.deleted_directories = Counter("acidclean_cleaner_deleted_directories", "Directories deleted.", registry=r)
        self.deleted_files = Counter("acidclean_cleaner_deleted_files", "Files deleted.", registry=r)
        self.stuck_checks = Counter(
            "acidclean_cleaner_stuck_checks", "Checks of vacuums waiting longer than the max wait.", registry=r
        )
        self.commit_failures = Counter("acidclean_cleaner_commit_failures", "Offset commits that failed.", registry=r)
        self.rebalances = Counter(
            "acidclean_cleaner_rebalances", "Partitions assigned, revoked or lost.", ["kind"], registry=r
        )
        self.assigned_partitions = Gauge(
            "acidclean_cleaner_assigned_partitions",
            "Partitions of each topic this process owns in its consumer group.",
            ["topic"],
            registry=r,
        )
        self.paused_partitions = Gauge(
            "acidclean_cleaner_paused_partitions",
            "Delay-topic partitions whose next record is not yet due (held, with those read after it).",
            registry=r,
        )
        self.held_bytes = Gauge(
            "acidclean_cleaner_held_bytes",
            "Bytes of delay records read ahead of their due time and held in memory until due (at most "
            "16 MiB a delay partition).",
            registry=r,
        )
        self.oldest_pending_seconds = Gauge(
            "acidclean_cleaner_oldest_pending_seconds",
            "Age of the oldest vacuum this process is waiting on.",
            registry=r,
        )
        self.stuck_events = Gauge(
            "acidclean_cleaner_stuck_events", "Vacuums waiting longer than the max wait, seen recently.", registry=r
        )
        self.overdue_seconds = Gauge(
            "acidclean_cleaner_overdue_seconds",
            "How long the most overdue record this process has read and not finished has been due "
            "(a stalled partition; about zero while the cleaner keeps up).",
            registry=r,
        )
        self.clamped_due_times = Counter(
            "acidclean_cleaner_clamped_due_times",
            "Delay envelopes read with a due time more than a few intervals ahead (clock skew or a bad "
            "record), clamped to one interval from now.",
            registry=r,
        )
        self.handler_errors = Counter(
            "acidclean_cleaner_handler_errors",
            "Tries of an event that failed with an error other than an unacknowledged publish.",
            registry=r,
        )

    def bind(
        self,
        *,
        paused: Callable[[], float],
        held: Callable[[], float],
        oldest_pending: Callable[[], float],
        stuck: Callable[[], float],
        overdue: Callable[[], float],
    ) -> None:
        """Compute the on-demand gauges from the running cleaner's state at scrape time."""
        self.paused_partitions.set_function(paused)
        self.held_bytes.set_function(held)
        self.oldest_pending_seconds.set_function(oldest_pending)
        self.stuck_events.set_function(stuck)
        self.overdue_seconds.set_function(overdue)

    def serve(self, port: int, address: str = "0.0.0.0", probes: Probes | None = None) -> ThreadingHTTPServer:
        """Serve ``/metrics`` (and with ``probes`` ``/healthz`` and ``/readyz``) on ``port`` from a daemon
        thread; ``shutdown()`` the returned server to stop it."""
        return serve_http(self.registry, port, address, probes)
