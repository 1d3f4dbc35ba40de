"""No value changed on the way in (issue 38), against the real broker, Spark, Delta and Schema Registry:
every written value is compared with the value produced, and every value a column cannot hold exactly is a
dead letter naming the field, the value and the column's type, under ``additive`` and ``lenient`` alike.
A type that widens (``tidemark.formats.type_changes``) widens the column in the batch's own commit: killed -9 between
that commit and the ledger's, the batch is rolled forward once; old rows read back in the new type, with
delta-spark and delta-rs; the narrow type's dead letters then reprocess with their exact values."""

from __future__ import annotations

import datetime as dt
import json
import struct
from decimal import Decimal

import pytest

from tests import helpers
from tests.integration.test_crash_points import recover, tidemark_run
from tidemark import fault_injection, settings
from tidemark.audit.live_table import audit_tables
from tidemark.batch.execute import execute_batch
from tidemark.batch.prepare import prepare_batch
from tidemark.config.pipeline import parse_pipeline
from tidemark.errors import SchemaChangeError
from tidemark.formats.schema_registry import RegistryClient
from tidemark.ledger.store import Ledger
from tidemark.operations.reprocessing import reserve
from tidemark_spark import reprocess as reprocess_job

pytestmark = pytest.mark.integration

UTC = dt.UTC


def props() -> dict[str, str]:
    return {"bootstrap.servers": helpers.bootstrap()}


def pipeline(topic: str, **extra):
    return parse_pipeline({"name": topic, "topics": [topic], "table": topic, **extra}, "test")


def send(topic: str, *texts: str) -> None:
    helpers.produce_values(topic, [t.encode() for t in texts])


def output(uri: str, *columns: str) -> dict[int, tuple]:
    rows = helpers.query(uri, f"SELECT kafka_offset, {', '.join(columns)} FROM t ORDER BY kafka_offset")
    return {r["kafka_offset"]: tuple(r[c] for c in columns) for r in rows}


def dead(uri: str) -> dict[int, str]:
    return {r["kafka_offset"]: r["error"] for r in helpers.query(uri, "SELECT kafka_offset, error FROM t")}


def spark_types(spark, uri: str) -> dict[str, str]:
    return dict(spark.read.format("delta").load(uri).dtypes)


def test_json_values_are_written_exactly_or_are_dead_letters_under_additive(kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("exact-json"), partitions=1)
    schema = {"id": "bigint", "n": "int", "amount": "bigint", "price": "decimal(10,2)", "ratio": "double",
              "at": "timestamp", "day": "date"}
    good = ('{"id": 0, "n": 2147483647, "amount": -9223372036854775808, "price": 12345678.99, "ratio": 0.1, '
            '"at": "2024-05-01T10:20:30.123456Z", "day": "2024-05-01"}')
    base = json.loads(good)
    bad = {  # offset -> (the one field changed, its JSON text, the message's words)
        1: ("amount", "5.5", "field 'amount': '5.5' is not a valid bigint"),
        2: ("n", "3000000000", "field 'n': '3000000000' is not a valid int"),
        3: ("price", "1.234", "field 'price': value 1.234 has more decimal places than decimal(10,2) holds"),
        4: ("price", "123456789.5", "field 'price': '123456789.5' is not a valid decimal(10,2)"),
        5: ("ratio", "1e400", "field 'ratio': value is out of the range of double (it would be infinity)"),
        6: ("at", '"2024-05-01T10:20:30.1234567Z"', "field 'at': '2024-05-01T10:20:30.1234567Z' has more precision "
                                                    "than a timestamp column holds (microseconds)"),
        7: ("day", '"2024-05-01T10:00:00"', "field 'day': '2024-05-01T10:00:00' has a time of day, which a date "
                                            "column cannot hold"),
        8: ("amount", '"abc"', "field 'amount': 'abc' is not a valid bigint"),
    }
    texts = [good] + [good.replace(f'"{f}": {json.dumps(base[f])}', f'"{f}": {text}') for f, text, _ in bad.values()]
    send(topic, *texts, '{"id": 9, "n": 7, "amount": 7, "price": 1.5, "ratio": 2, "at": 1714558830, '
                        '"day": "2024-05-01T00:00:00Z"}')
    config = pipeline(topic, value_format="json", value_schema=schema)
    execute_batch(spark, prepare_batch(config, props()), props())

    errors = dead(config.dead_letter_uri)
    assert sorted(errors) == sorted(bad), errors
    for offset, (_, _, message) in bad.items():
        assert errors[offset] == message, (offset, errors[offset])
    written = output(config.table_uri, *schema)
    assert written == {
        0: (0, 2147483647, -9223372036854775808, Decimal("12345678.99"), 0.1,
            dt.datetime(2024, 5, 1, 10, 20, 30, 123456, tzinfo=UTC), dt.date(2024, 5, 1)),
        9: (9, 7, 7, Decimal("1.50"), 2.0, dt.datetime(2024, 5, 1, 10, 20, 30, tzinfo=UTC), dt.date(2024, 5, 1))}


