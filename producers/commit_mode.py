"""How a vacuum makes its output visible: by renaming a staged directory, or by committing a transaction.

Two commits exist, as in Hive:

* ``rename`` (Hive 2 and 3's compactor): write under ``_tmp_acidclean_<job>/`` and rename each new
  directory into place. A directory rename is one atomic metadata operation on HDFS and local file
  systems. On an object store it is a copy of every object and then a delete: a reader listing in the
  middle would see half a base.
* ``visibility-txn`` (Hive 4's compactor, HIVE-20823): open a metastore transaction T for the vacuum,
  write straight into ``base_N_vT`` / ``delta_X_Y_vT`` / ``delete_delta_X_Y_vT``, then commit T. Readers
  skip a ``_vT`` directory until T is committed in their transaction snapshot, so the commit is the one
  metastore call and nothing is ever renamed. It needs a metastore with per-table write ids (Hive 3+):
  on Hive 2 transaction ids name the deltas themselves, its readers do not know the suffix.

``auto`` (the default) picks ``visibility-txn`` on object stores behind a Hive 4 metastore and
``rename`` elsewhere (docs/design.md section 7, rule 10: no directory name a supported Hive reader cannot parse). It
refuses an object store behind a Hive 2 or Hive 3 metastore rather than risk a torn base or an
unreadable table: Hive 3.1's ``AcidUtils.getAcidState`` throws ``NumberFormatException`` on a
``_vT`` directory, so every Hive 3 reader of the table would fail after the first vacuum. Behind
Hive 3, ``visibility-txn`` runs only when asked for explicitly *and* acknowledged
(``vacuum_visibility_txn_on_hive3``: every reader of the table parses ``_vT``). Pure: no I/O.
"""

from __future__ import annotations

import enum

from acidclean.shared.acid.id_lists import MetastoreKind
from acidclean.shared.errors import VacuumRefusedError

OBJECT_STORE_SCHEMES = frozenset({"s3", "s3a", "s3n", "gs", "abfs", "abfss", "wasb", "wasbs", "oss", "cos"})


class CommitMode(str, enum.Enum):
    RENAME = "rename"
    VISIBILITY_TXN = "visibility-txn"


def choose_commit_mode(
    setting: str,
    kind: MetastoreKind,
    scheme: str,
    location: str,
    *,
    hive_version: int | None = None,
    v_readers_acknowledged: bool = False,
) -> CommitMode:
    """The commit a vacuum of ``location`` (whose URI scheme is ``scheme``) uses, by the
    ``vacuum_commit`` setting (``auto``, ``rename`` or ``visibility-txn``); a refusal says why none is safe.
    ``hive_version`` is the metastore's major version (None: unknown, taken as the oldest ``kind``
    allows); ``v_readers_acknowledged`` is the operator's word that readers behind a Hive 3 metastore
    parse ``_vT`` names."""
    object_store = scheme.lower() in OBJECT_STORE_SCHEMES
    version = 2 if kind is MetastoreKind.HIVE2 else max(3, hive_version or 3)
    if setting not in ("auto", *(mode.value for mode in CommitMode)):
        raise VacuumRefusedError(f"vacuum_commit={setting!r} is not one of auto, rename, visibility-txn")
    if setting == CommitMode.RENAME.value and object_store:
        raise VacuumRefusedError(
            f"vacuum_commit=rename is unsafe on {location}: a directory rename on an object store is a copy of "
            "every object and then a delete, so a reader listing in between would read a torn base. Use "
            "vacuum_commit=auto (or visibility-txn) with a Hive 4 metastore"
        )
    wants_txn = setting == CommitMode.VISIBILITY_TXN.value or (setting == "auto" and object_store)
    if wants_txn and version == 2:
        reason = (
            f"{location} is on an object store, where a directory rename is not atomic"
            if object_store
            else "vacuum_commit=visibility-txn was asked for"
        )
        raise VacuumRefusedError(
            f"cannot vacuum: {reason}, and a Hive 2 metastore has no per-table write ids, so the vacuum cannot "
            "commit base_N_vT / delta_X_Y_vT through a transaction (Hive 2 readers do not know the _vT suffix). "
            "Nothing was written. Use a Hive 4 metastore for tables on object stores, or keep the table on HDFS"
        )
    if wants_txn and version == 3 and not (setting == CommitMode.VISIBILITY_TXN.value and v_readers_acknowledged):
        if setting == "auto":
            raise VacuumRefusedError(
                f"cannot vacuum {location} with vacuum_commit=auto: on an object store a rename is not atomic, and "
                "behind a Hive 3 metastore base_N_vT / delta_X_Y_vT would make the table unreadable to Hive 3 "
                "(getAcidState: NumberFormatException). Nothing was written. Keep the table on HDFS, move to a Hive 4 "
                "metastore, or, if every reader of it parses _vT, set vacuum_commit=visibility-txn and "
                "vacuum_visibility_txn_on_hive3=true"
            )
        raise VacuumRefusedError(
            "cannot vacuum: vacuum_commit=visibility-txn behind a Hive 3 metastore writes base_N_vT / delta_X_Y_vT, "
            "which Hive 3's readers cannot parse (getAcidState: NumberFormatException). Nothing was written. Set "
            "vacuum_visibility_txn_on_hive3=true only if every reader of the table parses _vT, else use rename"
        )
    return CommitMode.VISIBILITY_TXN if wants_txn else CommitMode.RENAME
