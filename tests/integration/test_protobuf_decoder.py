"""The JVM Protobuf decoder (jvm/protobuf, ``tidemark.batch.spark.protobuf_udf``) held to the Python reference
(tests/protobuf_reference.py, the decoder Tidemark ran in Python workers until 2026-12) on the same values: every
field kind, writers read into the reader's columns (a field added, integers and floats widened), every kind of bad
record with its words, and generated values, good ones with edge values and bad ones made by cutting, flipping and
appending bytes. Both must give the same row, or the same reason, for every value: a dead letter's reason does not
depend on which decoder ran."""

from __future__ import annotations

import decimal
import math
import random
import re

import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F

from tests.protobuf_reference import Decoder
from tests.unit.tidemark.protobuf_samples import ORDER, ORDER_V2, FakeSource, registered
from tests.unit.tidemark.test_protobuf_decode import bad_cases, classes, full_order
from tidemark.batch.spark.protobuf_udf import decoded
from tidemark.formats.protobuf_schemas import FrozenProtobuf, freeze_protobuf
from tidemark.formats.protobuf_wire import frame

pytestmark = pytest.mark.integration

SEED = 6060
V4 = ORDER.replace("int64 order_id = 1;", "sint32 order_id = 1;").replace("double amount = 2;", "float amount = 2;")
"""A writer whose order_id (sint32) and amount (float) widen into the reader's bigint and double."""


@pytest.fixture(scope="module")
def frozen() -> FrozenProtobuf:
    v3 = 'syntax = "proto3";\npackage shop;\nmessage Order { string order_id = 1; }\n'
    source = FakeSource(registered(1, 11, ORDER), registered(2, 12, ORDER_V2), registered(3, 13, v3),
                        registered(4, 14, V4))
    return freeze_protobuf("orders", "orders-value", 2, source)


def random_order(cls, rng: random.Random):
    """An Order with each field set or not, edge values among the random ones."""
    order = cls()
    pick = rng.random
    if pick() < 0.8:
        order.order_id = rng.choice([0, -1, 2**31 - 1, -(2**31), rng.randint(-(2**31), 2**31 - 1)])
    if pick() < 0.7:
        order.amount = rng.choice([0.0, -0.5, 1e300, 3.25, rng.uniform(-1e6, 1e6)])
    if pick() < 0.5:
        order.first_item.sku, order.first_item.qty = rng.choice(["", "sku", "ünï©ødé", "𝄞"]), rng.randint(-5, 5)
    for _ in range(rng.randint(0, 3)):
        order.items.add(sku=str(rng.randint(0, 99)), qty=rng.randint(0, 9))
    order.tags.extend(rng.choice(["a", "", "z" * 40]) for _ in range(rng.randint(0, 3)))
    for _ in range(rng.randint(0, 4)):
        order.counts[rng.choice(["a", "b", "c", "ä"])] = rng.randint(-(2**63), 2**63 - 1)
    if pick() < 0.7:
        order.status = rng.choice([0, 1, 1, 7])  # 7: no value of the enum (a bad record)
    if pick() < 0.6:
        order.placed_at.seconds = rng.choice([0, -62_135_596_800, 253_402_300_799, rng.randint(0, 2**33)])
        order.placed_at.nanos = rng.choice([0, 1000, 999_999_000, 5])  # 5 ns: finer than a microsecond
    if pick() < 0.5:
        order.note.value = rng.choice(["", "fragile"])
    if pick() < 0.5:
        setattr(order, rng.choice(["card", "iban"]), rng.choice(["", "4111", "DE00"]))
    if pick() < 0.5:
        order.maybe = rng.randint(-3, 3)
    if pick() < 0.7:
        order.small, order.big = rng.choice([0, 2**32 - 1, 12345]), rng.choice([0, 2**64 - 1, 2**63, 77])
    if pick() < 0.6:
        order.ratio = rng.choice([0.1, -2.5, float("inf")])
    if pick() < 0.5:
        order.blob = bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 6)))
    order.flag = pick() < 0.5
    return order


def damaged(body: bytes, rng: random.Random) -> bytes:
    """A body cut short, with a byte changed, or with a field appended that the message does not declare."""
    kind = rng.randint(0, 2)
    if kind == 0 and body:
        return body[:rng.randint(0, len(body) - 1)]
    if kind == 1 and body:
        at = rng.randrange(len(body))
        return body[:at] + bytes([rng.randint(0, 255)]) + body[at + 1:]
    return body + rng.choice([b"\xf8\x06\x01", b"\x0a\x02\xff\xfe", b"\x52\x02\xff\xfe", b"\x1a\x03\xf8\x06\x01"])


