"""Delete events matched to rows by one packed int64 key, with numpy: the fast path of the snapshot
reader (:mod:`acidclean.shared.orc.reader`), taken where numpy is installed (the vacuum extra has
it); the base install has no numpy and the reader joins instead."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from acidclean.shared.acid.events import IDENTITY_COLUMNS


def _dense_positions(values: np.ndarray, distinct: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
    """Each value's index among the sorted ``distinct`` values (None when there is only one), and
    whether it is one of them."""
    if len(distinct) == 1:
        return None, values == distinct[0]
    positions = np.searchsorted(distinct, values)
    np.minimum(positions, len(distinct) - 1, out=positions)
    return positions, distinct[positions] == values


def _packed_keys(
    txn_positions: np.ndarray | None, bucket_positions: np.ndarray | None, buckets: int, span: int, row_ids: np.ndarray
) -> np.ndarray:
    group: np.ndarray | None = None
    if txn_positions is not None:
        group = txn_positions.astype(np.int64) * buckets
    if bucket_positions is not None:
        group = bucket_positions.astype(np.int64) if group is None else group + bucket_positions
    if group is None:
        return row_ids
    group *= span
    group += row_ids
    return group


def deleted_by_packed_key(rows: pa.Table, deletes: pa.Table) -> pa.BooleanArray | None:
    """Which rows have a delete event, matching (originalTransaction, bucket, rowId) exactly.

    The three columns are packed into one int64: originalTransaction and bucket become their index
    among the values the delete events use (few: the writes that had rows deleted), times the rowId
    span. One ``np.isin`` then does the work of a three-column join at a fraction of the cost. None
    when the packed key could overflow or a key is null, so the caller joins instead.
    """
    columns = [rows.column(c) for c in IDENTITY_COLUMNS] + [deletes.column(c) for c in IDENTITY_COLUMNS]
    if any(column.null_count for column in columns):
        return None
    row_txn, row_bucket, row_id, del_txn, del_bucket, del_id = (column.to_numpy() for column in columns)
    txns, buckets = np.unique(del_txn), np.unique(del_bucket)
    span = int(max(row_id.max(initial=0), del_id.max(initial=0))) + 1
    if min(row_id.min(initial=0), del_id.min(initial=0)) < 0 or len(txns) * len(buckets) * span >= 2**62:
        return None
    txn_positions, txn_known = _dense_positions(row_txn, txns)
    bucket_positions, bucket_known = _dense_positions(row_bucket, buckets)
    key = _packed_keys(txn_positions, bucket_positions, len(buckets), span, row_id)
    del_txn_positions = None if len(txns) == 1 else np.searchsorted(txns, del_txn)
    del_bucket_positions = None if len(buckets) == 1 else np.searchsorted(buckets, del_bucket)
    del_key = _packed_keys(del_txn_positions, del_bucket_positions, len(buckets), span, del_id)
    key_space = len(txns) * len(buckets) * span
    if key_space <= max(2**24, 8 * (len(key) + len(del_key))):
        # A lookup table over the key space: one scatter and one gather (np.isin sorts or hashes).
        table = np.zeros(key_space, dtype=bool)
        table[del_key] = True
        deleted: np.ndarray = table[key]
    else:
        deleted = np.isin(key, del_key, kind="sort")
    deleted &= txn_known
    deleted &= bucket_known
    return pa.array(deleted, pa.bool_())


__all__ = ["deleted_by_packed_key"]
