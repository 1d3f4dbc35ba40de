"""The replay DAG through Airflow: a dry run changes nothing, an applied reset moves the position
with an audited row, and the next ingest run re-reads without duplicating."""

from __future__ import annotations

import pytest

from tests import helpers
from tidemark.kafka.offsets import TopicPartition as TP
from tidemark.ledger.store import Ledger

pytestmark = pytest.mark.e2e


def test_replay_dag_dry_run_then_execute_then_ingest_without_duplicates(stack, spark_connect):
    stack.use_spark_connect(spark_connect)  # the ingest jobs on the warm path (the replay DAG is the subject)
    topic = helpers.create_topic(helpers.unique("replaydag"), partitions=2)
    ingest_dag = stack.add_pipeline(topic, [topic])
    replay_dag = f"tidemark_replay__{topic}"
    ledger = Ledger(str(stack.lake / "_tidemark" / "offsets"))
    helpers.produce(topic, 12)
    assert stack.run_dag(ingest_dag).task_states["ingest"] == "success"

    dry = stack.run_dag(replay_dag, {"scenario": "shift-by", "shift": -4, "scope": [f"{topic}:0"]})
    assert dry.state == "success" and "DRY RUN, nothing changed" in dry.log
    assert ledger.state(topic).positions == {TP(topic, 0): 6, TP(topic, 1): 6}

    failed = stack.run_dag(replay_dag, {"scenario": "to-earliest", "dry_run": False})
    assert failed.state == "failed" and "needs a reason" in failed.log
    assert ledger.state(topic).positions == {TP(topic, 0): 6, TP(topic, 1): 6}

    applied = stack.run_dag(replay_dag, {"scenario": "shift-by", "shift": -4, "scope": [f"{topic}:0"],
                                         "dry_run": False, "reason": "re-read after a parser fix"})
    assert applied.state == "success" and "reset APPLIED" in applied.log
    assert ledger.state(topic).positions == {TP(topic, 0): 2, TP(topic, 1): 6}
    reset = [r for r in ledger.rows(topic) if r.kind == "reset"]
    assert [(r.partition, r.start_offset, r.end_offset, r.reason) for r in reset] == [
        (0, 6, 2, "re-read after a parser fix")]
    assert reset[0].dag_run_id.startswith(f"{replay_dag}/")

    assert stack.run_dag(ingest_dag).task_states["ingest"] == "success"
    assert helpers.query(str(stack.lake / topic), "SELECT COUNT(*) AS n, COUNT(DISTINCT (kafka_partition, "
                                                  "kafka_offset)) AS u FROM t") == [{"n": 12, "u": 12}]
    assert ledger.state(topic).positions == {TP(topic, 0): 6, TP(topic, 1): 6}
