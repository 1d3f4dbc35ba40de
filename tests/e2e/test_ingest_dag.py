"""Produce -> run the ingest DAG through Airflow -> check the output, the ledger and the CLI."""

from __future__ import annotations

import json

import pytest

from tests import helpers

pytestmark = pytest.mark.e2e


def output_stats(table: str) -> dict:
    return helpers.query(table, "SELECT COUNT(*) AS n, COUNT(DISTINCT (kafka_topic, kafka_partition, kafka_offset)) "
                                "AS uniq FROM t")[0]


def lineage_events(airflow_home, job: str, event_type: str, count: int, timeout: float = 60) -> list[dict]:
    """The OpenLineage events of ``job`` of one type in the session's file transport, once there are
    ``count`` of them (the listener emits from a thread of its own, after the task)."""
    from tests.e2e.conftest import OPENLINEAGE_FILE

    found: list[dict] = []

    def enough() -> list[dict]:
        path = airflow_home / OPENLINEAGE_FILE
        events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
        found[:] = [e for e in events if e.get("job", {}).get("name") == job and e.get("eventType") == event_type]
        return found if len(found) >= count else []

    return helpers.wait_until(enough, timeout, lambda: f"{count} {event_type} OpenLineage event(s) of {job} "
                                                       f"(found {len(found)})", interval=0.5)


