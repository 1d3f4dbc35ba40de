"""Protobuf values in the Confluent wire format, decoded with schemas from a real Schema Registry (Apicurio's
Confluent-compatible API, schemaType PROTOBUF) that the plan compiles with protoc and freezes in the ledger:
every field kind as a column, a second version that adds a field, poison records of every kind in the dead
letters, each produced record once in the output or the dead letters, and a retry that decodes with the frozen
descriptor sets while the registry is down."""

from __future__ import annotations

import datetime as dt
import decimal
import importlib.resources
import subprocess
from pathlib import Path

import pytest
import requests
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from grpc_tools import protoc

from tests import helpers
from tidemark import settings
from tidemark.batch.execute import execute_batch
from tidemark.batch.prepare import prepare_batch
from tidemark.config.pipeline import parse_pipeline
from tidemark.errors import SchemaRegistryError
from tidemark.formats.schema_registry import RegistryClient
from tidemark.ledger.store import Ledger

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

V1 = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

message Order {
  message Item { string sku = 1; int32 qty = 2; }
  enum Status { NEW = 0; PAID = 1; SHIPPED = 2; }
  int64 order_id = 1;
  double amount = 2;
  Item first_item = 3;
  repeated Item items = 4;
  repeated string tags = 5;
  map<string, int64> counts = 6;
  Status status = 7;
  google.protobuf.Timestamp placed_at = 8;
  google.protobuf.StringValue note = 9;
  oneof payment { string card = 10; string iban = 11; }
  uint64 big = 12;
}
message Refund { int64 order_id = 1; }
"""
V2 = V1.replace("  uint64 big = 12;\n", "  uint64 big = 12;\n  string region = 13;\n")


def register(subject: str, text: str, schema_type: str = "PROTOBUF") -> int:
    response = requests.post(f"{helpers.schema_registry_url()}/subjects/{subject}/versions", timeout=10,
                             json={"schema": text, "schemaType": schema_type},
                             headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    response.raise_for_status()
    return int(response.json()["id"])


def message_classes(text: str, folder: Path) -> dict:
    """The file's message classes by name, compiled here with protoc (independently of the product's code)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "order.proto").write_text(text)
    include = importlib.resources.files("grpc_tools") / "_proto"
    out = folder / "set.pb"
    assert protoc.main(["protoc", f"-I{folder}", f"-I{include}", f"--descriptor_set_out={out}", "--include_imports",
                        str(folder / "order.proto")]) == 0
    pool = descriptor_pool.DescriptorPool()
    for file in descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file:
        pool.Add(file)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"shop.{name}"))
            for name in ("Order", "Refund")}


def framed(schema_id: int, message, indexes: bytes = b"\x00") -> bytes:
    """Confluent's wire format: magic byte, schema id, message indexes ([0] is the single byte 0), body."""
    body = message if isinstance(message, bytes) else message.SerializeToString()
    return b"\x00" + schema_id.to_bytes(4, "big") + indexes + body


def order(cls, i: int, **extra):
    message = cls(order_id=i, amount=i / 4, tags=[f"t{i}", "x"], status=i % 3, big=2**64 - 1 - i, **extra)
    message.first_item.sku, message.first_item.qty = f"sku-{i}", i
    message.items.add(sku="a", qty=1)
    message.items.add(sku="b", qty=2)
    message.counts["one"], message.counts["two"] = 1, i
    message.placed_at.seconds, message.placed_at.nanos = 1_714_558_830 + i, 123_456_000
    if i % 2 == 0:
        message.note.value = f"note {i}"
        message.card = f"card-{i}"
    else:
        message.iban = f"iban-{i}"
    return message


def expected(i: int, region: str | None = None, with_region: bool = False) -> dict:
    row = {"order_id": i, "amount": i / 4, "first_item": {"sku": f"sku-{i}", "qty": i},
           "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}], "tags": [f"t{i}", "x"],
           "counts": {"one": 1, "two": i}, "status": ["NEW", "PAID", "SHIPPED"][i % 3],
           "placed_at": dt.datetime(2024, 5, 1, 10, 20, 30, 123456) + dt.timedelta(seconds=i),
           "note": f"note {i}" if i % 2 == 0 else None, "card": f"card-{i}" if i % 2 == 0 else None,
           "iban": None if i % 2 == 0 else f"iban-{i}", "big": decimal.Decimal(2**64 - 1 - i)}
    return {**row, "region": region} if with_region else row


def as_dict(row) -> dict:
    return row.asDict(recursive=True)


def props() -> dict[str, str]:
    return {"bootstrap.servers": helpers.bootstrap()}


