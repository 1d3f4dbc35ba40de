"""An Avro pipeline through the ingest DAG: schemas from the real Schema Registry, two schema versions,
every kind of bad record in the dead-letter table (a schema id the reader schema cannot read included), a
batch that a crashed run left behind executed by the next run while the registry is unreachable (with the
schemas frozen in the ledger), then a new column. The crashed run is a spark-submit driver; the runs after it
decode on the warm path (the test run's Spark Connect server; tests/integration/test_avro.py decodes on a classic
SparkSession)."""

from __future__ import annotations

import pytest

from tests import helpers
from tidemark import fault_injection

pytestmark = pytest.mark.e2e

V1 = {"type": "record", "name": "Payment", "fields": [{"name": "payment_id", "type": "long"},
                                                       {"name": "amount", "type": "double"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "currency", "type": ["null", "string"], "default": None}]}
UNREADABLE = {**V1, "fields": [{"name": "payment_id", "type": "long"}, {"name": "amount", "type": "string"}]}


def test_avro_through_the_dag_with_a_crash_a_registry_outage_and_an_added_field(stack, schema_registry, spark_connect,
                                                                                 tmp_path):
    topic = helpers.create_topic(helpers.unique("avro-dag"), partitions=2)
    subject = f"{topic}-value"
    dag_id = stack.add_pipeline(topic, [topic], value_format="avro", retries=0)
    table, dead_letters = str(stack.lake / topic), str(stack.lake / f"{topic}_dead_letters")
    stack.env["AIRFLOW_CONN_SCHEMA_REGISTRY_DEFAULT"] = helpers.registry_connection(schema_registry)
    v1 = helpers.register_schema(subject, V1)
    helpers.produce_values(topic, [helpers.avro_value(v1, V1, {"payment_id": i, "amount": i * 1.5})
                                   for i in range(6)], partition=0)
    bad = [b"\x05" + bytes(8), b"\x00\x01", helpers.avro_value(424242, V1, {"payment_id": 0, "amount": 0.0}),
           b"\x00" + v1.to_bytes(4, "big") + b"\xff"]
    helpers.produce_values(topic, bad, partition=1)

    # 1. The Spark driver is killed mid-read: the run fails and leaves batch 1 frozen.
    crashed = tmp_path / "crashed"
    stack.env.update({"TIDEMARK_CRASH_AT": fault_injection.DURING_READ, "TIDEMARK_CRASH_ONCE": str(crashed)})
    run = stack.run_dag(dag_id)
    assert crashed.exists() and run.task_states["ingest"] == "failed"
    del stack.env["TIDEMARK_CRASH_AT"]
    stack.use_spark_connect(spark_connect)  # the runs below decode Avro on the Connect server: no JVM launch

    # 2. The registry changes (a version whose amount is a string, then the version that adds 'currency')
    # and then becomes unreachable; the next run executes the frozen batch anyway.
    helpers.set_compatibility(subject, "NONE")  # the registry's BACKWARD rule would refuse the string amount
    unreadable = helpers.register_schema(subject, UNREADABLE)
    v2 = helpers.register_schema(subject, V2)
    stack.env["AIRFLOW_CONN_SCHEMA_REGISTRY_DEFAULT"] = helpers.registry_connection(
        f"http://127.0.0.1:{helpers.free_port()}/apis/ccompat/v7")
    run = stack.run_dag(dag_id)
    assert run.state == "success" and run.task_states["ingest"] == "success", run.log[-3000:]
    assert "was planned but never committed; executing it again" in run.log
    assert "on the Spark Connect server" in run.log and "Spark-Submit cmd" not in run.log
    assert helpers.query(table, "SELECT payment_id, amount, ingest_batch_id AS b FROM t ORDER BY payment_id") == [
        {"payment_id": i, "amount": i * 1.5, "b": 1} for i in range(6)]
    errors = [r["error"] for r in helpers.query(dead_letters, "SELECT error FROM t ORDER BY kafka_offset")]
    assert len(errors) == 4
    for error, expected in zip(errors, ["magic byte is 5", "shorter than the 5-byte Confluent header",
                                        "schema id 424242 is not a version of subject",
                                        f"does not decode with schema id {v1}"], strict=True):
        assert expected in error, error

    # 3. The registry is back; records of every version: the reader (the latest, v2) adds the column
    # 'currency', and the version whose amount is a string cannot be read into it: a dead letter.
    stack.env["AIRFLOW_CONN_SCHEMA_REGISTRY_DEFAULT"] = helpers.registry_connection(schema_registry)
    helpers.produce_values(topic, [helpers.avro_value(v1, V1, {"payment_id": 6, "amount": 9.0}),
                                   helpers.avro_value(v2, V2, {"payment_id": 7, "amount": 10.5, "currency": "EUR"}),
                                   helpers.avro_value(unreadable, UNREADABLE, {"payment_id": 8, "amount": "ten"})])
    run = stack.run_dag(dag_id)
    assert run.state == "success", run.log[-3000:]
    assert helpers.query(table, "SELECT payment_id, currency, ingest_batch_id AS b FROM t WHERE payment_id >= 5 "
                                "ORDER BY payment_id") == [{"payment_id": 5, "currency": None, "b": 1},
                                                           {"payment_id": 6, "currency": None, "b": 2},
                                                           {"payment_id": 7, "currency": "EUR", "b": 2}]
    # Exactly once: every Kafka record is in the output or the dead letters, once.
    late = helpers.query(dead_letters, "SELECT error, ingest_batch_id AS b FROM t WHERE ingest_batch_id = 2")
    assert len(late) == 1 and f"schema id {unreadable} (version 2) cannot be read into the reader schema" in \
        late[0]["error"] and "field 'amount'" in late[0]["error"], late
    for name in (table, dead_letters):
        total = helpers.query(name, "SELECT COUNT(*) AS n, COUNT(DISTINCT (kafka_partition, kafka_offset)) AS u FROM t")
        assert total[0]["n"] == total[0]["u"], f"duplicates in {name}: {total}"
    counted = helpers.query(table, "SELECT COUNT(*) AS n FROM t")[0]["n"] + helpers.query(
        dead_letters, "SELECT COUNT(*) AS n FROM t")[0]["n"]
    assert counted == sum(helpers.end_offsets(topic).values()) == 8 + 5
