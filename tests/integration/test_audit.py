"""`tidemark audit` (issue 27 item 2) on a pipeline ingested from the real broker: clean after two batches
(exit 0 through the CLI), then each kind of damage injected into the output with delta-rs and named by the
audit (exit 4): a duplicated file, a deleted file, a row from outside every committed range. `--verify-sample`
reads ranges again from Kafka: a raw pipeline's value bytes by checksum, a JSON or Avro pipeline's typed values
decoded again in Spark (the session-wide SparkSession stands in for the CLI's spark-submit job)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from tests import helpers
from tidemark.batch.execute import execute_batch
from tidemark.batch.prepare import prepare_batch
from tidemark.config.pipeline import parse_pipeline

pytestmark = pytest.mark.integration

TIDEMARK = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "tidemark")


def props() -> dict[str, str]:
    return {"bootstrap.servers": helpers.bootstrap()}


def raw_pipeline(topic: str):
    return parse_pipeline({"name": topic, "topics": [topic], "table": topic}, "test")


@pytest.fixture(scope="module")
def ingested_once(kafka_bootstrap, spark, tmp_path_factory) -> tuple[str, Path, Path]:
    """A pipeline of 2 partitions after two committed batches (10 + 6 records), ingested once for the module
    rather than once for each of its six tests (two Spark batches each): the topic, its pipelines folder and the
    lake that holds the output and the ledger. The tests damage copies of that lake (``ingested``), never it."""
    topic = helpers.create_topic(helpers.unique("audit"), partitions=2)
    base = tmp_path_factory.mktemp("audit")
    folder, lake = base / "pipelines", base / "lake"
    folder.mkdir()
    (folder / f"{topic}.yaml").write_text(f"name: {topic}\ntopics: [{topic}]\ntable: {topic}\n")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TIDEMARK_LAKE_ROOT", str(lake))
        env.delenv("TIDEMARK_LEDGER_URI", raising=False)
        config = raw_pipeline(topic)
        helpers.produce(topic, 10)
        execute_batch(spark, prepare_batch(config, props()), props())
        helpers.produce(topic, 6, start=10)
        execute_batch(spark, prepare_batch(config, props()), props())
    return topic, folder, lake


@pytest.fixture
def ingested(ingested_once, lake):
    """The module's ingested pipeline on a lake of this test's own: a copy of the output table and the ledger, as
    the two batches left them (Delta's logs name their files relative to the table, so the copy is the same
    tables), the pipeline file and the environment of a `tidemark` process on that lake."""
    topic, folder, original = ingested_once
    shutil.copytree(original, lake)
    return topic, raw_pipeline(topic).table_uri, helpers.service_env(folder, lake)


def audit(env: dict, topic: str) -> tuple[int, dict]:
    done = subprocess.run([TIDEMARK, "audit", topic, "--json"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 4), done.stderr
    return done.returncode, json.loads(done.stdout)


def rows_of(table_uri: str, where: str) -> pa.Table:
    """Rows of the output as delta-rs reads them, in the table's own schema (ready to append)."""
    table = DeltaTable(table_uri)
    read = pa.table(QueryBuilder().register("t", table).execute(f"SELECT * FROM t WHERE {where}").read_all())
    return read.select(table.schema().to_arrow().names).cast(pa.schema(table.schema().to_arrow()))


def test_a_clean_pipeline_passes_and_the_human_output_says_so(ingested):
    topic, table, env = ingested
    code, report = audit(env, topic)
    assert code == 0, report
    assert report == {"pipeline": topic, "table": report["table"], "checked_ranges": 4, "records": 16,
                      "duplicates": [], "duplicated_offsets": 0, "missing": [], "outside": [], "outside_rows": 0,
                      "in_both": [], "in_both_rows": 0, "ok": True}
    human = subprocess.run([TIDEMARK, "audit", topic], env=env, capture_output=True, text=True, timeout=300)
    assert human.returncode == 0 and "ok: 4 committed ranges, 16 records" in human.stdout, human.stdout


def test_a_duplicated_file_is_named_offset_by_offset(ingested):
    topic, table, env = ingested
    copied = rows_of(table, "ingest_batch_id = 2 AND kafka_partition = 0")
    write_deltalake(table, copied, mode="append")
    code, report = audit(env, topic)
    assert code == 4 and report["ok"] is False
    offsets = sorted(copied.column("kafka_offset").to_pylist())
    assert report["duplicates"] == [{"topic": topic, "partition": 0, "offset": o, "count": 2} for o in offsets]
    assert report["duplicated_offsets"] == len(offsets) == 3
    assert report["missing"] == [] and report["outside"] == []


def test_a_deleted_file_is_named_as_its_range_missing_records(ingested):
    topic, table, env = ingested
    DeltaTable(table).delete("ingest_batch_id = 1 AND kafka_partition = 1")
    code, report = audit(env, topic)
    assert code == 4
    assert report["missing"] == [{"topic": topic, "partition": 1, "start": 0, "end": 5, "expected": 5, "found": 0,
                                  "batch_id": 1}]
    assert report["duplicates"] == [] and report["outside"] == []
    human = subprocess.run([TIDEMARK, "audit", topic], env=env, capture_output=True, text=True, timeout=300)
    assert human.returncode == 4 and "1 ranges missing records" in human.stdout, human.stdout


def test_a_row_from_outside_every_committed_range_is_named(ingested):
    topic, table, env = ingested
    row = rows_of(table, "ingest_batch_id = 2 AND kafka_partition = 1 AND kafka_offset = 5")
    stray = row.set_column(row.schema.get_field_index("kafka_offset"), row.schema.field("kafka_offset"),
                           pa.array([1000], row.schema.field("kafka_offset").type))
    write_deltalake(table, stray, mode="append")
    code, report = audit(env, topic)
    assert code == 4
    assert report["outside"] == [{"topic": topic, "partition": 1, "offset": 1000, "batch_id": 2}]
    assert report["outside_rows"] == 1 and report["duplicates"] == [] and report["missing"] == []