def rows(spark, uri: str) -> list:
    return sorted(spark.read.format("delta").load(uri).collect(), key=lambda r: (r.kafka_partition, r.kafka_offset))


PAYLOAD = ["order_id", "amount", "first_item", "items", "tags", "counts", "status", "placed_at", "note", "card", "iban",
           "big"]


def test_two_versions_every_field_kind_and_every_bad_record_once(kafka_bootstrap, schema_registry, spark, lake,
                                                                   tmp_path):
    topic = helpers.create_topic(helpers.unique("proto"), partitions=2)
    subject = f"{topic}-value"
    v1 = register(subject, V1)
    classes = message_classes(V1, tmp_path / "v1")
    Order, Refund = classes["Order"], classes["Refund"]
    helpers.produce_values(topic, [framed(v1, order(Order, i)) for i in range(4)])
    too_fine = order(Order, 9)
    too_fine.placed_at.nanos = 123_456_789
    bad = [
        (b"\x00\x00\x01", "value of 3 bytes is shorter than the 5-byte Confluent header"),
        (b"\x01" + framed(v1, order(Order, 5))[1:], "magic byte is 1, not 0: not the Confluent wire format"),
        (framed(987654, order(Order, 6)), f"schema id 987654 is not a version of subject '{subject}' in the Schema "
                                          f"Registry (as of plan time)"),
        (framed(v1, b"\x81"), f"the Protobuf body does not decode as message 'shop.Order' of schema id {v1}: Wire "
                              f"format was corrupt"),
        (framed(v1, order(Order, 7), b"\x02\x0a"),
         f"message indexes [5] name no message of schema id {v1} (version 1)"),
        (framed(v1, Refund(order_id=8), b"\x02\x02"),
         f"message indexes [1] name message 'shop.Refund' of schema id {v1}, not the reader message 'shop.Order'"),
        (framed(v1, too_fine), "field 'placed_at': 2024-05-01T10:20:39.123456789Z has more precision than a "
                               "timestamp column holds (microseconds)"),
    ]
    helpers.produce_values(topic, [v for v, _ in bad], partition=1)

    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic, "value_format": "protobuf"}, "test")
    registry = RegistryClient(schema_registry)
    execute_batch(spark, prepare_batch(config, props(), schemas=registry), props())
    out = spark.read.format("delta").load(config.table_uri)
    assert [c for c in out.columns if not c.startswith(("kafka_", "ingest"))] == PAYLOAD
    assert {n: t for n, t in out.dtypes if n in PAYLOAD} == {
        "order_id": "bigint", "amount": "double", "first_item": "struct<sku:string,qty:int>",
        "items": "array<struct<sku:string,qty:int>>", "tags": "array<string>", "counts": "map<string,bigint>",
        "status": "string", "placed_at": "timestamp", "note": "string", "card": "string", "iban": "string",
        "big": "decimal(20,0)"}
    got = [{k: as_dict(r)[k] for k in PAYLOAD} for r in rows(spark, config.table_uri)]
    assert got == [expected(i) for i in range(4)]
    dead = rows(spark, config.dead_letter_uri)
    assert [(r.kafka_partition, r.kafka_offset) for r in dead] == [(1, i) for i in range(len(bad))]
    for row, (value, error) in zip(dead, bad, strict=True):
        assert (row.value, row.error) == (value, error)

    # v2 adds a field; the next batch reads v1 and v2 records into v2's columns. Its run "crashes" after the
    # freeze, and the next run executes the frozen batch with the registry down: the descriptor sets are frozen.
    v2 = register(subject, V2)
    Order2 = message_classes(V2, tmp_path / "v2")["Order"]
    helpers.produce_values(topic, [framed(v1, order(Order, 10)), framed(v2, order(Order2, 11, region="eu")),
                                   framed(v2, order(Order2, 12))])
    helpers.produce_values(topic, [framed(v2, b"\x0a\x02\xff\xfe")], partition=1)  # field 1 as bytes, not a varint
    frozen = prepare_batch(config, props(), schemas=registry, owner="run-that-crashed")
    assert frozen.format.add_columns and [f.name for f in frozen.format.fields] == [*PAYLOAD, "region"]
    down = RegistryClient(f"http://127.0.0.1:{helpers.free_port()}", timeout_s=2)
    retry = prepare_batch(config, props(), schemas=down, owner="next-run", run_state=lambda run: "failed")
    assert retry.recovered and retry.batch_id == frozen.batch_id == 2 and retry.format == frozen.format
    execute_batch(spark, retry, props())

    output = rows(spark, config.table_uri)
    assert [{k: as_dict(r)[k] for k in [*PAYLOAD, "region"]} for r in output if r.ingest_batch_id == 2] == [
        expected(10, None, True), expected(11, "eu", True), expected(12, "", True)]  # proto3: unset string is ""
    assert all(r.region is None for r in output if r.ingest_batch_id == 1)
    dead = rows(spark, config.dead_letter_uri)
    assert [(r.kafka_offset, r.error) for r in dead if r.ingest_batch_id == 2] == [(len(bad), (
        f"the Protobuf body holds fields that message 'shop.Order' of schema id {v2} does not declare, or declares "
        f"with another wire type (field numbers 1): not a record of that message"))]

    # Exactly once by coordinates: every produced offset is in the output or the dead letters, once.
    seen = [(r.kafka_partition, r.kafka_offset) for r in output + dead]
    assert sorted(seen) == sorted({*seen}) == [(0, o) for o in range(7)] + [(1, o) for o in range(len(bad) + 1)]
    committed = [r for r in Ledger(settings.ledger_uri()).rows(topic) if r.batch_id == 2]
    assert sum(r.record_count for r in committed) == 4 and sum(r.dead_letter_count for r in committed) == 1


