"""The initiator's Prometheus metrics: requests, listings, metastore calls, lag, keys, latency."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


@dataclass
class InitiatorMetrics:
    registry: CollectorRegistry = field(default_factory=lambda: CollectorRegistry(auto_describe=True))

    def __post_init__(self) -> None:
        r = self.registry
        self.requests = Counter(
            "acidclean_initiator_requests",
            "VacuumRequested published, by trigger and type.",
            ["trigger", "type"],
            registry=r,
        )
        self.listings = Counter("acidclean_initiator_listings", "Storage listings of a table or partition.", registry=r)
        self.metastore_calls = Counter(
            "acidclean_initiator_metastore_calls", "Metastore calls made, by call.", ["call"], registry=r
        )
        self.lag = Gauge(
            "acidclean_initiator_lag", "Delta records not yet read by this process, over its partitions.", registry=r
        )
        self.keys = Gauge("acidclean_initiator_keys", "Tables and partitions whose figures are kept.", registry=r)
        self.in_flight = Gauge(
            "acidclean_initiator_in_flight", "Tables and partitions with a vacuum in flight.", registry=r
        )
        self.latency = Histogram(
            "acidclean_initiator_request_latency_seconds",
            "From the commit that crossed a threshold to its VacuumRequested.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300),
            registry=r,
        )
