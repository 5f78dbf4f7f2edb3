"""The initiator's sweep (``initiator_sweep_interval_s``): it walks the metastore's transactional
tables, at most ``initiator_sweep_tables_per_minute`` a minute, and applies the same gate and
thresholds as a ``DeltaCommitted`` does to the keys this process owns (the key's partition of the
delta topic, as the producer's partitioner picks it), so that tables written outside acidclean are
vacuumed too.
"""

from __future__ import annotations

import logging
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from acidclean.producers.initiator.core import InitiatorCore
from acidclean.producers.initiator.deciding import KeyDecider
from acidclean.producers.initiator.delta_intake import DeltaIntake
from acidclean.producers.initiator.lifecycle_tail import LifecycleTail
from acidclean.producers.initiator.rules import InvalidTableProperty, is_auto_compaction_off
from acidclean.schemas.common import event_key
from acidclean.shared.errors import AcidCleanError, ConfigurationError
from acidclean.shared.metastore import split_table_name
from acidclean.shared.settings import Settings

log = logging.getLogger("acidclean.initiator")


def key_partition(key: str, partitions: int, partitioner: str = "consistent_random") -> int:
    """The partition librdkafka's default partitioner (CRC32 of the key) gives a keyed record."""
    if partitioner not in ("consistent_random", "consistent"):
        raise ConfigurationError(
            f"the initiator's sweep knows librdkafka's consistent partitioner only (kafka.partitioner={partitioner}): "
            "remove that setting, or turn the sweep off with --sweep-interval 0"
        )
    return zlib.crc32(key.encode("utf-8")) % partitions


class Sweep:
    """One table at a time, on a schedule."""

    def __init__(
        self,
        settings: Settings,
        core: InitiatorCore,
        deltas: DeltaIntake,
        lifecycle: LifecycleTail,
        decider: KeyDecider,
        clock: Callable[[], float],
    ) -> None:
        self._settings = settings
        self._core = core
        self._deltas = deltas
        self._lifecycle = lifecycle
        self._decider = decider
        self._clock = clock
        self._queue: deque[str] = deque()
        self._next_sweep = clock()
        self._next_table = clock()

    def step(self) -> None:
        """List the tables when a sweep is due, else sweep the next table when its turn has come."""
        now = self._clock()
        if not self._queue:
            if now < self._next_sweep:
                return
            self._next_sweep = now + self._settings.initiator_sweep_interval_s
            try:
                self._queue.extend(self._all_tables())
            except AcidCleanError as error:
                log.warning("initiator sweep cannot list the metastore's tables: %s", error)
            return
        if now < self._next_table or not self._lifecycle.caught_up() or not self._deltas.owned:
            return
        self._next_table = now + 60.0 / self._settings.initiator_sweep_tables_per_minute
        table = self._queue.popleft()
        try:
            self._sweep_table(table)
        except (AcidCleanError, InvalidTableProperty) as error:
            log.warning("initiator sweep skips %s: %s", table, error)

    def _all_tables(self) -> Iterator[str]:
        for db in self._decider.call("get_all_databases", lambda m: m.get_all_databases()):
            names: list[str] = self._decider.call("get_all_tables", _all_tables_of(db))
            yield from (f"{db}.{name}" for name in names)

    def _sweep_table(self, table: str) -> None:
        info = self._decider.table(table)
        if not info.transactional or is_auto_compaction_off(info.parameters):
            return
        db, name = split_table_name(table)
        partitions: list[str | None] = (
            list(self._decider.call("list_partitions", lambda m: m.list_partitions(db, name)))
            if info.partition_keys
            else [None]
        )
        partitioner = self._settings.kafka.get("partitioner", "consistent_random")
        deltas = self._deltas
        for partition in partitions:
            key = event_key(self._settings.tenant, table, partition)
            owner = key_partition(key, deltas.partitions, partitioner)
            if not self._core.may_request(key, owned=owner in deltas.owned, caught_up=self._lifecycle.caught_up()):
                continue
            if partition is None:
                location = info.location
            else:
                location = self._decider.call("get_partition", _partition_of(db, name, partition)).location
            deltas.key_partition[key] = owner
            deltas.locations[key] = location
            self._core.stale.add(key)  # a sweep always lists: writers outside acidclean changed it
            self._decider.evaluate(key, "sweep", table, partition)


def _all_tables_of(db: str) -> Callable[[Any], Any]:
    return lambda metastore: metastore.get_all_tables(db)


def _partition_of(db: str, table: str, partition: str) -> Callable[[Any], Any]:
    return lambda metastore: metastore.get_table(db, table, partition)
