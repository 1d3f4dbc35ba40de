"""JSON Schema from the Schema Registry (issue 40, item 5) against the real broker, Spark, Delta and the local
registry (Apicurio's Confluent-compatible API): values in the Confluent wire format (magic byte, schema id,
JSON text), the columns from the subject's reader version, v1 then v2 (an added property), and poison records
(no header, a wrong magic byte, an unknown schema id, a value its columns cannot hold, a version the reader
cannot read). Exactly once by coordinates: every produced offset in the output or the dead letters, once."""

from __future__ import annotations

import json
import struct

import pytest

from tests import helpers
from tidemark import settings
from tidemark.batch.execute import execute_batch
from tidemark.batch.prepare import prepare_batch
from tidemark.config.pipeline import parse_pipeline
from tidemark.errors import SchemaRegistryError
from tidemark.formats.schema_registry import RegistryClient
from tidemark.ledger.store import Ledger

pytestmark = pytest.mark.integration

V1 = {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"},
                                       "at": {"type": "string", "format": "date-time"}}, "required": ["id", "name"]}
V2 = {**V1, "properties": {**V1["properties"], "score": {"type": ["number", "null"]}}}
STRINGY = {"type": "object", "properties": {"id": {"type": "string"}, "name": {"type": "string"}},
           "required": ["id", "name"]}


def wire(schema_id: int, value: dict | bytes, magic: int = 0) -> bytes:
    body = value if isinstance(value, bytes) else json.dumps(value).encode()
    return bytes([magic]) + struct.pack(">I", schema_id) + body


def props() -> dict[str, str]:
    return {"bootstrap.servers": helpers.bootstrap()}


def run(spark, config, registry: str) -> None:
    plan = prepare_batch(config, props(), schemas=RegistryClient(registry))
    if not plan.is_empty:
        execute_batch(spark, plan, props())


def test_json_schema_versions_from_the_registry_decode_wire_format_values_once(kafka_bootstrap, spark, lake,
                                                                              schema_registry):
    topic = helpers.create_topic(helpers.unique("jsr"), partitions=2)
    subject = f"{topic}-value"
    v1 = helpers.register_schema(subject, V1, schema_registry, schema_type="JSON")
    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic, "value_format": "json",
                             "value_subject": subject}, "test")
    helpers.produce_values(topic, [wire(v1, {"id": 1, "name": "a", "at": "2026-01-02T03:04:05Z"}),
                                   wire(v1, {"id": 2, "name": "b"}),
                                   b'{"id": 3, "name": "no header"}',  # plain JSON: no wire format
                                   wire(v1, {"id": 4, "name": "c"}, magic=1),
                                   wire(v1 + 1000, {"id": 5, "name": "unknown id"}),
                                   wire(v1, {"id": "six", "name": "d"}),  # not a bigint
                                   wire(v1, b"{not json")], partition=0)
    helpers.produce_values(topic, [wire(v1, {"id": 10, "name": "p1"})], partition=1)
    run(spark, config, schema_registry)
    rows = helpers.query(config.table_uri, "SELECT kafka_partition AS p, kafka_offset AS o, id, name, "
                                           "CAST(at AS VARCHAR) AS at FROM t ORDER BY p, o")
    assert [(r["p"], r["o"], r["id"], r["name"]) for r in rows] == [(0, 0, 1, "a"), (0, 1, 2, "b"), (1, 0, 10, "p1")]
    assert rows[0]["at"].startswith("2026-01-02T03:04:05")
    dead = {r["o"]: r["error"] for r in helpers.query(config.dead_letter_uri,
                                                      "SELECT kafka_offset AS o, error FROM t ORDER BY o")}
    assert list(dead) == [2, 3, 4, 5, 6]
    assert dead[2].startswith("magic byte is 123") and "not the Confluent wire format" in dead[2]
    assert dead[3] == "magic byte is 1, not 0: not the Confluent wire format"
    assert dead[4] == f"schema id {v1 + 1000} is not a version of subject '{subject}' in the Schema Registry " \
                      f"(as of plan time)"
    assert dead[5] == "field 'id': 'six' is not a valid bigint"
    assert dead[6].startswith("value is not a JSON object; missing required field")

    # v2 adds an optional property: a new column; v1's records still read (null in it); a version the reader
    # cannot read (id as a string) makes its records bad, naming why
    helpers.set_compatibility(subject, "NONE", schema_registry)  # the registry's JSON rules would refuse v2 (an
    # added property of an open object) and the unreadable version: Tidemark's own checks are what is tested
    v2 = helpers.register_schema(subject, V2, schema_registry, schema_type="JSON")
    stringy = helpers.register_schema(subject, {**STRINGY}, schema_registry, schema_type="JSON")
    helpers.produce_values(topic, [wire(v2, {"id": 20, "name": "v2", "score": 1.5}), wire(v1, {"id": 21, "name": "v1"}),
                                   wire(stringy, {"id": "22", "name": "s"})], partition=1)
    pinned = parse_pipeline({"name": topic, "topics": [topic], "table": topic, "value_format": "json",
                             "value_subject": subject, "value_schema_version": 2}, "test")
    run(spark, pinned, schema_registry)
    rows = helpers.query(config.table_uri, "SELECT kafka_offset AS o, id, score FROM t WHERE kafka_partition = 1 "
                                           "ORDER BY o")
    assert [(r["o"], r["id"], r["score"]) for r in rows] == [(0, 10, None), (1, 20, 1.5), (2, 21, None)]
    stringy_dead = helpers.query(config.dead_letter_uri, "SELECT error FROM t WHERE kafka_partition = 1")
    assert stringy_dead == [{"error": f"schema id {stringy} (version 3) cannot be read into the reader schema "
                                      f"(version 2): 'id' is string there but bigint in the reader"}]
    counts = helpers.query(config.table_uri, "SELECT COUNT(*) AS n, COUNT(DISTINCT (kafka_partition, kafka_offset)) "
                                             "AS u FROM t")
    assert counts == [{"n": 5, "u": 5}]
    rows = sorted((r.batch_id, r.partition, r.record_count, r.dead_letter_count)
                  for r in Ledger(settings.ledger_uri()).rows(topic) if r.kind == "batch")
    assert rows == [(1, 0, 7, 5), (1, 1, 1, 0), (2, 1, 3, 1)]


def test_a_subject_without_a_json_schema_is_refused_at_plan_time(kafka_bootstrap, lake, schema_registry):
    topic = helpers.create_topic(helpers.unique("jsr-none"), partitions=1)
    helpers.register_schema(f"{topic}-value", {"type": "record", "name": "r", "fields": []}, schema_registry)
    helpers.produce_values(topic, [b"x"], partition=0)
    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic, "value_format": "json",
                             "value_subject": f"{topic}-value"}, "test")
    with pytest.raises(SchemaRegistryError, match=f"subject '{topic}-value' has no JSON Schema in the Schema Registry"):
        prepare_batch(config, props(), schemas=RegistryClient(schema_registry))
    assert Ledger(settings.ledger_uri()).state(topic).pending_batch_id is None
