"""acidclean's own initiator's requests in Hive's compaction queue (issue 53, item 4), so that
``SHOW COMPACTIONS`` lists them as it lists ``ALTER TABLE ... COMPACT``.

With ``hive_queue_initiator_requests`` the initiator enters its request with ``compact2`` (in the pool
``acidclean hive-queue`` serves, with the initiator as Hive's initiator id) instead of publishing it;
the request itself travels in the entry's properties, and ``acidclean hive-queue`` publishes it once it
took the entry, with the id derived from the compaction id, so there is one request per entry whoever
entered it. A table or partition Hive's queue already holds an entry of is not entered again (Hive
refuses the second ``compact2``): that entry serves it.
"""

from __future__ import annotations

from acidclean import __version__
from acidclean.producers.hive_queue.progress import request_id_of
from acidclean.schemas.events import VacuumRequested
from acidclean.shared.hive4_queue.queue import HiveCompactionQueue, QueueEntry

REQUEST_PROPERTY = "acidclean.request"


def enter_in_hive_queue(
    queue: HiveCompactionQueue, request: VacuumRequested, pool: str | None
) -> VacuumRequested | None:
    """Enter ``request`` in Hive's queue; the request as ``acidclean hive-queue`` will publish it, or None
    when Hive's queue already holds an entry of its table or partition."""
    db, table = request.table.split(".", 1)
    answer = queue.request(
        db,
        table,
        request.partition,
        request.compaction_type,
        run_as=queue.metastore.user,
        initiator_id=request.requested_by.initiator_id,
        initiator_version=__version__,
        pool=pool,
        properties={REQUEST_PROPERTY: request.model_dump_json(exclude={"hive_compaction_id"})},
    )
    if not answer.accepted:
        return None
    request_id = request_id_of(request.tenant, answer.compaction_id)
    return request.model_copy(
        update={"event_id": request_id, "correlation_id": request_id, "hive_compaction_id": answer.compaction_id}
    )


def entered_request(entry: QueueEntry) -> VacuumRequested | None:
    """The request acidclean's initiator entered as ``entry`` (with the entry's id), or None for an entry
    entered another way (``ALTER TABLE ... COMPACT``)."""
    carried = dict(entry.properties).get(REQUEST_PROPERTY)
    if carried is None:
        return None
    request = VacuumRequested.model_validate_json(carried)
    request_id = request_id_of(request.tenant, entry.compaction_id)
    return request.model_copy(
        update={"event_id": request_id, "correlation_id": request_id, "hive_compaction_id": entry.compaction_id}
    )