def test_lenient_writes_a_retyped_value_only_where_it_stays_the_same(kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("exact-lenient"), partitions=1)
    send(topic, '{"id": 0, "amount": 5, "at": "2024-05-01T10:20:30Z"}')
    execute_batch(spark, prepare_batch(pipeline(topic, value_format="json", value_schema={
        "id": "bigint", "amount": "bigint", "at": "timestamp"}), props()), props())

    send(topic, '{"id": 1, "amount": 77.5, "at": "2024-05-01T10:20:30.5Z"}',
         '{"id": 2, "amount": 77.0, "at": "2024-05-01T10:20:30.1234567Z"}',
         '{"id": 3, "amount": 1e30, "at": "soon"}',
         '{"id": 4, "amount": -12, "at": "2024-05-01 10:20:30"}')
    # amount: bigint -> double is no widening (refused by default, with the decimal that would widen) ...
    retyped = {"id": "bigint", "amount": "double", "at": "string"}
    with pytest.raises(SchemaChangeError, match=r"decimal\(22,2\)"):
        prepare_batch(pipeline(topic, value_format="json", value_schema=retyped), props())
    # ... and under lenient a value goes into the bigint (and timestamp) column only where it stays the same.
    config = pipeline(topic, value_format="json", value_schema=retyped, schema_changes="lenient")
    plan = prepare_batch(config, props())
    assert plan.format.casts == {"amount": "long", "at": "timestamp"} and plan.format.widen == {}
    execute_batch(spark, plan, props())

    assert spark_types(spark, config.table_uri)["amount"] == "bigint"
    assert output(config.table_uri, "id", "amount", "at") == {
        0: (0, 5, dt.datetime(2024, 5, 1, 10, 20, 30, tzinfo=UTC)),
        4: (4, -12, dt.datetime(2024, 5, 1, 10, 20, 30, tzinfo=UTC))}
    assert dead(config.dead_letter_uri) == {
        1: "field 'amount': value 77.5 (double) cannot be written exactly as the output column's type bigint (it "
           "would be 77)",
        2: "field 'at': '2024-05-01T10:20:30.1234567Z' has more precision than a timestamp column holds "
           "(microseconds)",
        3: "field 'amount': value 1.0E30 (double) does not fit the output column's type bigint; field 'at': 'soon' "
           "is not a valid timestamp"}
    # 77.5 -> the second record's 77.0 is written as 77: the same number.
    assert Ledger(settings.ledger_uri()).state(topic).last_batch_id == 2


