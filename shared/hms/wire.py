"""Thrift messages the Hive 3.0 IDL of hmsclient lacks, written by hand as generated code writes them:
Hive 4's ``CreateTableRequest`` and ``ShowCompactRequest`` filters, and a call of a method the IDL
does not know.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hmsclient.genthrift.hive_metastore import ttypes
from thrift.Thrift import TApplicationException, TMessageType, TType


class CreateTableRequest:
    """Hive 4's ``CreateTableRequest`` (absent from the Hive 3.0 IDL of hmsclient): the table (field 1)
    and the caller's processor capabilities (9) and identifier (10)."""

    def __init__(self, table: Any, capabilities: Sequence[str], identifier: str) -> None:
        self.table = table
        self.capabilities = list(capabilities)
        self.identifier = identifier

    def write(self, oprot: Any) -> None:
        oprot.writeStructBegin("CreateTableRequest")
        oprot.writeFieldBegin("table", TType.STRUCT, 1)
        self.table.write(oprot)
        oprot.writeFieldEnd()
        oprot.writeFieldBegin("processorCapabilities", TType.LIST, 9)
        oprot.writeListBegin(TType.STRING, len(self.capabilities))
        for capability in self.capabilities:
            oprot.writeString(capability)
        oprot.writeListEnd()
        oprot.writeFieldEnd()
        oprot.writeFieldBegin("processorIdentifier", TType.STRING, 10)
        oprot.writeString(self.identifier)
        oprot.writeFieldEnd()
        oprot.writeFieldStop()
        oprot.writeStructEnd()


CREATE_TABLE_ERRORS = (
    ttypes.AlreadyExistsException,
    ttypes.InvalidObjectException,
    ttypes.MetaException,
    ttypes.NoSuchObjectException,
)


def call_hive4_method(client: Any, name: str, request: Any, errors: Sequence[type[Any]]) -> None:
    """Call a void Thrift method that the Hive 3.0 IDL lacks, whose one argument is ``request`` (field
    1) and whose declared exceptions are ``errors`` (fields 1, 2, ...), as generated clients do."""
    oprot, iprot = client._oprot, client._iprot
    oprot.writeMessageBegin(name, TMessageType.CALL, client._seqid)
    oprot.writeStructBegin(f"{name}_args")
    oprot.writeFieldBegin("request", TType.STRUCT, 1)
    request.write(oprot)
    oprot.writeFieldEnd()
    oprot.writeFieldStop()
    oprot.writeStructEnd()
    oprot.writeMessageEnd()
    oprot.trans.flush()
    _, message_type, _ = iprot.readMessageBegin()
    if message_type == TMessageType.EXCEPTION:
        failure = TApplicationException()
        failure.read(iprot)
        iprot.readMessageEnd()
        raise failure
    declared: Exception | None = None
    iprot.readStructBegin()
    while True:
        _, field_type, field_id = iprot.readFieldBegin()
        if field_type == TType.STOP:
            break
        if field_type == TType.STRUCT and 1 <= field_id <= len(errors):
            declared = errors[field_id - 1]()
            declared.read(iprot)  # type: ignore[union-attr]
        else:
            iprot.skip(field_type)
        iprot.readFieldEnd()
    iprot.readStructEnd()
    iprot.readMessageEnd()
    if declared is not None:
        raise declared


class ShowCompactRequest:
    """``ShowCompactRequest`` with Hive 4's filters on database (field 3) and table (4). Hive 2 and 3
    know no fields and skip them (Thrift skips unknown fields), so they list every compaction."""

    def __init__(self, db: str, table: str) -> None:
        self.db = db
        self.table = table

    def write(self, oprot: Any) -> None:
        oprot.writeStructBegin("ShowCompactRequest")
        for field_id, name, value in ((3, "dbName", self.db), (4, "tbName", self.table)):
            oprot.writeFieldBegin(name, TType.STRING, field_id)
            oprot.writeString(value)
            oprot.writeFieldEnd()
        oprot.writeFieldStop()
        oprot.writeStructEnd()
