"""Find, after a vacuum's commit, another vacuum's output over the same write ids (a late commit).

Fencing (:mod:`.exclusion`) stops a vacuum that lost its lock before it commits, but a rename still
has a residual window (docs/safety.md): a vacuum paused after its last lock check and before its rename
completes can commit after another vacuum took over. Then two compacted directories of different
vacuums hold rows of the same write ids, and every reader reads them twice. This check runs right
after the commit, on a fresh listing and id list: it reports the overlap (one error log line, and the
event's ``overlapping_directories``), and deletes nothing: which copy to drop is an operator's call.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from acidclean.shared.acid.id_lists import reader_ids
from acidclean.shared.acid.overlaps import overlapping_current
from acidclean.shared.acid.state import acid_state
from acidclean.shared.acid.write_ids import ValidTxnList
from acidclean.shared.errors import AcidCleanError
from acidclean.shared.metastore import Metastore, split_table_name
from acidclean.shared.orc.reader import list_table_dir
from acidclean.shared.storage import StorageLocation

LOGGER = logging.getLogger("acidclean.vacuum")


def overlapping_outputs(
    metastore: Metastore, location: StorageLocation, table: str, produced: Sequence[str]
) -> list[str]:
    """The directories a reader now reads together with one of ``produced`` over shared write ids
    (sorted), logged as one error line when there are any. An empty list when the check itself fails."""
    db, name = split_table_name(table)
    try:
        listing = list_table_dir(location.fs.arrow, location.path)
        ids = reader_ids(metastore.valid_write_ids(db, name), metastore.kind)
        txns = ValidTxnList.from_string(metastore.valid_txn_list())
        current = acid_state(listing, ids, txns).current_directories
    except (AcidCleanError, OSError) as error:
        LOGGER.warning("could not check %s for a late commit's overlap: %s", location.uri, error)
        return []
    own = set(produced)
    others = sorted({name for pair in overlapping_current(current) if own & set(pair) for name in pair} - own)
    if others:
        LOGGER.error(
            "late commit detected in %s: %s and %s (another vacuum's) hold rows of the same write ids, so readers "
            "read them twice; nothing is deleted for it: inspect the vacuums' markers and remove one copy by hand",
            location.uri,
            ", ".join(produced),
            ", ".join(others),
        )
    return others