def test_a_widening_is_committed_with_its_batch_and_the_narrow_dead_letters_reprocess_exactly(
        kafka_bootstrap, spark, spark_connect, lake, tmp_path):
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    env = helpers.service_env(pipelines, lake)
    env["AIRFLOW_CONN_SPARK_DEFAULT"] = helpers.spark_connect_connection(spark_connect)
    topic = helpers.create_topic(helpers.unique("widen"), partitions=1)
    narrow = {"id": "bigint", "amount": "bigint", "qty": "int"}
    send(topic, *(json.dumps({"id": i, "amount": a, "qty": 1}) for i, a in enumerate([5, 5.5, 19, 33.5])))
    config = pipeline(topic, value_format="json", value_schema=narrow)
    uri, dead_uri = config.table_uri, config.dead_letter_uri
    execute_batch(spark, prepare_batch(config, props()), props())
    assert sorted(dead(dead_uri)) == [1, 3]

    wide = {"id": "bigint", "amount": "decimal(22,2)", "qty": "double"}
    (pipelines / f"{topic}.yaml").write_text(json.dumps({"name": topic, "topics": [topic], "table": topic,
                                                         "value_format": "json", "value_schema": wide}))
    send(topic, json.dumps({"id": 4, "amount": 77.25, "qty": 0.5}), '{"id": 5, "amount": 1.005, "qty": 2}')
    crashed, _ = tidemark_run({**env, "TIDEMARK_CRASH_AT": fault_injection.AFTER_OUTPUT_COMMIT,
                               "TIDEMARK_CRASH_ONCE": str(tmp_path / "crashed")}, topic)
    assert (tmp_path / "crashed").exists(), crashed.stderr[-3000:]
    # Killed after the output commit: the table is widened and holds batch 2, the ledger does not know yet.
    killed = Ledger(settings.ledger_uri()).state(topic)
    assert helpers.txn_version(uri, topic) == 2 and killed.pending_batch_id == 2
    assert list(killed.positions.values()) == [4]
    assert spark_types(spark, uri)["amount"] == "decimal(22,2)" and spark_types(spark, uri)["qty"] == "double"
    recover(spark, topic, env, "spark-connect")

    state = Ledger(settings.ledger_uri()).state(topic)
    assert state.last_batch_id == 2 and state.pending_batch_id is None
    expected = {0: (0, Decimal("5.00"), 1.0), 2: (2, Decimal("19.00"), 1.0), 4: (4, Decimal("77.25"), 0.5)}
    assert output(uri, "id", "amount", "qty") == expected  # delta-rs reads the widened table
    assert sorted((r.kafka_offset, r.id, r.amount, r.qty) for r in spark.read.format("delta").load(uri).collect()) \
        == [(o, *v) for o, v in sorted(expected.items())]
    assert sorted(dead(dead_uri)) == [1, 3, 5]
    assert dead(dead_uri)[5] == "field 'amount': value 1.005 has more decimal places than decimal(22,2) holds"

    # The narrow type's dead letters (5.5 and 33.5 as bigint) decode exactly now.
    config = pipeline(topic, value_format="json", value_schema=wide)
    plan = reserve(config, Ledger(settings.ledger_uri()), None, batch_id=None, reason="amount widened",
                   owner="test")
    reprocess_job.execute(spark, plan)
    assert output(uri, "id", "amount") == {0: (0, Decimal("5.00")), 1: (1, Decimal("5.50")), 2: (2, Decimal("19.00")),
                                           3: (3, Decimal("33.50")), 4: (4, Decimal("77.25"))}
    assert sorted(dead(dead_uri)) == [5]
    report = audit_tables(topic, uri, dead_uri, settings.ledger_uri())
    assert report.ok and report.records == 5, report.to_dict()


V1 = {"type": "record", "name": "Reading", "namespace": "lab", "fields": [
    {"name": "id", "type": "long"}, {"name": "qty", "type": "int"}, {"name": "ratio", "type": "float"}]}
V2 = {**V1, "fields": [{"name": "id", "type": "long"}, {"name": "qty", "type": "long"},
                       {"name": "ratio", "type": "double"}]}
V3 = {**V1, "fields": [{"name": "id", "type": "long"}, {"name": "qty", "type": "double"},
                       {"name": "ratio", "type": "double"}]}


def as_float32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