def generated(frozen: dict, count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    writers = {11: classes(frozen, 11)["Order"], 12: classes(frozen, 12)["Order"], 14: classes(frozen, 14)["Order"]}
    values = []
    for _ in range(count):
        schema_id = rng.choice(list(writers))
        order = random_order(writers[schema_id], rng)
        if schema_id == 12 and rng.random() < 0.5:
            order.region = rng.choice(["", "eu"])
        body = order.SerializeToString()
        values.append(frame(schema_id, damaged(body, rng) if rng.random() < 0.3 else body))
    return values


def canonical(value):
    """A decoded value in one form for both decoders: structs as dicts, maps as sorted (key, value) pairs,
    decimals as numbers, binary as bytes."""
    if isinstance(value, Row):
        return {k: canonical(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {k: canonical(v) for k, v in value.items()}
    if isinstance(value, list) and value and all(isinstance(v, tuple) and not isinstance(v, Row) for v in value):
        return sorted((canonical(k), canonical(v)) for k, v in value)
    if isinstance(value, list):
        return [canonical(v) for v in value]
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else value
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, float) and math.isnan(value):
        return "NaN"  # NaN equals nothing, not even itself
    return value


def reason(error: str | None) -> str | None:
    """A record's reason, compared whole; for a body that does not parse, without the parser's detail: in a body
    damaged twice (a length that runs past its message and bytes that are not UTF-8) which fault a parser meets
    first is the parser's (upb and protobuf-java differ there, and both give one of the two words)."""
    if error and error.startswith("the Protobuf body does not decode as "):
        head, _, detail = error.rpartition(": ")
        assert detail in ("Wire format was corrupt", "String field had bad UTF-8"), error
        return head
    return error


def overlong_varint(value: bytes, want: tuple, have: tuple) -> bool:
    """The one known difference: a varint whose tenth byte says more follow. upb refuses the body; protobuf-java
    reads the ten bytes as the number (the corruption a flipped bit in any varint is, which no decoder sees)."""
    return (want[0] is None and (want[1] or "").startswith("the Protobuf body does not decode as ")
            and have[1] is None and re.search(rb"[\x80-\xff]{10}", value) is not None)


def jvm_decoded(spark, frozen: FrozenProtobuf, values: list[bytes | None]) -> list[tuple[dict | None, str | None]]:
    rows = spark.createDataFrame([(i, v) for i, v in enumerate(values)], "i int, value binary").repartition(2)
    d = rows.select("i", decoded(spark, frozen).alias("d"))
    row = F.col("d.row").withField("placed_at", F.unix_micros("d.row.placed_at"))  # as the reference holds it
    out = d.select("i", F.struct(row.alias("row"), F.col("d.error").alias("error")).alias("d")).orderBy("i").collect()
    # Spark's maps come back as dicts: as sorted pairs, like the reference's
    return [(None if r.d.row is None else {k: sorted(v.items()) if isinstance(v, dict) else v
                                           for k, v in r.d.row.asDict().items()}, r.d.error) for r in out]


def test_the_jvm_decoder_gives_the_reference_row_or_reason_for_every_value(spark, frozen):
    as_dict = frozen.to_dict()
    full = full_order(classes(as_dict, 11)["Order"]).SerializeToString()
    wide = classes(as_dict, 14)["Order"](order_id=-7, amount=0.1)
    cases = [frame(11, full), frame(12, full), frame(12, classes(as_dict, 12)["Order"]().SerializeToString()),
             frame(14, wide.SerializeToString()), *[v for v, _ in bad_cases(as_dict)],
             *generated(as_dict, 3000, SEED)]
    reference = Decoder(as_dict)
    expected = [reference.decode(v) for v in cases]
    got = jvm_decoded(spark, frozen, cases)
    assert len(got) == len(expected)
    differences = [(i, cases[i], want, have) for i, (want, have) in
                   enumerate(zip([(canonical(r), reason(e)) for r, e in expected],
                                 [(canonical(r), reason(e)) for r, e in got],
                                 strict=True)) if want != have and not overlong_varint(cases[i], want, have)]
    for i, value, want, have in differences[:8]:
        print(f"value {i} {value!r}:\n  reference {want}\n  jvm       {have}")
    assert not differences, f"{len(differences)} of {len(cases)} values differ (the first printed)"
    bad = sum(1 for _, e in expected if e)
    # the generated values hold both kinds, and the widened writer reads as the reader's types
    assert 500 < bad < len(cases) - 1500, bad
    assert got[3][0]["order_id"] == -7 and got[3][0]["amount"] == pytest.approx(0.1) and got[3][1] is None
    kinds = {e.split(":")[0].split(" (")[0] for _, e in expected if e}
    assert {"the Protobuf body does not decode as message 'shop.Order' of schema id 11",
            "field 'placed_at'", "field 'status'"} <= kinds, kinds
