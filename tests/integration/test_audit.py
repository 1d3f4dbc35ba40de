"""`tidemark audit` (issue 27 item 2) on a pipeline ingested from the real broker: clean after two batches
(exit 0 through the CLI), then each kind of damage injected into the output with delta-rs and named by the
audit (exit 4): a duplicated file, a deleted file, a row from outside every committed range."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from tests import helpers
from tidemark.batch.execute import execute_batch
from tidemark.batch.prepare import prepare_batch
from tidemark.config import parse_pipeline

pytestmark = pytest.mark.integration

TIDEMARK = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "tidemark")


def props() -> dict[str, str]:
    return {"bootstrap.servers": helpers.bootstrap()}


@pytest.fixture
def ingested(kafka_bootstrap, spark, lake, tmp_path):
    """A pipeline of 2 partitions after two committed batches (10 + 6 records), its pipeline file and the
    environment of a `tidemark` process on the same lake."""
    topic = helpers.create_topic(helpers.unique("audit"), partitions=2)
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / f"{topic}.yaml").write_text(f"name: {topic}\ntopics: [{topic}]\ntable: {topic}\n")
    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic}, "test")
    helpers.produce(topic, 10)
    execute_batch(spark, prepare_batch(config, props()), props(), "read_committed")
    helpers.produce(topic, 6, start=10)
    execute_batch(spark, prepare_batch(config, props()), props(), "read_committed")
    return topic, config.table_uri, helpers.service_env(folder, lake)


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
