"""The initiator's decision for one key: the table from the metastore (cached a while), the key's
figures from a storage listing when it was never listed or a vacuum changed it, then the thresholds
(:mod:`~acidclean.producers.initiator.rules`), and a request when they are crossed.

A table turned off, gone or with a property that cannot be read is decided without a request; a
metastore or storage failure leaves the key undecided, to be tried again later.
"""

from __future__ import annotations

import logging
from collections import Counter as Tally
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from acidclean.producers.initiator.core import InitiatorCore
from acidclean.producers.initiator.metrics import InitiatorMetrics
from acidclean.producers.initiator.requesting import Requester
from acidclean.producers.initiator.rules import (
    InvalidTableProperty,
    Thresholds,
    figures_of,
    is_auto_compaction_off,
    is_insert_only,
    table_thresholds,
)
from acidclean.shared.acid.state import Listing, acid_state
from acidclean.shared.acid.write_ids import ValidWriteIdList
from acidclean.shared.errors import AcidLayoutError, MetastoreError, TableNotFoundError
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.metastore import TableInfo, split_table_name
from acidclean.shared.orc.reader import list_table_dir
from acidclean.shared.settings import Settings
from acidclean.shared.storage import StorageError, open_location

log = logging.getLogger("acidclean.initiator")

RETRY_S = 5.0


@dataclass
class _Table:
    info: TableInfo
    read_at: float


class KeyDecider:
    """Decides keys: request a vacuum or not."""

    def __init__(
        self,
        settings: Settings,
        core: InitiatorCore,
        metrics: InitiatorMetrics,
        requester: Requester,
        locations: Mapping[str, str],
        *,
        lister: Callable[[str], Listing] | None = None,
        metastore: Any = None,
        clock: Callable[[], float],
    ) -> None:
        self._settings = settings
        self._core = core
        self._metrics = metrics
        self._requester = requester
        self._locations = locations  # a key's location, from its last DeltaCommitted or the sweep
        self._lister = lister or _list_location
        self._metastore = metastore
        self._clock = clock
        self._tables: dict[str, _Table] = {}
        self.calls: Tally[str] = Tally()  # metastore calls and listings, for the benchmark
        self.defaults = Thresholds(
            settings.compactor_delta_num_threshold,
            settings.compactor_delta_pct_threshold,
            settings.compactor_abortedtxn_threshold,
        )

    def table(self, table: str) -> TableInfo:
        cached = self._tables.get(table)
        if cached is not None and self._clock() - cached.read_at < self._settings.initiator_table_cache_s:
            return cached.info
        db, name = split_table_name(table)
        info: TableInfo = self.call("get_table", lambda m: m.get_table(db, name))
        self._tables[table] = _Table(info, self._clock())
        return info

    def call(self, call: str, operation: Callable[[Any], Any]) -> Any:
        """``operation`` on the metastore (opened on first use), counted by ``call``."""
        if self._metastore is None:
            self._metastore = HiveMetastore.from_settings(self._settings)
        self.calls[f"metastore:{call}"] += 1
        self._metrics.metastore_calls.labels(call).inc()
        return operation(self._metastore)

    def _list(self, key: str, table: str, location: str) -> bool:
        """List ``key``'s directory and reset its figures; False (logged) when its layout cannot be read.
        A metastore or storage failure raises: the key is tried again later."""
        db, name = split_table_name(table)
        valid = ValidWriteIdList.from_string(self.call("valid_write_ids", lambda m: m.valid_write_ids(db, name)))
        self.calls["listing"] += 1
        self._metrics.listings.inc()
        listing = self._lister(location)
        try:
            state = acid_state(listing, valid)
        except AcidLayoutError as error:
            log.warning("initiator cannot read %s (%s): %s", key, location, error)
            return False
        figures = figures_of(state, listing, aborted_txns=len(valid.aborted_ids))
        self._core.set_listing(key, figures, (d.name for d in state.deltas))
        return True

    def evaluate(self, key: str, trigger: str, table: str | None = None, partition: str | None = None) -> bool:
        """Decide ``key`` (request it or not); False when the metastore or storage failed (try again)."""
        if table is None:
            parts = key.split("/", 2)  # tenant/db.table[/partition]
            table, partition = parts[1], parts[2] if len(parts) > 2 else None
        location = self._locations.get(key)
        try:
            info = self.table(table)
            if location is None or not info.transactional or is_auto_compaction_off(info.parameters):
                return True
            thresholds = table_thresholds(self.defaults, info.parameters)
            if self._core.needs_listing(key) and not self._list(key, table, location):
                return True
        except TableNotFoundError as error:
            log.info("initiator skips %s: %s", key, error)
            return True
        except InvalidTableProperty as error:
            log.warning("initiator skips %s: %s", key, error)
            return True
        except (MetastoreError, StorageError, AcidLayoutError) as error:
            log.warning("initiator will try %s again in %g s: %s", key, RETRY_S, error)
            return False
        decision = self._core.decision(key, thresholds, insert_only=is_insert_only(info.parameters))
        if decision is not None:
            self._requester.request(key, table, partition, location, decision, thresholds, trigger)
        return True


def _list_location(location: str) -> Listing:
    opened = open_location(location)
    return list_table_dir(opened.fs.arrow, opened.path)
