"""The Confluent wire format of a Protobuf record value: magic byte 0, a 4-byte big-endian schema id, the
message-index list (a zigzag varint count, then that many zigzag varint indexes; the single byte 0 stands
for [0], the file's first message), then the Protobuf body. Pure: stdlib only."""

from __future__ import annotations

MAGIC_BYTE = 0
HEADER_BYTES = 5


class BadRecord(ValueError):
    """A value that cannot be a row: its message is the record's ``error`` in the dead letters."""


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """An unsigned base-128 varint at ``pos``: (its value, the position after it). Raises ValueError when
    the data ends inside it or it is longer than 10 bytes."""
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("cut short")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def zigzag(value: int) -> int:
    """A zigzag-encoded number decoded: 0, 1, 2, 3 -> 0, -1, 1, -2."""
    return (value >> 1) ^ -(value & 1)


def header(value: bytes | None) -> int:
    """The schema id of a value in the Confluent wire format. Raises BadRecord (null, short, magic byte)."""
    if value is None:
        raise BadRecord("value is null (a tombstone), not a Protobuf record")
    if len(value) < HEADER_BYTES:
        raise BadRecord(f"value of {len(value)} bytes is shorter than the {HEADER_BYTES}-byte Confluent header")
    if value[0] != MAGIC_BYTE:
        raise BadRecord(f"magic byte is {value[0]}, not {MAGIC_BYTE}: not the Confluent wire format")
    return int.from_bytes(value[1:HEADER_BYTES], "big")


def message_indexes(value: bytes, schema_id: int) -> tuple[tuple[int, ...], int]:
    """The message-index path after the header and where the body starts. Raises BadRecord when the list is
    cut short, or its count or an index is negative or beyond what the value can hold."""
    def bad(why: str) -> BadRecord:
        return BadRecord(f"the message-index list after schema id {schema_id} {why}: not a Confluent Protobuf "
                         f"value")

    try:
        count, pos = read_varint(value, HEADER_BYTES)
        count = zigzag(count)
        if count == 0:
            return (0,), pos
        if count < 0:
            raise bad(f"has a negative count ({count})")
        if count > len(value) - pos:  # each index takes at least a byte
            raise bad(f"is cut short (a count of {count}, {len(value) - pos} bytes left)")
        indexes = []
        for _ in range(count):
            index, pos = read_varint(value, pos)
            indexes.append(zigzag(index))
    except ValueError as exc:
        if isinstance(exc, BadRecord):
            raise
        raise bad("is cut short") from None
    if any(i < 0 for i in indexes):
        raise bad(f"holds a negative index ({list(indexes)})")
    return tuple(indexes), pos


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def frame(schema_id: int, body: bytes, indexes: tuple[int, ...] | list[int] = (0,)) -> bytes:
    """A record value in the Confluent wire format (what a Confluent Protobuf serializer writes): [0] as the
    single byte 0, any other path as its zigzag count and indexes."""
    if not 0 <= schema_id < 2**31:
        raise ValueError(f"schema id {schema_id} is not a non-negative 32-bit integer")
    path = b"\x00" if list(indexes) == [0] else b"".join(encode_varint(2 * n) for n in (len(indexes), *indexes))
    return bytes([MAGIC_BYTE]) + schema_id.to_bytes(4, "big") + path + bytes(body)