def test_avro_int_to_long_and_float_to_double_widen_and_lenient_keeps_values_exact(kafka_bootstrap, schema_registry,
                                                                                   spark, lake):
    topic = helpers.create_topic(helpers.unique("exact-avro"), partitions=1)
    subject, registry = f"{topic}-value", RegistryClient(schema_registry)
    helpers.set_compatibility(subject, "NONE")
    v1 = helpers.register_schema(subject, V1)
    helpers.produce_values(topic, [helpers.avro_value(v1, V1, {"id": 0, "qty": 2**31 - 1, "ratio": 0.1})])
    config = pipeline(topic, value_format="avro")
    execute_batch(spark, prepare_batch(config, props(), schemas=registry), props())
    assert spark_types(spark, config.table_uri)["qty"] == "int"

    v2 = helpers.register_schema(subject, V2)
    helpers.produce_values(topic, [helpers.avro_value(v1, V1, {"id": 1, "qty": 7, "ratio": 0.5}),
                                   helpers.avro_value(v2, V2, {"id": 2, "qty": 2**53 + 1, "ratio": 0.1})])
    plan = prepare_batch(config, props(), schemas=registry)
    assert plan.format.widen == {"qty": "bigint", "ratio": "double"}
    execute_batch(spark, plan, props())
    assert (spark_types(spark, config.table_uri)["qty"], spark_types(spark, config.table_uri)["ratio"]) == (
        "bigint", "double")
    assert output(config.table_uri, "id", "qty", "ratio") == {
        0: (0, 2**31 - 1, as_float32(0.1)), 1: (1, 7, 0.5), 2: (2, 2**53 + 1, 0.1)}

    # v3 makes qty a double: no widening of bigint. Under lenient a v3 value is written where it stays the same,
    # and v2's longs are not promoted to double (Avro would, changing 2**53 + 1): they are dead letters.
    v3 = helpers.register_schema(subject, V3)
    helpers.produce_values(topic, [helpers.avro_value(v3, V3, {"id": 3, "qty": 5.5, "ratio": 1.0}),
                                   helpers.avro_value(v3, V3, {"id": 4, "qty": 12.0, "ratio": 1.0}),
                                   helpers.avro_value(v2, V2, {"id": 5, "qty": 2**53 + 1, "ratio": 1.0})])
    with pytest.raises(SchemaChangeError, match=r"field 'qty' is double in the schema but long in the table"):
        prepare_batch(config, props(), schemas=registry)
    lenient = pipeline(topic, value_format="avro", schema_changes="lenient")
    execute_batch(spark, prepare_batch(lenient, props(), schemas=registry), props())
    assert output(config.table_uri, "id", "qty")[4] == (4, 12)
    errors = dead(config.dead_letter_uri)
    assert sorted(errors) == [3, 5], errors
    assert errors[3] == ("field 'qty': value 5.5 (double) cannot be written exactly as the output column's type "
                         "bigint (it would be 5)")
    assert f"schema id {v2} (version 2) cannot be read into the reader schema" in errors[5]
    assert "changes long values beyond 2**53" in errors[5], errors[5]


def test_delta_rs_cannot_read_the_type_widening_feature(spark, tmp_path):
    """Why a widening rewrites the table instead of turning on Delta's ``typeWidening`` feature: delta-rs, which
    Tidemark's recovery and audit read output tables with, refuses to read such a table. When a delta-rs upgrade
    makes this fail, the in-place feature can be reconsidered (docs/DESIGN.md, *Type widening is one commit*)."""
    from deltalake import DeltaTable

    uri = str(tmp_path / "widened")
    spark.sql("SELECT CAST(1 AS INT) AS qty").write.format("delta").save(uri)
    spark.sql(f"ALTER TABLE delta.`{uri}` SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
    spark.sql("SELECT CAST(2 AS BIGINT) AS qty").write.format("delta").mode("append").option("mergeSchema", "true") \
        .save(uri)
    assert dict(spark.read.format("delta").load(uri).dtypes)["qty"] == "bigint"  # widened in place by delta-spark
    with pytest.raises(Exception, match="typeWidening|TypeWidening"):
        DeltaTable(uri).to_pyarrow_table()
