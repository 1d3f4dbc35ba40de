"""`make demo`, the README's first command: scripts/demo.sh as `make demo` runs it (after `make setup`),
against the session's broker (demo.sh's `scripts/kafka.sh up` finds it running), the session's Airflow
home and a private lake. It produces 1,000 orders, runs the ingest DAG with `airflow dags test`, produces
500 more and runs it again, then prints the ledger's batches and `tidemark offsets show orders`.

One difference from a user's run, to keep the suite's time: the Spark connection is the test run's
Spark Connect server (the warm path) instead of `local[2]` by spark-submit, which
tests/e2e/test_ingest_dag.py runs through `airflow dags test`."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests import helpers
from tests.e2e.conftest import AIRFLOW_SETTINGS

ROOT = Path(__file__).resolve().parents[2]


def test_make_demo_runs_the_demo_pipeline_twice_and_reads_only_the_new_records_the_second_time(
        kafka_bootstrap, spark_connect, airflow_home, tmp_path):
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=helpers.bootstrap())
    already = 0 if "orders" not in consumer.topics() else sum(helpers.end_offsets("orders").values())
    consumer.close()  # a broker the demo ran on before (`make kafka-up`) holds older orders: the first batch reads them
    env = helpers.service_env(ROOT / "dags" / "pipelines", tmp_path / "lake", **AIRFLOW_SETTINGS)
    env["AIRFLOW_CONN_SPARK_DEFAULT"] = helpers.spark_connect_connection(spark_connect)
    result = subprocess.run(["bash", "scripts/demo.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=900)
    out = result.stdout
    assert result.returncode == 0, f"make demo failed:\n{out[-4000:]}\n{result.stderr[-4000:]}"
    assert out.count("DAG run finished: success") == 2, out
    assert re.search(rf"batch 1: {already + 1000} records\n\s+batch 2: 500 records\n", out), out
    shown = out[out.index("(tidemark offsets show orders)"):out.index("== where things are")]
    lags = [int(line.split()[4]) for line in shown.splitlines() if re.match(r"\s*orders\s+\d+\s", line)]
    assert lags == [0] * len(helpers.end_offsets("orders")), shown  # every partition of the topic, all read
    assert re.search(r"output table : \S*" + re.escape(str(tmp_path / "lake" / "orders")), out), out
