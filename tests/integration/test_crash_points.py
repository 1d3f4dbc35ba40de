"""Kill the pipeline with SIGKILL at each step of the protocol, run it again, check the invariants.

Each run is `tidemark run` in its own process (plan, then spark-submit of the ingest job), so the
kill takes the real process down: the planner's, or the Spark driver's."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests import helpers
from tidemark import faults
from tidemark.ledger import Ledger

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
KILLED = -9  # subprocess return code of a process killed by SIGKILL


def tidemark_run(env: dict, pipeline: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(ROOT / ".venv" / "bin" / "tidemark"), "run", pipeline], env=env,
                          capture_output=True, text=True, timeout=600)


def check_invariants(table: str, ledger_uri: str, pipeline: str, topic: str) -> None:
    """Exactly once, contiguous, and committed offsets equal Kafka's end offsets."""
    stats = helpers.query(table, "SELECT COUNT(*) AS n, COUNT(DISTINCT (kafka_topic, kafka_partition, kafka_offset)) "
                                 "AS uniq FROM t")[0]
    assert stats["n"] == stats["uniq"], f"duplicates in the output: {stats}"
    ends = helpers.end_offsets(topic)
    present = {(r["p"]): r["n"] for r in helpers.query(table, "SELECT kafka_partition AS p, COUNT(*) AS n FROM t "
                                                              "GROUP BY kafka_partition")}
    assert present == ends, "every offset of every committed range must be in the output (no markers here)"
    rows = sorted(Ledger(ledger_uri).rows(pipeline), key=lambda r: (r.partition, r.batch_id))
    assert {r.status for r in rows} == {"committed"}
    for partition in ends:
        ranges = [(r.start_offset, r.end_offset) for r in rows if r.partition == partition]
        assert ranges[0][0] == 0 and ranges[-1][1] == ends[partition]
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False)), f"gap or overlap: {ranges}"
    counts = {}
    for r in rows:
        counts[r.partition] = counts.get(r.partition, 0) + r.record_count
    assert counts == present, "ledger record counts must equal the records in the output"


@pytest.fixture
def crash_env(kafka_bootstrap, tmp_path):
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    env = helpers.service_env(pipelines, tmp_path / "lake")
    return env, pipelines, tmp_path / "lake"


@pytest.mark.parametrize("point", [faults.AFTER_PLAN_FROZEN, faults.DURING_READ, faults.AFTER_OUTPUT_COMMIT,
                                   faults.DURING_LEDGER_COMMIT, faults.AFTER_LEDGER_COMMIT])
def test_kill_at_each_step_then_rerun_gives_exactly_once(crash_env, point, tmp_path):
    env, pipelines, lake = crash_env
    topic = helpers.create_topic(helpers.unique("crash"), partitions=3)
    (pipelines / f"{topic}.yaml").write_text(f"name: {topic}\ntopics: [{topic}]\ntable: {topic}\n")
    helpers.produce(topic, 300)

    crashed = tidemark_run({**env, "TIDEMARK_CRASH_AT": point, "TIDEMARK_CRASH_ONCE": str(tmp_path / "crashed")},
                           topic)
    assert (tmp_path / "crashed").exists(), f"the crash point {point} was never reached:\n{crashed.stderr[-3000:]}"
    assert crashed.returncode != 0, "a killed run must not report success"
    assert f"TIDEMARK_CRASH_AT={point}" in crashed.stdout + crashed.stderr

    if point in (faults.AFTER_PLAN_FROZEN, faults.DURING_READ):
        helpers.produce(topic, 120, start=300)  # arrives before the recovery run re-executes the frozen batch
    for _ in range(3):  # recovery, then runs until nothing is left
        rerun = tidemark_run(env, topic)
        assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-5000:]
        if "nothing new" in rerun.stdout:
            break
    else:
        pytest.fail("the pipeline did not converge to 'nothing new' in three runs after the crash")
    check_invariants(str(lake / topic), str(lake / "_tidemark" / "offsets"), topic, topic)
