"""Add ORC user metadata to a finished ORC file by rewriting only its tail.

pyarrow's ORC writer is fast but cannot set user metadata, and Hive's ACID readers want
``hive.acid.version``, ``hive.acid.stats`` and ``hive.acid.key.index`` there. An ORC file ends with
``[footer][postscript][one byte: postscript length]``; the footer is a protobuf ``Footer`` message
stored as compression chunks, whose field 5 is the repeated ``UserMetadataItem``. Protobuf merges a
repeated field that appears again later in a message, so appending one more chunk holding encoded
``UserMetadataItem`` entries to the footer, and fixing ``footerLength`` in the postscript, yields the
same file with the metadata added, without decompressing or re-encoding anything else. The appended
chunk is an "original" (uncompressed) chunk, which every ORC reader accepts whatever the codec.
Pure functions over bytes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

_FOOTER_METADATA_FIELD = 5  # Footer.metadata: repeated UserMetadataItem
_POSTSCRIPT_FOOTER_LENGTH_FIELD = 1
_POSTSCRIPT_COMPRESSION_FIELD = 2
_POSTSCRIPT_BLOCK_SIZE_FIELD = 3
_WIRE_VARINT = 0
_WIRE_64BIT = 1
_WIRE_LENGTH_DELIMITED = 2
_WIRE_32BIT = 5
_COMPRESSION_NONE = 0
_DEFAULT_BLOCK_SIZE = 256 * 1024
_MAX_CHUNK = (1 << 23) - 1  # chunk lengths are 23 bits


class OrcTailError(ValueError):
    """The bytes are not an ORC file this module can extend."""


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _read_varint(data: bytes, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if position >= len(data):
            raise OrcTailError("truncated varint in the ORC postscript")
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, position


def _fields(message: bytes) -> Iterator[tuple[int, int, bytes, int | None]]:
    """(field number, wire type, the field's raw bytes including its key, varint value or None)."""
    position = 0
    while position < len(message):
        start = position
        key, position = _read_varint(message, position)
        number, wire = key >> 3, key & 7
        value: int | None = None
        if wire == _WIRE_VARINT:
            value, position = _read_varint(message, position)
        elif wire == _WIRE_LENGTH_DELIMITED:
            length, position = _read_varint(message, position)
            position += length
        elif wire == _WIRE_64BIT:
            position += 8
        elif wire == _WIRE_32BIT:
            position += 4
        else:
            raise OrcTailError(f"unsupported protobuf wire type {wire} in the ORC postscript")
        if position > len(message):
            raise OrcTailError("truncated field in the ORC postscript")
        yield number, wire, message[start:position], value


def _length_delimited(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | _WIRE_LENGTH_DELIMITED) + _varint(len(payload)) + payload


def _metadata_items(metadata: Mapping[str, bytes]) -> bytes:
    encoded = bytearray()
    for name, value in metadata.items():
        item = _length_delimited(1, name.encode("utf-8")) + _length_delimited(2, bytes(value))
        encoded += _length_delimited(_FOOTER_METADATA_FIELD, item)
    return bytes(encoded)


def _original_chunks(payload: bytes, block_size: int) -> bytes:
    """``payload`` as uncompressed ("original") chunks: a 3-byte little-endian header
    ``length << 1 | 1`` each, no longer than the file's compression block size (Java's reader refuses
    longer chunks)."""
    size = max(1, min(block_size, _MAX_CHUNK))
    out = bytearray()
    for start in range(0, len(payload), size):
        piece = payload[start : start + size]
        out += (len(piece) << 1 | 1).to_bytes(3, "little") + piece
    return bytes(out)


def add_user_metadata(orc_file: bytes, metadata: Mapping[str, bytes]) -> bytes:
    """The ORC file ``orc_file`` with ``metadata`` added to its user metadata."""
    if len(orc_file) < 4 or not orc_file.startswith(b"ORC"):
        raise OrcTailError("not an ORC file: it does not start with 'ORC'")
    postscript_length = orc_file[-1]
    postscript = orc_file[-1 - postscript_length : -1]
    fields = list(_fields(postscript))
    values = {number: value for number, _, _, value in fields if value is not None}
    if _POSTSCRIPT_FOOTER_LENGTH_FIELD not in values:
        raise OrcTailError("the ORC postscript has no footer length")
    footer_length = values[_POSTSCRIPT_FOOTER_LENGTH_FIELD]
    items = _metadata_items(metadata)
    if values.get(_POSTSCRIPT_COMPRESSION_FIELD, _COMPRESSION_NONE) == _COMPRESSION_NONE:
        appended = items
    else:
        appended = _original_chunks(items, values.get(_POSTSCRIPT_BLOCK_SIZE_FIELD, _DEFAULT_BLOCK_SIZE))
    new_postscript = bytearray()
    for number, _, raw, _ in fields:
        if number == _POSTSCRIPT_FOOTER_LENGTH_FIELD:
            new_postscript += _varint(number << 3 | _WIRE_VARINT) + _varint(footer_length + len(appended))
        else:
            new_postscript += raw
    if len(new_postscript) > 255:
        raise OrcTailError("the ORC postscript would exceed 255 bytes")
    body = orc_file[: len(orc_file) - 1 - postscript_length]
    return body + appended + bytes(new_postscript) + bytes([len(new_postscript)])
