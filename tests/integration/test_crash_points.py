"""Kill the pipeline with SIGKILL at each step of the protocol, run it again, check the invariants.

Each run is `tidemark run` in its own process (plan, then spark-submit of the ingest job), so the
kill takes the real process down: the planner's, or the Spark driver's."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests import helpers
from tidemark import crash
from tidemark.ledger import Ledger

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
KILLED = -9  # subprocess return code of a process killed by SIGKILL


def tidemark_run(env: dict, pipeline: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(ROOT / ".venv" / "bin" / "tidemark"), "run", pipeline], env=env,
                          capture_output=True, text=True, timeout=600)


def check_invariants(lake: Path, pipeline: str, topic: str, poison: dict[int, int]) -> None:
    """Exactly once across the output and the dead-letter table (none when there is no poison),
    contiguous committed ranges, and committed offsets equal to Kafka's end offsets."""
    table, dead = str(lake / pipeline), str(lake / f"{pipeline}_dead_letters")
    tables = (table, dead) if poison else (table,)
    uniq = "SELECT COUNT(*) AS n, COUNT(DISTINCT (kafka_topic, kafka_partition, kafka_offset)) AS uniq FROM t"
    for t in tables:
        stats = helpers.query(t, uniq)[0]
        assert stats["n"] == stats["uniq"], f"duplicates in {t}: {stats}"
    per_partition = "SELECT kafka_partition AS p, COUNT(*) AS n FROM t GROUP BY kafka_partition"
    good = {r["p"]: r["n"] for r in helpers.query(table, per_partition)}
    bad = {r["p"]: r["n"] for r in helpers.query(dead, per_partition)} if poison else {}
    assert bad == poison, "every poison record is a dead letter, once"
    ends = helpers.end_offsets(topic)
    assert {p: good.get(p, 0) + bad.get(p, 0) for p in ends} == ends, "every offset is in output or dead letters"
    rows = sorted(Ledger(str(lake / "_tidemark" / "offsets")).rows(pipeline), key=lambda r: (r.partition, r.batch_id))
    assert {r.status for r in rows} == {"committed"}
    for partition in ends:
        ranges = [(r.start_offset, r.end_offset) for r in rows if r.partition == partition]
        assert ranges[0][0] == 0 and ranges[-1][1] == ends[partition]
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False)), f"gap or overlap: {ranges}"
        assert sum(r.record_count for r in rows if r.partition == partition) == ends[partition]
        assert sum(r.dead_letter_count for r in rows if r.partition == partition) == bad.get(partition, 0)


@pytest.fixture
def crash_env(kafka_bootstrap, tmp_path):
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    env = helpers.service_env(pipelines, tmp_path / "lake")
    return env, pipelines, tmp_path / "lake"


# JSON values (counted before the write, with dead letters) at every point; raw values (written in
# one pass that counts while it writes) where that path differs.
CASES = [*((point, "json") for point in crash.POINTS),
         (crash.DURING_READ, "raw"), (crash.AFTER_OUTPUT_COMMIT, "raw")]


@pytest.mark.parametrize(("point", "value_format"), CASES)
def test_kill_at_each_step_then_rerun_gives_exactly_once(crash_env, point, value_format, tmp_path):
    env, pipelines, lake = crash_env
    topic = helpers.create_topic(helpers.unique("crash"), partitions=3)
    pipeline = f"name: {topic}\ntopics: [{topic}]\ntable: {topic}\n"
    if value_format == "json":
        pipeline += "value_format: json\nvalue_schema: {order_id: bigint, amount: double}\n"
    (pipelines / f"{topic}.yaml").write_text(pipeline)
    helpers.produce(topic, 300)
    poison = {1: 3} if value_format == "json" else {}
    if poison:
        helpers.produce_values(topic, [b"{poison", b"[]", b'{"amount": 1}'], partition=1)

    crashed = tidemark_run({**env, "TIDEMARK_CRASH_AT": point, "TIDEMARK_CRASH_ONCE": str(tmp_path / "crashed")},
                           topic)
    assert (tmp_path / "crashed").exists(), f"the crash point {point} was never reached:\n{crashed.stderr[-3000:]}"
    assert crashed.returncode != 0, "a killed run must not report success"
    assert f"TIDEMARK_CRASH_AT={point}" in crashed.stdout + crashed.stderr

    if point in (crash.AFTER_PLAN_FROZEN, crash.DURING_READ, crash.AFTER_DEAD_LETTERS):
        helpers.produce(topic, 120, start=300)  # arrives before the recovery run re-executes the frozen batch
    for _ in range(3):  # recovery, then runs until nothing is left
        rerun = tidemark_run(env, topic)
        assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-5000:]
        if "nothing new" in rerun.stdout:
            break
    else:
        pytest.fail("the pipeline did not converge to 'nothing new' in three runs after the crash")
    check_invariants(lake, topic, topic, poison=poison)
