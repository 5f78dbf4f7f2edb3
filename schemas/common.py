"""Fields and rules shared by every acidclean event (docs/design.md section 5).

Every event carries ``schema_version``, a unique ``event_id``, ``tenant``, ``table`` (``db.table``),
``partition`` (``k=v/k2=v2`` or null), ``occurred_at`` (UTC), ``causation_id`` (the event it follows
from) and ``correlation_id`` (the vacuum it belongs to). Models are strict: unknown fields are
refused, JSON types are not coerced ("5" is not a write id) and timestamps must carry a time zone;
they are normalised to UTC. ``schema_version`` and ``event_id`` are required on the wire (the
published JSON Schema says so and the bus decoder checks ``missing_on_wire``) but filled in when a
model is built in Python, so producers cannot forget them and readers never guess them.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Annotated, ClassVar, Literal

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

SCHEMA_VERSION: Literal[1] = 1
# Versions this code can read. A reader that meets any other version sends the message to the
# dead-letter topic instead of guessing what its fields mean.
SUPPORTED_SCHEMA_VERSIONS: frozenset[int] = frozenset({SCHEMA_VERSION})

# Namespace of the deterministic ids acidclean derives from other ids (see derived_event_id).
ACIDCLEAN_NAMESPACE = uuid.UUID("6f0c9f4e-1d0a-5b1e-9c55-0ac1dc1e0001")

TENANT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
TABLE_PATTERN = r"^[A-Za-z0-9_]{1,128}\.[A-Za-z0-9_]{1,128}$"
# k=v pairs joined by '/'; Hive escapes '/' and control characters inside partition values.
PARTITION_PATTERN = r"^[^/=\x00-\x1f]+=[^/\x00-\x1f]+(/[^/=\x00-\x1f]+=[^/\x00-\x1f]+)*$"


def _to_utc(value: datetime) -> datetime:
    return value.astimezone(timezone.utc)


UtcDatetime = Annotated[AwareDatetime, AfterValidator(_to_utc)]
"""A timezone-aware timestamp, normalised to UTC; a naive timestamp is refused."""

Tenant = Annotated[str, Field(pattern=TENANT_PATTERN)]
TableName = Annotated[str, Field(pattern=TABLE_PATTERN, max_length=257)]
PartitionSpec = Annotated[str, Field(pattern=PARTITION_PATTERN, max_length=4096)]
NonEmpty = Annotated[str, Field(min_length=1, max_length=4096)]


def utc_now() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(timezone.utc)


def new_event_id() -> uuid.UUID:
    """A fresh random event id."""
    return uuid.uuid4()


def derived_event_id(cause: uuid.UUID, action: str) -> uuid.UUID:
    """A deterministic id for the event that ``action`` produces from event ``cause``.

    A handler that crashes after publishing and runs again publishes the same id, so readers can
    drop the duplicate (CloudEvents: same source and id means same event).
    """
    return uuid.uuid5(ACIDCLEAN_NAMESPACE, f"{cause}:{action}")


def event_key(tenant: str, table: str | None, partition: str | None) -> str:
    """The Kafka key ``tenant/db.table[/partition]``: one table's events stay on one partition."""
    if table is None:
        return tenant
    return f"{tenant}/{table}" if partition is None else f"{tenant}/{table}/{partition}"


class StrictModel(BaseModel):
    """Base of every model on the wire: unknown fields refused, no type coercion, immutable."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class EventBase(StrictModel):
    """The fields every event carries."""

    # The CloudEvents ``type`` of the event; set by each concrete event class.
    event_type: ClassVar[str] = ""

    # Required on the wire (and in the published JSON Schema) although Python fills them in.
    wire_required: ClassVar[tuple[str, ...]] = ("schema_version", "event_id")

    schema_version: Literal[1] = Field(default=SCHEMA_VERSION, description="Version of this event's schema.")
    event_id: uuid.UUID = Field(
        default_factory=new_event_id, description="Unique id of this event (the CloudEvents id)."
    )
    tenant: Tenant = Field(description="The tenant the table belongs to.")
    table: TableName | None = Field(description="The table, as db.table (required by every event but a dead letter).")
    partition: PartitionSpec | None = Field(
        default=None, description="The partition as k=v/k2=v2, or null for an unpartitioned table."
    )
    occurred_at: UtcDatetime = Field(description="When it happened, UTC.")
    causation_id: uuid.UUID | None = Field(default=None, description="The id of the event this one follows from.")
    correlation_id: uuid.UUID | None = Field(
        default=None, description="The id of the vacuum (VacuumCommitted event) this event belongs to."
    )

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        json_schema = handler(core_schema)
        target = handler.resolve_ref_schema(json_schema)
        required = list(target.get("required", []))
        target["required"] = required + [name for name in cls.wire_required if name not in required]
        return json_schema

    def missing_on_wire(self) -> list[str]:
        """Fields required on the wire that this instance got from a Python default instead."""
        return [name for name in self.wire_required if name not in self.model_fields_set]

    @property
    def key(self) -> str:
        """The Kafka key of this event."""
        return event_key(self.tenant, self.table, self.partition)


class SharedLocation(StrictModel):
    """Another table or partition whose location is the vacuum's directory or lies inside or around it
    (safety rule 8): its readers' locks count as locks on the vacuum's directory."""

    table: TableName = Field(description="The table, as db.table (lower case).")
    partition: PartitionSpec | None = Field(
        default=None, description="The metastore's name of the partition, or null for the table itself."
    )
    location: NonEmpty = Field(description="Its location as the metastore stores it.")


class VacuumedTable(StrictModel):
    """Which table (or partition) a vacuum compacted, beyond its name (safety rule 9): taken when the
    vacuum planned and confirmed after its commit. A table dropped and created again under the same name
    and location has another create time (or, where the metastore gives one, another id)."""

    table_id: int | None = Field(default=None, ge=0, description="The metastore's table id, when it gives one.")
    create_time: int | None = Field(default=None, ge=0, description="The table's create time (seconds).")
    location: NonEmpty = Field(description="The table or partition location as the metastore stores it.")
    partition_create_time: int | None = Field(
        default=None, ge=0, description="The partition's create time (seconds), for a partition."
    )


class LockSnapshotEntry(StrictModel):
    """One lock as the metastore's ``show_locks`` listed it."""

    lock_id: int = Field(ge=0, description="The metastore's lock id (lockid).")
    txn_id: int | None = Field(default=None, ge=0, description="The transaction holding it, if any.")
    lock_type: Annotated[str, Field(pattern=r"^[A-Z_]{1,32}$")] = Field(
        description="SHARED_READ, SHARED_WRITE, EXCLUSIVE, ... as the metastore names it."
    )
    state: Annotated[str, Field(pattern=r"^[A-Z_]{1,32}$")] = Field(
        description="ACQUIRED, WAITING, ... as the metastore names it."
    )
    user: str = Field(max_length=1024, description="Who holds it.")
    host: str = Field(max_length=1024, description="The host it was taken from.")
    acquired_at: UtcDatetime | None = Field(default=None, description="When it was acquired; null while waiting.")

    def describe(self) -> str:
        """``lock 12 (SHARED_READ, txn 7) by alice@host-1``: for logs and the audit."""
        txn = f", txn {self.txn_id}" if self.txn_id is not None else ""
        return f"lock {self.lock_id} ({self.lock_type}{txn}) by {self.user}@{self.host}"
