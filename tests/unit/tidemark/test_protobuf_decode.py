"""Protobuf record values decoded with a batch's frozen schemas (tests.protobuf_reference), as Spark's Python
workers run it (tidemark.batch.spark.protobuf_udf's UDF body, called here on an Arrow array): every field kind as the
reader's column, writers read by field name, and every kind of bad record with its reason."""

from __future__ import annotations

import base64

import pytest
from google.protobuf import message_factory

from tests.protobuf_reference import Decoder
from tests.unit.tidemark.protobuf_samples import ORDER, ORDER_V2, FakeSource, registered
from tidemark.formats.protobuf_schemas import freeze_protobuf
from tidemark.formats.protobuf_types import load_file, messages_by_path
from tidemark.formats.protobuf_wire import frame


@pytest.fixture(scope="module")
def frozen() -> dict:
    """v1 (id 11) and v2 (id 12, adds ``region``; the reader), and v3 (id 13) whose order_id is a string."""
    v3 = 'syntax = "proto3";\npackage shop;\nmessage Order { string order_id = 1; }\n'
    source = FakeSource(registered(1, 11, ORDER), registered(2, 12, ORDER_V2), registered(3, 13, v3))
    return freeze_protobuf("orders", "orders-value", 2, source).to_dict()


def classes(frozen: dict, schema_id: int) -> dict:
    key = str(schema_id)
    file = load_file(base64.b64decode(frozen["descriptors"][key]), frozen["files"][key])
    return {m.name: message_factory.GetMessageClass(m) for m in messages_by_path(file).values()}


def full_order(cls):
    order = cls(order_id=7, amount=2.5, tags=["a", "b"], status=1, small=2**32 - 1, big=2**64 - 1, ratio=0.5,
                blob=b"\x00\x01", flag=True, card="4111")
    order.first_item.sku, order.first_item.qty = "sku", 3
    order.items.add(sku="x", qty=1)
    order.counts["b"], order.counts["a"] = 2, 1
    order.placed_at.seconds, order.placed_at.nanos = 1_714_558_830, 123_456_000
    order.note.value = "fragile"
    return order


def test_every_field_kind_is_written_as_its_column(frozen):
    row, error = Decoder(frozen).decode(frame(11, full_order(classes(frozen, 11)["Order"]).SerializeToString()))
    assert error is None
    assert row == {"order_id": 7, "amount": 2.5, "first_item": {"sku": "sku", "qty": 3},
                   "items": [{"sku": "x", "qty": 1}], "tags": ["a", "b"], "counts": [("a", 1), ("b", 2)],
                   "status": "PAID",
                   "placed_at": 1_714_558_830_123_456, "note": "fragile", "card": "4111", "iban": None, "maybe": None,
                   "small": 2**32 - 1, "big": 2**64 - 1, "ratio": 0.5, "blob": b"\x00\x01", "flag": True,
                   "region": None}  # written with v1: no region


def test_unset_fields_read_as_protobuf_defines_them(frozen):
    row, error = Decoder(frozen).decode(frame(12, classes(frozen, 12)["Order"]().SerializeToString()))
    assert error is None
    # Without presence (proto3 scalars): the default value. With presence (messages, oneof members, optional,
    # wrappers): null. Repeated and map fields: empty.
    assert row == {"order_id": 0, "amount": 0.0, "first_item": None, "items": [], "tags": [], "counts": [],
                   "status": "NEW", "placed_at": None, "note": None, "card": None, "iban": None, "maybe": None,
                   "small": 0, "big": 0, "ratio": 0.0, "blob": b"", "flag": False, "region": ""}


def bad_cases(frozen: dict) -> list[tuple[bytes | None, str]]:
    v1 = classes(frozen, 11)
    fine = full_order(v1["Order"])
    fine.placed_at.nanos = 123_456_789
    out_of_range = full_order(v1["Order"])
    out_of_range.placed_at.seconds = 253_402_300_800
    unknown_enum = full_order(v1["Order"])
    unknown_enum.status = 9
    where = "message 'shop.Order' of schema id 11"
    return [
        (None, "value is null (a tombstone), not a Protobuf record"),
        (b"\x00\x00\x00", "value of 3 bytes is shorter than the 5-byte Confluent header"),
        (b"\x01\x00\x00\x00\x0b\x00", "magic byte is 1, not 0: not the Confluent wire format"),
        (frame(13, b""), "schema id 13 (version 3) cannot be read as the reader message 'shop.Order' (version 2): "
                         "field 'order_id' is string in the writer's message but bigint in the reader's, and string "
                         "does not read as bigint exactly"),
        (frame(99, b""), "schema id 99 is not a version of subject 'orders-value' in the Schema Registry (as of plan "
                         "time)"),
        (b"\x00\x00\x00\x00\x0b\x80", "the message-index list after schema id 11 is cut short: not a Confluent "
                                      "Protobuf value"),
        (frame(11, b"", (4,)), "message indexes [4] name no message of schema id 11 (version 1)"),
        (frame(11, b"", (1,)), "message indexes [1] name message 'shop.Refund' of schema id 11, not the reader message "
                               "'shop.Order'"),
        (frame(11, b"", (0, 0)), "message indexes [0, 0] name message 'shop.Order.Item' of schema id 11, not the "
                                 "reader message 'shop.Order'"),
        (frame(11, b"\x81"), f"the Protobuf body does not decode as {where}: Wire format was corrupt"),
        (frame(11, b"\x52\x02\xff\xfe"), f"the Protobuf body does not decode as {where}: String field had bad UTF-8"),
        (frame(11, b"\x0a\x02\xff\xfe"), f"the Protobuf body holds fields that {where} does not declare, or declares "
                                         f"with another wire type (field numbers 1): not a record of that message"),
        (frame(11, b"\xf8\x06\x01"), f"the Protobuf body holds fields that {where} does not declare, or declares with "
                                     f"another wire type (field numbers 111): not a record of that message"),
        (frame(11, b"\x1a\x03\xf8\x06\x01"), f"the Protobuf body holds fields that {where} does not declare, or "
                                             f"declares with another wire type (in a nested message): not a record of "
                                             f"that message"),
        (frame(11, fine.SerializeToString()), "field 'placed_at': 2024-05-01T10:20:30.123456789Z has more precision "
                                              "than a timestamp column holds (microseconds)"),
        (frame(11, out_of_range.SerializeToString()), "field 'placed_at': Timestamp seconds=253402300800 nanos="
                                                      "123456000 is not a valid Timestamp"),
        (frame(11, unknown_enum.SerializeToString()), "field 'status': 9 is not a value of enum 'shop.Order.Status' in "
                                                      "schema id 11 (version 1)"),
    ]


def test_every_bad_record_says_why_and_gives_no_row(frozen):
    decoder = Decoder(frozen)
    for value, reason in bad_cases(frozen):
        row, error = decoder.decode(value)
        assert row is None and error is not None and error.startswith(reason), (value, error)