def asset_events(name: str) -> list[tuple[str, str, dict]]:
    """The events of the asset ``name`` in the session's metadata DB: (DAG id, run id, extra)."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        events = (session.query(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                  .filter(AssetModel.name == name).order_by(AssetEvent.id).all())
        return [(e.source_dag_id, e.source_run_id, dict(e.extra or {})) for e in events]


def test_incremental_runs_through_airflow_ingest_exactly_what_was_produced(stack, airflow_home, spark_connect):
    topic = helpers.create_topic(helpers.unique("e2e"), partitions=3)
    dag_id = stack.add_pipeline(topic, [topic])
    table = str(stack.lake / topic)

    # 1. first run: everything produced so far, with the real user command (the tier's one
    # `airflow dags test` subprocess; the other runs use dag.test() in the pytest process), its job on
    # the warm path (run 2 is the spark-submit one)
    helpers.produce(topic, 60)
    spark_submit = stack.env["AIRFLOW_CONN_SPARK_DEFAULT"]
    stack.use_spark_connect(spark_connect)
    run = stack.run_dag_with_cli(dag_id)
    stack.env["AIRFLOW_CONN_SPARK_DEFAULT"] = spark_submit
    assert run.state == "success"
    assert "on the Spark Connect server" in run.log and "Spark-Submit cmd" not in run.log
    assert run.task_states == {"plan": "success", "ingest": "success"}
    assert output_stats(table) == {"n": 60, "uniq": 60}
    shown = stack.tidemark("offsets", "show", topic, "--json")
    assert shown.returncode == 0, shown.stderr
    offsets = json.loads(shown.stdout)
    ends = helpers.end_offsets(topic)
    assert [(o["partition"], o["committed_offset"], o["latest_offset"], o["lag"], o["last_batch_id"])
            for o in offsets] == [(p, ends[p], ends[p], 0, 1) for p in sorted(ends)]
    first = {"ends": ends, "version": helpers.table_version(table), "run_id": run.run_id}

    # 2. more records: only the new ones are added, as batch 2
    helpers.produce(topic, 25, start=60)
    # with Tidemark's own Spark configuration folder, as a user gets it (`make test` points SPARK_CONF_DIR
    # at an empty folder, so that its JVMs can share a class-data archive: devkit/spark_cds.py)
    test_run_conf_dir = stack.env.pop("SPARK_CONF_DIR", None)
    run = stack.run_dag(dag_id)
    if test_run_conf_dir:
        stack.env["SPARK_CONF_DIR"] = test_run_conf_dir
    assert run.task_states["ingest"] == "success"
    assert "Spark-Submit cmd" in run.log  # so its absence below means no launch, not an uncaptured log
    # the job's own progress is in the task log; the Kafka client's per-seek INFO lines are not
    # (tidemark_spark/conf/log4j2.properties: about 20,000 of them for a 2M-record batch)
    assert "batch 2 committed in the ledger" in run.log and "Running Spark version" in run.log
    assert "INFO SubscriptionState" not in run.log and "INFO ConsumerConfig" not in run.log
    assert "total lag: 0" in run.log  # the ingest task reported after its commit
    assert output_stats(table) == {"n": 85, "uniq": 85}
    assert helpers.query(table, "SELECT COUNT(*) AS n FROM t WHERE ingest_batch_id = 2")[0]["n"] == 25
    offsets = json.loads(stack.tidemark("offsets", "show", topic, "--json").stdout)
    ends = helpers.end_offsets(topic)
    assert {o["partition"]: o["committed_offset"] for o in offsets} == ends
    second = {"ends": ends, "version": helpers.table_version(table), "run_id": run.run_id}

    # 3. nothing new: no Spark launch, the output table is untouched
    version = helpers.table_version(table)
    run = stack.run_dag(dag_id)
    assert run.state == "success"
    assert run.task_states == {"plan": "success", "ingest": "skipped"}
    assert "nothing to read" in run.log and "total lag: 0" in run.log  # the plan task reported the empty run
    assert "Spark-Submit cmd" not in run.log
    assert helpers.table_version(table) == version
    assert output_stats(table) == {"n": 85, "uniq": 85}

    # 4. each committed batch (not the empty run) is an event of the table's asset, saying what arrived
    def expected(batch_id, since, now):
        ranges = [{"topic": topic, "partition": p, "start": since.get(p, 0), "end": end,
                   "records": end - since.get(p, 0), "dead_letters": 0} for p, end in sorted(now["ends"].items())]
        return {"pipeline": topic, "batch_id": batch_id, "kind": "batch", "table": table, "ranges": ranges,
                "records": sum(r["records"] for r in ranges), "filtered": 0, "dead_letters": 0,
                "delta_version": now["version"]}

    assert asset_events(f"tidemark/{topic}") == [
        (dag_id, first["run_id"], expected(1, {}, first)),
        (dag_id, second["run_id"], expected(2, first["ends"], second))]

    # 5. and an OpenLineage run of the ingest task (the provider's listener, file transport): the topic
    # in, named as the OpenLineage naming spec says, the table out, the batch as a run facet
    completed = lineage_events(airflow_home, f"{dag_id}.ingest", "COMPLETE", count=2)
    assert [([(d["namespace"], d["name"]) for d in e["inputs"]], [(d["namespace"], d["name"]) for d in e["outputs"]])
            for e in completed] == [([(f"kafka://{helpers.bootstrap()}", topic)], [("file", table)])] * 2
    facets = sorted((e["run"]["facets"]["tidemark_batch"] for e in completed), key=lambda f: f["batch_id"])
    keys = ("pipeline", "batch_id", "kind", "ranges", "records", "dead_letters", "delta_version")
    assert [{k: f[k] for k in keys} for f in facets] == [
        {k: expected(1, {}, first)[k] for k in keys}, {k: expected(2, first["ends"], second)[k] for k in keys}]


def test_a_failing_spark_job_shows_the_spark_error_in_the_task_log_and_commits_nothing(stack):
    topic = helpers.create_topic(helpers.unique("badconf"), partitions=1)
    dag_id = stack.add_pipeline(topic, [topic], retries=0, spark_conf={"spark.sql.shuffle.partitions": "plenty"})
    helpers.produce(topic, 5)
    run = stack.run_dag(dag_id)
    assert run.state == "failed"
    assert run.task_states["plan"] == "success" and run.task_states["ingest"] == "failed"
    # Spark's own words in the task log, not just an exit code
    assert "The value 'plenty' in the config \"spark.sql.shuffle.partitions\" is invalid" in run.log, run.log[-4000:]
    assert f"pipeline '{topic}': batch 1 failed" in run.log
    assert helpers.query_or_none(str(stack.lake / topic)) is None
    offsets = json.loads(stack.tidemark("offsets", "show", topic, "--json").stdout)
    assert [o["committed_offset"] for o in offsets] == [None]


def test_the_warm_path_runs_the_ingest_task_on_a_spark_connect_server_exactly_once(stack, spark_connect):
    """A `spark_connect` Spark connection: the ingest task sends the batch to the long-running server
    instead of starting spark-submit; same plan, same ledger commit, same output."""
    stack.use_spark_connect(spark_connect)
    topic = helpers.create_topic(helpers.unique("warm"), partitions=3)
    dag_id = stack.add_pipeline(topic, [topic], value_format="json",
                                value_schema={"order_id": "bigint", "amount": "double"})
    helpers.produce(topic, 90)
    helpers.produce_values(topic, [b"{not json"], partition=2)
    run = stack.run_dag(dag_id)
    assert run.state == "success", run.log[-4000:]
    assert "on the Spark Connect server" in run.log and "spark-submit --master" not in run.log
    assert "batch 1 committed 90 records and 1 dead letters" in run.log
    assert output_stats(str(stack.lake / topic)) == {"n": 90, "uniq": 90}
    helpers.produce(topic, 30, start=90)
    assert stack.run_dag(dag_id).state == "success"
    assert output_stats(str(stack.lake / topic)) == {"n": 120, "uniq": 120}
    assert helpers.query(str(stack.lake / f"{topic}_dead_letters"), "SELECT COUNT(*) AS n FROM t") == [{"n": 1}]


def test_the_cli_reads_a_connection_stored_only_in_airflows_metadata_db(stack):
    """A connection created in the UI (here `airflow connections add`) lives only in the metadata DB:
    the DAGs see it, and so must the CLI, which reads the same Airflow Connections (the guide's
    contract). Without it defined anywhere, the CLI's error says where to define it."""
    topic = helpers.create_topic(helpers.unique("uiconn"), partitions=2)
    helpers.produce(topic, 4)
    stack.add_pipeline(topic, [topic], kafka_conn_id="kafka_from_the_ui")
    missing = stack.tidemark("offsets", "show", topic, "--json")
    assert missing.returncode == 2 and "connection 'kafka_from_the_ui' is not defined" in missing.stderr

    added = stack.airflow("connections", "add", "kafka_from_the_ui", "--conn-type", "kafka",
                          "--conn-extra", json.dumps({"bootstrap.servers": helpers.bootstrap()}))
    assert added.returncode == 0, added.stderr[-2000:]
    assert "AIRFLOW_CONN_KAFKA_FROM_THE_UI" not in stack.env
    shown = stack.tidemark("offsets", "show", topic, "--json")
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert sorted((o["partition"], o["latest_offset"], o["lag"]) for o in json.loads(shown.stdout)) == [
        (0, 2, 2), (1, 2, 2)]