def test_a_reader_schema_protoc_refuses_or_of_another_type_freezes_nothing(kafka_bootstrap, schema_registry, lake):
    topic = helpers.create_topic(helpers.unique("proto-refused"), partitions=1)
    helpers.produce_values(topic, [b"\x00" * 6])
    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic, "value_format": "protobuf"}, "test")
    registry = RegistryClient(schema_registry, pipeline=topic)
    ledger = Ledger(settings.ledger_uri())
    with pytest.raises(SchemaRegistryError, match=rf"pipeline '{topic}': the Schema Registry .* does not have the "
                                                  rf"versions of subject '{topic}-value'"):
        prepare_batch(config, props(), schemas=registry)
    register(f"{topic}-value", '{"type": "record", "name": "A", "fields": [{"name": "a", "type": "long"}]}', "AVRO")
    with pytest.raises(SchemaRegistryError, match=rf"subject '{topic}-value' has no Protobuf schema in the Schema "
                                                  rf"Registry \(its versions' types: AVRO\)\. Nothing was frozen"):
        prepare_batch(config, props(), schemas=registry)
    other = parse_pipeline({"name": topic, "topics": [topic], "table": topic, "value_format": "protobuf",
                            "value_subject": f"{topic}-proto"}, "test")
    register(f"{topic}-proto", 'syntax = "proto3";\nmessage Order { strin id = 1; }\n')
    with pytest.raises(SchemaRegistryError, match=rf"pipeline '{topic}': the value reader schema \(subject "
                                                  rf"'{topic}-proto' version 1 \(id \d+\)\) cannot be used: protoc "
                                                  rf"refuses it: .*\"strin\" is not defined.*Nothing was frozen"):
        prepare_batch(other, props(), schemas=registry)
    assert ledger.rows(topic) == []


def test_protobuf_values_on_the_warm_path(kafka_bootstrap, schema_registry, spark_connect, tmp_path):
    """`tidemark run` on the Spark Connect server: the JVM decoder registered in the job's Connect session and run by
    the server (whose jar set holds it), the rows and a dead letter as spark-submit writes them."""
    topic = helpers.create_topic(helpers.unique("proto-warm"), partitions=1)
    v1 = register(f"{topic}-value", V1)
    Order = message_classes(V1, tmp_path / "v1")["Order"]
    helpers.produce_values(topic, [framed(v1, order(Order, i)) for i in range(3)] + [framed(v1, b"\x81")])
    pipelines, lake = tmp_path / "pipelines", tmp_path / "lake"
    pipelines.mkdir()
    (pipelines / f"{topic}.yaml").write_text(f"name: {topic}\ntopics: [{topic}]\ntable: {topic}\n"
                                             f"value_format: protobuf\n")
    env = helpers.service_env(pipelines, lake,
                              AIRFLOW_CONN_SPARK_DEFAULT=helpers.spark_connect_connection(spark_connect),
                              AIRFLOW_CONN_SCHEMA_REGISTRY_DEFAULT=helpers.registry_connection(schema_registry))
    run = subprocess.run([str(ROOT / ".venv" / "bin" / "tidemark"), "run", topic], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    got = helpers.query(str(lake / topic), "SELECT order_id, status, big, placed_at FROM t ORDER BY order_id")
    assert [(r["order_id"], r["status"], int(r["big"])) for r in got] == [
        (i, ["NEW", "PAID", "SHIPPED"][i % 3], 2**64 - 1 - i) for i in range(3)]
    committed = Ledger(str(lake / "_tidemark" / "offsets")).rows(topic)
    assert [(r.record_count, r.dead_letter_count, r.status) for r in committed] == [(4, 1, "committed")]  # 1 bad
