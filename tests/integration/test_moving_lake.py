"""Object storage, round 2 (issue 24), through `tidemark run` as a user runs it, on the local S3 server: a
table on a bucket that does not exist is refused at plan with nothing frozen, and runs once the typo is
fixed; a lake root that moved without its ledger is refused, and `tidemark ledger move` brings the ledger
along; a batch frozen by a run that died although its state says it is running is taken over with
`tidemark run --take-over --reason`. Every run executes on the warm path (the test run's Spark Connect
server, which serves the local S3 server too), and every record lands exactly once."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests import helpers
from tidemark import storage
from tidemark.ledger.store import Ledger

pytestmark = pytest.mark.integration

TIDEMARK = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "tidemark")


def store() -> storage.ObjectStore:
    return storage.ObjectStore(helpers.S3_ACCESS_KEY, helpers.S3_SECRET_KEY, endpoint_url=helpers.s3_endpoint())


@pytest.fixture
def pipeline(kafka_bootstrap, spark_connect, tmp_path):
    """A topic, the folder of its pipeline file (written by each test), a lake root on S3 and the
    environment of a `tidemark` process with the warm path as its Spark connection."""
    topic = helpers.create_topic(helpers.unique("moving"), partitions=2)
    folder = tmp_path / "pipelines"
    folder.mkdir()
    lake = helpers.s3_lake(topic)
    env = helpers.service_env(folder, lake, AIRFLOW_CONN_AWS_DEFAULT=helpers.aws_connection(),
                              AIRFLOW_CONN_SPARK_DEFAULT=helpers.spark_connect_connection(spark_connect))
    return topic, folder, lake, env


def write_pipeline(folder: Path, topic: str, table: str) -> None:
    (folder / f"{topic}.yaml").write_text(f"name: {topic}\ntopics: [{topic}]\ntable: {table}\n")


def tidemark(env: dict, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([TIDEMARK, *args], env={**env, **extra}, capture_output=True, text=True, timeout=600)


def exactly_once(table: str) -> tuple[int, int]:
    """(records, distinct Kafka coordinates) of an output table."""
    row = helpers.query(storage.delta_rs_uri(table), "SELECT COUNT(*) AS n, COUNT(DISTINCT kafka_partition || ':' "
                                                     "|| kafka_offset) AS d FROM t")[0]
    return row["n"], row["d"]


def test_a_table_on_a_missing_bucket_is_refused_at_plan_then_runs_once_the_typo_is_fixed(pipeline):
    topic, folder, lake, env = pipeline
    helpers.produce(topic, 40)
    missing = f"s3a://no-such-bucket-{topic.replace('_', '-')}/{topic}"
    write_pipeline(folder, topic, missing)
    refused = tidemark(env, "run", topic)
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-3000:]
    message = refused.stderr
    assert f"pipeline '{topic}'" in message and missing in message and "does not exist" in message, message
    assert "Traceback" not in message and "Nothing was frozen or written" in message, message
    assert Ledger(f"{lake}/_tidemark/offsets", store()).rows(topic) == []  # nothing frozen

    write_pipeline(folder, topic, topic)  # the typo fixed: the table under the lake root
    fixed = tidemark(env, "run", topic)
    assert fixed.returncode == 0, fixed.stdout[-2000:] + fixed.stderr[-3000:]
    assert exactly_once(f"{lake}/{topic}") == (40, 40)


def test_a_lake_moved_without_its_ledger_is_refused_and_ledger_move_brings_it_along(pipeline):
    topic, folder, lake, env = pipeline
    table = f"{helpers.s3_lake(topic)}/{topic}"  # an absolute location: it stays where it is
    write_pipeline(folder, topic, table)
    helpers.produce(topic, 30)
    first = tidemark(env, "run", topic)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]

    moved = helpers.s3_lake(f"{topic}_moved")  # the lake root moves; the ledger does not come along
    env = {**env, "TIDEMARK_LAKE_ROOT": moved}
    helpers.produce(topic, 10, start=30)
    refused = tidemark(env, "run", topic)
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-3000:]
    for words in (table, f"{moved}/_tidemark/offsets", "holds batches 1..1", "tidemark ledger move"):
        assert words in refused.stderr, refused.stderr
    assert exactly_once(table) == (30, 30)

    copied = tidemark(env, "ledger", "move", topic, "--from", f"{lake}/_tidemark/offsets")
    assert copied.returncode == 0 and "rows copied" in copied.stdout, copied.stdout + copied.stderr
    again = tidemark(env, "ledger", "move", topic, "--from", f"{lake}/_tidemark/offsets")
    assert again.returncode == 2 and "would mix two histories" in again.stderr, again.stderr
    resumed = tidemark(env, "run", topic)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-3000:]
    assert exactly_once(table) == (40, 40)
    ledger = Ledger(f"{moved}/_tidemark/offsets", store())
    assert {(r.batch_id, r.status) for r in ledger.rows(topic)} == {(1, "committed"), (2, "committed")}


def test_a_batch_of_a_dead_run_that_still_looks_alive_is_taken_over_with_a_reason(pipeline):
    from tidemark.batch import prepare_batch
    from tidemark.config.pipeline import find_pipeline

    topic, folder, lake, env = pipeline
    write_pipeline(folder, topic, topic)
    helpers.produce(topic, 20)
    # A run that froze a batch and was killed with its process group: Airflow still says it is running.
    config = find_pipeline(topic, folder)
    config = config.model_copy(update={"table": f"{lake}/{topic}"})
    frozen = prepare_batch(config, {"bootstrap.servers": helpers.bootstrap()}, owner="manual__killed",
                           ledger_uri=f"{lake}/_tidemark/offsets", store=store())
    refused = tidemark(env, "run", topic)
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-3000:]
    assert "manual__killed" in refused.stderr and "--take-over --reason" in refused.stderr, refused.stderr
    no_reason = tidemark(env, "run", topic, "--take-over")
    assert no_reason.returncode == 2 and "needs --reason" in no_reason.stderr, no_reason.stderr

    taken = tidemark(env, "run", topic, "--take-over", "--reason", "its worker was killed")
    assert taken.returncode == 0, taken.stdout[-2000:] + taken.stderr[-3000:]
    assert exactly_once(f"{lake}/{topic}") == (20, 20)
    rows = Ledger(f"{lake}/_tidemark/offsets", store()).rows(topic)
    assert {(r.batch_id, r.status) for r in rows} == {(frozen.batch_id, "committed")}
    assert all("taken over from 'manual__killed'" in r.reason and "its worker was killed" in r.reason for r in rows)
    history = json.loads(tidemark(env, "offsets", "history", topic, "--json").stdout)
    assert {r["reason"] for r in history} == {rows[0].reason}


def test_a_batch_frozen_for_one_location_is_executed_where_the_table_is_configured_when_it_is_recovered(pipeline):
    """Decided and documented (docs/OPERATIONS.md, "Moving a table or the lake"): recovery rebuilds the
    frozen batch's plan from the pipeline as configured now, so the same frozen ranges land at the new
    location, once."""
    import socket

    from tidemark.batch import prepare_batch
    from tidemark.config.pipeline import parse_pipeline

    topic, folder, lake, env = pipeline
    old, new = f"{lake}/{topic}_old", f"{lake}/{topic}_new"
    helpers.produce(topic, 12)
    config = parse_pipeline({"name": topic, "topics": [topic], "table": old}, "test")
    gone = f"cli:{socket.gethostname()}:999999999:0"  # a CLI run whose process is gone
    frozen = prepare_batch(config, {"bootstrap.servers": helpers.bootstrap()}, owner=gone,
                           ledger_uri=f"{lake}/_tidemark/offsets", store=store())
    write_pipeline(folder, topic, new)
    recovered = tidemark(env, "run", topic)
    assert recovered.returncode == 0 and "(recovered)" in recovered.stdout, recovered.stdout + recovered.stderr[-3000:]
    assert exactly_once(new) == (12, 12)
    assert helpers.query_or_none(storage.delta_rs_uri(old)) is None
    rows = Ledger(f"{lake}/_tidemark/offsets", store()).rows(topic)
    assert {(r.batch_id, r.status) for r in rows} == {(frozen.batch_id, "committed")}
