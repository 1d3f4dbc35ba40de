"""`tidemark dead-letters reprocess` (issue 27 item 3) through the real CLI on the warm path (the Spark
Connect server): dead letters of a JSON pipeline whose schema is then widened are decoded again; the job is
killed -9 between its output commit and its dead-letter update, the same command run again finishes the
entry (every record once in the output, not also a dead letter), and a further run changes nothing.

Avro dead letters (issue 42) go through the same code with the Avro format: the reserve step reads the
subject's schemas from the registry again, and the Spark job's steps run here in-process on the test's
session (the CLI's launch is the JSON test's)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests import helpers
from tidemark import settings
from tidemark.audit.live_table import audit_tables
from tidemark.batch.execute import execute_batch
from tidemark.batch.prepare import prepare_batch
from tidemark.config.pipeline import parse_pipeline
from tidemark.formats.schema_registry import RegistryClient
from tidemark.kafka.offsets import TopicPartition
from tidemark.ledger.store import Ledger
from tidemark.operations.reprocessing import reserve
from tidemark_spark import reprocess as reprocess_job

pytestmark = pytest.mark.integration

TIDEMARK = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "tidemark")
STRICT = {"order_id": "bigint", "amount": "double", "note": "string"}
WIDENED = {**STRICT, "note": "string?"}
NO_NOTE = [json.dumps({"order_id": 100 + i, "amount": 1.5}).encode() for i in range(3)]  # decode once widened
BAD_ID = json.dumps({"order_id": "abc", "amount": 1.0}).encode()  # still bad, for one reason less
NOT_JSON = b"{not json"
NOT_JSON_ERROR = "value is not a JSON object; missing required field 'order_id'; missing required field 'amount'"


def write_pipeline(folder: Path, topic: str, schema: dict) -> None:
    (folder / f"{topic}.yaml").write_text(json.dumps({"name": topic, "topics": [topic], "table": topic,
                                                      "value_format": "json", "value_schema": schema}))


def reprocess(env: dict, topic: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([TIDEMARK, "dead-letters", "reprocess", topic, "--all", "--reason", "note made optional",
                           *extra], env=env, capture_output=True, text=True, timeout=600)


def dead_letters(config) -> dict[int, str]:
    return {r["kafka_offset"]: r["error"] for r in helpers.query(
        config.dead_letter_uri, "SELECT kafka_offset, error FROM t ORDER BY kafka_offset")}


def output(config) -> list[tuple]:
    return [(r["kafka_partition"], r["kafka_offset"], r["order_id"], r["note"], r["ingest_batch_id"])
            for r in helpers.query(config.table_uri, "SELECT * FROM t ORDER BY kafka_partition, kafka_offset")]


def test_dead_letters_are_reprocessed_once_after_a_kill_and_a_second_run_changes_nothing(
        kafka_bootstrap, spark, spark_connect, lake, tmp_path):
    topic = helpers.create_topic(helpers.unique("reprocess"), partitions=2)
    folder = tmp_path / "pipelines"
    folder.mkdir()
    write_pipeline(folder, topic, STRICT)
    props = {"bootstrap.servers": helpers.bootstrap()}
    helpers.produce_values(topic, [json.dumps({"order_id": i, "amount": 2.0, "note": "n"}).encode() for i in range(4)])
    helpers.produce_values(topic, [*NO_NOTE, BAD_ID, NOT_JSON], partition=1)
    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic, "value_format": "json",
                             "value_schema": STRICT}, "test")
    execute_batch(spark, prepare_batch(config, props), props)
    assert dead_letters(config) == {0: "missing required field 'note'", 1: "missing required field 'note'",
                                    2: "missing required field 'note'",
                                    3: "field 'order_id': 'abc' is not a valid bigint; missing required field 'note'",
                                    4: f"{NOT_JSON_ERROR}; missing required field 'note'"}
    ledger = Ledger(settings.ledger_uri())
    before = ledger.state(topic)

    write_pipeline(folder, topic, WIDENED)
    env = helpers.service_env(folder, lake, AIRFLOW_CONN_SPARK_DEFAULT=helpers.spark_connect_connection(spark_connect))
    killed = reprocess({**env, "TIDEMARK_CRASH_AT": "after_output_commit",
                        "TIDEMARK_CRASH_ONCE": str(tmp_path / "crashed")}, topic)
    assert killed.returncode == 1 and "run the same command again" in killed.stderr, killed.stderr[-3000:]
    assert (tmp_path / "crashed").exists()
    # Killed between the two commits: the three records are in the output and still dead letters.
    half = audit_tables(topic, config.table_uri, config.dead_letter_uri, settings.ledger_uri())
    assert half.in_both_rows == 3 and not half.ok and half.duplicated_offsets == 0
    planned = [r for r in ledger.rows(topic) if r.kind == "reprocess"]
    assert [(r.batch_id, r.status, r.partition, r.start_offset, r.end_offset, r.dead_letter_count) for r in planned] \
        == [(2, "planned", 1, 0, 5, 5)]
    assert ledger.state(topic).pending_batch_id is None  # not a batch: ingest runs are not held

    finished = reprocess(env, topic)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "ledger entry 2 (kind 'reprocess'): 3 records written" in finished.stdout, finished.stdout
    good = [(0, o, o, "n", 1) for o in range(4)] + [(1, o, 100 + o, None, 1) for o in range(3)]
    assert output(config) == good
    assert dead_letters(config) == {3: "field 'order_id': 'abc' is not a valid bigint", 4: NOT_JSON_ERROR}
    entry = [r for r in ledger.rows(topic) if r.kind == "reprocess"]
    assert [(r.batch_id, r.status, r.record_count, r.dead_letter_count, r.reason) for r in entry] == [
        (2, "committed", 3, 2, "note made optional")]
    assert entry[0].dag_run_id.startswith("cli:") and entry[0].committed_at is not None
    report = audit_tables(topic, config.table_uri, config.dead_letter_uri, settings.ledger_uri())
    assert report.ok and report.records == 7, report.to_dict()

    versions = helpers.table_version(config.table_uri), helpers.table_version(config.dead_letter_uri)
    again = reprocess(env, topic)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "0 records written" in again.stdout and "2 left as dead letters" in again.stdout, again.stdout
    assert output(config) == good
    assert dead_letters(config) == {3: "field 'order_id': 'abc' is not a valid bigint", 4: NOT_JSON_ERROR}
    assert (helpers.table_version(config.table_uri), helpers.table_version(config.dead_letter_uri)) == versions
    after = ledger.state(topic)
    assert after.positions == before.positions and after.high_water == before.high_water  # no offset moved
    assert after.pending_batch_id is None and after.last_batch_id == 3
    assert audit_tables(topic, config.table_uri, config.dead_letter_uri, settings.ledger_uri()).ok


ORDER_V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "order_id", "type": "long"}, {"name": "amount", "type": "double"}]}
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "region", "type": ["null", "string"],
                                                          "default": None}]}


def test_avro_dead_letters_decode_once_their_schema_is_registered_under_the_subject(kafka_bootstrap, schema_registry,
                                                                                   spark, lake):
    """The producer registered its v2 under a misspelt subject: its records' schema id is not a version of the
    pipeline's subject, so they are dead letters. Once v2 is registered under the subject (the same schema: the
    same id), reprocessing writes them to the output with the added column; a record that is not Avro stays."""
    topic = helpers.create_topic(helpers.unique("reprocess-avro"), partitions=2)
    subject, registry = f"{topic}-value", RegistryClient(schema_registry)
    v1 = helpers.register_schema(subject, ORDER_V1)
    v2 = helpers.register_schema(f"{topic}-vlaue", ORDER_V2)
    helpers.produce_values(topic, [helpers.avro_value(v1, ORDER_V1, {"order_id": i, "amount": 1.0}) for i in range(3)])
    helpers.produce_values(topic, [helpers.avro_value(v2, ORDER_V2, {"order_id": 10, "amount": 2.5, "region": "eu"}),
                                   helpers.avro_value(v2, ORDER_V2, {"order_id": 11, "amount": 3.5, "region": None}),
                                   b"\x00\x00"], partition=1)
    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic, "value_format": "avro"}, "test")
    props = {"bootstrap.servers": helpers.bootstrap()}
    execute_batch(spark, prepare_batch(config, props, schemas=registry), props)
    not_a_version = f"schema id {v2} is not a version of subject '{subject}'"
    short = "value of 2 bytes is shorter than the 5-byte Confluent header"
    errors = dead_letters(config)
    assert sorted(errors) == [0, 1, 2] and not_a_version in errors[0] and not_a_version in errors[1] \
        and short in errors[2], errors

    assert helpers.register_schema(subject, ORDER_V2) == v2  # the fix
    ledger = Ledger(settings.ledger_uri())
    plan = reserve(config, ledger, registry, batch_id=None, reason="v2 registered under its subject", owner="test")
    assert (plan.entry_id, plan.selected, plan.format.add_columns) == (2, {f"{topic}:1": 3}, True)
    assert reprocess_job.execute(spark, plan) == {TopicPartition(topic, 1): (2, 1)}

    rows = helpers.query(config.table_uri, "SELECT kafka_partition AS p, kafka_offset AS o, order_id, amount, region, "
                                           "ingest_batch_id AS b FROM t ORDER BY p, o")
    assert [tuple(r.values()) for r in rows] == [(0, o, o, 1.0, None, 1) for o in range(3)] + [
        (1, 0, 10, 2.5, "eu", 1), (1, 1, 11, 3.5, None, 1)]
    assert list(dead_letters(config)) == [2] and short in dead_letters(config)[2]
    entry = [r for r in ledger.rows(topic) if r.kind == "reprocess"]
    assert [(r.batch_id, r.status, r.record_count, r.dead_letter_count) for r in entry] == [(2, "committed", 2, 1)]
    assert audit_tables(topic, config.table_uri, config.dead_letter_uri, settings.ledger_uri()).ok