def test_an_unknown_pipeline_is_refused(ingested):
    _, _, env = ingested
    done = subprocess.run([TIDEMARK, "audit", "no-such-pipeline"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2 and "no-such-pipeline" in done.stderr, done.stderr


def test_a_sample_read_again_from_kafka_matches_until_a_value_is_changed_in_the_output(ingested):
    topic, table, env = ingested
    done = subprocess.run([TIDEMARK, "audit", topic, "--json", "--verify-sample", "10"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["sample"] == {"requested": 10, "verified": 4, "not_retained": 0,
                                                 "values_compared": True, "mismatches": []}
    DeltaTable(table).update(predicate="kafka_partition = 0 AND kafka_offset = 6",
                             updates={"value": "arrow_cast('tampered', 'Binary')"})
    code, report = audit(env, topic)
    assert code == 0 and "sample" not in report  # the counts cannot see it
    done = subprocess.run([TIDEMARK, "audit", topic, "--verify-sample", "10"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 4, done.stderr
    assert "sampled ranges that differ from Kafka" in done.stdout and "4 sampled ranges read again" in done.stdout
    line = next(x for x in done.stdout.splitlines() if x.startswith(topic))
    assert line.split() == [topic, "0", "5", "8", "2", "3", "3"], done.stdout


# --- a typed pipeline: the sample decodes again with the ingest decoder (Spark) and compares values ---------

JSON_SCHEMA = {"order_id": "bigint", "amount": "double", "note": "string?"}


@pytest.fixture
def ingested_json(kafka_bootstrap, spark, lake):
    """A JSON pipeline of 2 partitions after one committed batch of 10 good records (5 per partition) and a
    dead letter (partition 1, offset 5)."""
    topic = helpers.create_topic(helpers.unique("audit-json"), partitions=2)
    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic, "value_format": "json",
                             "value_schema": JSON_SCHEMA}, "test")
    helpers.produce(topic, 10)
    helpers.produce_values(topic, [b"{not json"], partition=1)
    execute_batch(spark, prepare_batch(config, props()), props())
    return config


def sample_of(spark, config, count: int = 10) -> dict:
    """`--verify-sample` as the CLI runs it, with the test's SparkSession in place of a spark-submit job."""
    from tidemark import settings
    from tidemark.audit.sample import verify_sample
    from tidemark_spark.audit_decode import compare

    return verify_sample(config, props(), settings.ledger_uri(), None, count,
                         values=lambda check: compare(spark, check, props()))


def test_a_typed_value_changed_in_the_output_is_found_by_the_sample_column_and_offset(ingested_json, spark):
    config = ingested_json
    assert sample_of(spark, config) == {"requested": 10, "verified": 2, "not_retained": 0, "values_compared": True,
                                        "mismatches": []}  # the dead letter too: in its table, bytes and all
    DeltaTable(config.table_uri).update(predicate="kafka_partition = 0 AND kafka_offset = 3",
                                        updates={"amount": "amount + 1"})
    assert sample_of(spark, config)["mismatches"] == [{
        "topic": config.name, "partition": 0, "start": 0, "end": 5, "batch_id": 1, "kafka_records": 5,
        "table_records": 5, "checksums_differ": True, "values_differ": True, "differing_records": 1,
        "differences": [{"offset": 3, "kafka": "output", "table": "output", "columns": ["amount"],
                         "reason": "values differ: amount"}]}]


AVRO_V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "order_id", "type": "long"}, {"name": "amount", "type": "double"}]}
AVRO_V2 = {**AVRO_V1, "fields": [*AVRO_V1["fields"], {"name": "region", "type": ["null", "string"], "default": None}]}


def test_avro_batches_compare_with_their_own_frozen_schemas_and_a_changed_field_is_found(
        kafka_bootstrap, schema_registry, spark, lake):
    """Batch 1 decodes with schema v1 (no `region`: null in the table), batch 2 with v2; a bad record is a dead
    letter. One row's `region` changed: only batch 2's range differs, in that column."""
    from tidemark.formats.schema_registry import RegistryClient

    topic = helpers.create_topic(helpers.unique("audit-avro"), partitions=1)
    registry = RegistryClient(schema_registry)
    v1 = helpers.register_schema(f"{topic}-value", AVRO_V1)
    helpers.produce_values(topic, [helpers.avro_value(v1, AVRO_V1, {"order_id": i, "amount": i / 2}) for i in range(3)]
                           + [b"\x00\x00"])
    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic, "value_format": "avro"}, "test")
    execute_batch(spark, prepare_batch(config, props(), schemas=registry), props())
    v2 = helpers.register_schema(f"{topic}-value", AVRO_V2)
    helpers.produce_values(topic, [helpers.avro_value(v2, AVRO_V2, {"order_id": i, "amount": 1.0, "region": "eu"})
                                   for i in range(3)])
    execute_batch(spark, prepare_batch(config, props(), schemas=registry), props())
    DeltaTable(config.table_uri).update(predicate="kafka_offset = 5", updates={"region": "'us'"})
    sample = sample_of(spark, config)
    assert (sample["verified"], sample["values_compared"]) == (2, True)  # batch 1's range is compared too: clean
    assert [(m["batch_id"], m["start"], m["end"], m["differing_records"]) for m in sample["mismatches"]] == [
        (2, 4, 7, 1)]
    assert sample["mismatches"][0]["differences"] == [{"offset": 5, "kafka": "output", "table": "output",
                                                       "columns": ["region"], "reason": "values differ: region"}]
