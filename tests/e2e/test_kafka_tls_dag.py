"""The ingest DAG through Airflow over each TLS listener of the three-broker cluster
(scripts/kafka_cluster.sh): SSL (the CA inline as PEM text), mutual TLS (the CA, client certificate and
private key inline as PEM text) and SASL_SSL with SCRAM-SHA-512 (the CA as a path). Each run's output
holds every produced record once. The SSL and SASL_SSL runs take the warm path (the test run's Spark
Connect server: the PEM text travels in the Kafka source's options); the mutual-TLS run is a spark-submit
job with Spark event logs, so that the canary search covers them.

Canaries: the client's private key (its PEM text and every line of it) and the SASL_SSL password appear
zero times in the task logs, XCom and the rest of the metadata DB, the plans, the command lines `ps`
showed during the runs, the Spark event logs and the lake. The searches are test_security.py's (its
control test shows they find a planted canary)."""

from __future__ import annotations

import json

import pytest

from tests import helpers
from tests.e2e.test_security import (
    CommandLines,
    airflow_files,
    event_log_conf,
    event_logs,
    files_with,
    texts_with,
    xcom_values,
)
from tidemark_spark.submit import INGEST_SCRIPT

pytestmark = pytest.mark.e2e

# listener kind -> (CA and client material inline as PEM text?, Spark connection)
CASES = {"ssl": (True, "spark_connect"), "mtls": (True, "spark_default"), "sasl_ssl": (False, "spark_connect")}


def _add_pipelines(stack, cluster, events) -> dict[str, tuple[str, str, list[bytes]]]:
    """Per listener kind: a topic of three partitions with 60 records, its Kafka connection (only in the
    environment, as Airflow reads it) and its pipeline. Returns kind -> (topic, DAG id, produced values)."""
    added = {}
    for kind, (inline, spark_conn) in CASES.items():
        topic = cluster.create_topic(helpers.unique(f"dag_{kind}"), partitions=3)
        produced = cluster.produce(topic, 60)
        stack.env[f"AIRFLOW_CONN_KAFKA_{kind.upper()}"] = json.dumps(
            {"conn_type": "kafka", "extra": cluster.connection(kind, inline)})
        extra = {"spark_conf": event_log_conf(events)} if spark_conn == "spark_default" else {}
        dag_id = stack.add_pipeline(topic, [topic], kafka_conn_id=f"kafka_{kind}", spark_conn_id=spark_conn,
                                    retries=0, **extra)
        added[kind] = (topic, dag_id, produced)
    return added


def _exactly_once(table: str, produced: list[bytes]) -> dict[str, int]:
    """Records in the output, duplicates (a partition and offset more than once) and produced values missing."""
    rows = helpers.query(table, "SELECT kafka_partition AS p, kafka_offset AS o, value FROM t")
    written = [bytes(r["value"]) for r in rows]
    return {"records": len(rows), "duplicates": len(rows) - len({(r["p"], r["o"]) for r in rows}),
            "missing": len(set(produced) - set(written)), "foreign": len(set(written) - set(produced))}


def _secrets(cluster) -> dict[str, str]:
    """The SASL_SSL password, the client key's PEM text and each line of its body."""
    key = cluster.text("client_key")
    lines = [line.strip() for line in key.strip().splitlines()[1:-1] if line.strip()]
    assert lines and "PRIVATE KEY" in key
    return {"sasl_ssl password": cluster.sasl_password(), "client key": key.strip(),
            **{f"client key line {i}": line for i, line in enumerate(lines, 1)}}


def test_dag_runs_over_ssl_mtls_and_sasl_ssl_are_exactly_once_and_leak_no_key_or_password(
        stack, airflow_home, spark_connect, kafka_cluster, tmp_path):
    events = tmp_path / "spark-events"
    events.mkdir()
    stack.env["AIRFLOW_CONN_SPARK_CONNECT"] = helpers.spark_connect_connection(spark_connect)
    stack.env.pop("AIRFLOW_CONN_KAFKA_DEFAULT", None)  # no pipeline here reaches Kafka without TLS
    added = _add_pipelines(stack, kafka_cluster, events)
    sampler = CommandLines()
    sampler.start()
    try:
        runs = {kind: stack.run_dag(dag_id) for kind, (_, dag_id, _) in added.items()}
    finally:
        lines = sampler.stop()

    for kind, run in runs.items():
        topic, _, produced = added[kind]
        assert run.state == "success", f"{kind}: {run.log[-6000:]}"
        assert run.task_states == {"plan": "success", "ingest": "success"}, kind
        assert f"batch 1 committed to {stack.lake / topic}" in run.log, kind
        warm = CASES[kind][1] == "spark_connect"
        assert ("on the Spark Connect server" in run.log) == warm and ("Spark-Submit cmd" in run.log) != warm, kind
        assert _exactly_once(str(stack.lake / topic), produced) == \
            {"records": 60, "duplicates": 0, "missing": 0, "foreign": 0}, kind

    mtls_topic = added["mtls"][0]
    assert any(INGEST_SCRIPT in line and mtls_topic in line for line in lines), \
        f"the ps sampler ({sampler.samples} samples) never saw the mutual-TLS run's spark-submit"
    logged = event_logs(events)
    # the read, through the Kafka source's DataSource V2 scan (spark_io.read_ranges)
    assert any("BatchScan KafkaTable" in text and mtls_topic in text for text in logged.values()), \
        "no Kafka read logged"
    xcoms = {f"{kind}: {name}": value for kind, (_, dag_id, _) in added.items()
             for name, value in xcom_values(airflow_home, dag_id).items()}
    plans = [name for name in xcoms if name.endswith("plan/return_value")]
    assert len(plans) == 3, sorted(xcoms)
    searched = {**xcoms, "ps": "\n".join(lines), **logged, **{f"task logs {k}": r.log for k, r in runs.items()}}
    for what, secret in _secrets(kafka_cluster).items():
        assert texts_with(secret, searched) == {}, what
        assert files_with(secret, [*airflow_files(airflow_home), stack.lake, events]) == {}, what
