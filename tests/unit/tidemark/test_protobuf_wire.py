"""The Confluent wire format of Protobuf values (tidemark.formats.protobuf_wire): the header, the message-index list
(zigzag varints; the single byte 0 for [0]) and where the body starts."""

from __future__ import annotations

import pytest

from tidemark.formats.protobuf_wire import BadRecord, encode_varint, frame, header, message_indexes, read_varint, zigzag


@pytest.mark.parametrize(("data", "value", "end"), [
    (b"\x00", 0, 1), (b"\x01", 1, 1), (b"\x7f", 127, 1), (b"\x80\x01", 128, 2), (b"\xac\x02", 300, 2),
    (b"\xff\xff\xff\xff\x0f", 2**32 - 1, 5),
])
def test_varints_read_as_protobuf_writes_them(data, value, end):
    assert read_varint(data + b"\x99", 0) == (value, end)
    assert encode_varint(value) == data


@pytest.mark.parametrize("data", [b"", b"\x80", b"\xff\xff", b"\xff" * 11])
def test_a_varint_cut_short_or_too_long_is_refused(data):
    with pytest.raises(ValueError, match="cut short"):
        read_varint(data, 0)


def test_zigzag_maps_unsigned_back_to_signed():
    assert [zigzag(n) for n in range(6)] == [0, -1, 1, -2, 2, -3]


@pytest.mark.parametrize(("value", "reason"), [
    (None, "value is null (a tombstone), not a Protobuf record"),
    (b"", "value of 0 bytes is shorter than the 5-byte Confluent header"),
    (b"\x00\x00\x01", "value of 3 bytes is shorter than the 5-byte Confluent header"),
    (b"\x07\x00\x00\x00\x01\x00", "magic byte is 7, not 0: not the Confluent wire format"),
])
def test_a_bad_header_says_why(value, reason):
    with pytest.raises(BadRecord, match=f"^{reason}$".replace("(", r"\(").replace(")", r"\)")):
        header(value)


def test_the_schema_id_is_big_endian_and_unsigned():
    assert header(b"\x00\x00\x00\x01\x02") == 258
    assert header(b"\x00\xff\xff\xff\xff") == 2**32 - 1


@pytest.mark.parametrize(("after_header", "path", "body_at"), [
    (b"\x00", (0,), 6),  # the single byte 0: the file's first message
    (b"\x02\x02", (1,), 7),  # count 1, index 1
    (b"\x04\x02\x00", (1, 0), 8),  # count 2: the first message nested in the second
    (b"\x02\x96\x01", (75,), 8),  # an index of two bytes
])
def test_message_indexes_and_where_the_body_starts(after_header, path, body_at):
    value = b"\x00\x00\x00\x00\x05" + after_header + b"BODY"
    assert message_indexes(value, 5) == (path, body_at)
    assert value[body_at:] == b"BODY"


@pytest.mark.parametrize(("after_header", "why"), [
    (b"", "is cut short"),  # no list at all
    (b"\x80", "is cut short"),  # the count's varint never ends
    (b"\x06\x02", r"is cut short \(a count of 3, 1 bytes left\)"),
    (b"\x04\x02\x80", "is cut short"),  # the second index never ends
    (b"\x01", r"has a negative count \(-1\)"),
    (b"\x02\x03", r"holds a negative index \(\[-2\]\)"),
])
def test_a_broken_message_index_list_is_a_bad_record(after_header, why):
    with pytest.raises(BadRecord, match=rf"^the message-index list after schema id 5 {why}: not a Confluent Protobuf "
                                        rf"value$"):
        message_indexes(b"\x00\x00\x00\x00\x05" + after_header, 5)


@pytest.mark.parametrize("path", [(0,), (1,), (0, 0), (2, 1, 3), (200,)])
def test_frame_writes_what_message_indexes_reads(path):
    value = frame(7, b"body", path)
    assert header(value) == 7
    assert message_indexes(value, 7) == (path, len(value) - 4)
    assert frame(7, b"body") == b"\x00\x00\x00\x00\x07\x00body"  # [0] as Confluent's serializers write it


def test_frame_refuses_an_id_outside_32_bits():
    with pytest.raises(ValueError, match="not a non-negative 32-bit integer"):
        frame(2**31, b"")
