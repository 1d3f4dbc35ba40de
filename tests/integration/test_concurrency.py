"""Two runs of one pipeline at the same time, as real processes: one commits, the other fails
saying another run holds the pipeline, and writes nothing. The first run stops itself (SIGSTOP) right after
it froze its batch, so the second runs while the first holds the pipeline every time, however fast the
first would have committed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests import helpers
from tidemark import fault_injection
from tidemark.ledger.store import Ledger

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TIDEMARK = str(ROOT / ".venv" / "bin" / "tidemark")


@pytest.mark.slow
def test_second_run_while_the_first_holds_the_pipeline_fails_and_writes_nothing(kafka_bootstrap, tmp_path):
    pipelines, lake = tmp_path / "pipelines", tmp_path / "lake"
    pipelines.mkdir()
    env = helpers.service_env(pipelines, lake)
    topic = helpers.create_topic(helpers.unique("twice"), partitions=2)
    (pipelines / f"{topic}.yaml").write_text(f"name: {topic}\ntopics: [{topic}]\ntable: {topic}\n")
    helpers.produce(topic, 200)
    ledger = Ledger(str(lake / "_tidemark" / "offsets"))

    log = tmp_path / "first.log"
    with helpers.paused_run([TIDEMARK, "run", topic], env, log, fault_injection.AFTER_PLAN_FROZEN,
                            "the first run") as first:
        assert ledger.state(topic).pending_batch_id == 1, log.read_text()[-4000:]
        helpers.produce(topic, 50, start=200)  # the second run would have something new to read
        second = subprocess.run([TIDEMARK, "run", topic], env=env, capture_output=True, text=True, timeout=300)
    assert first.wait(timeout=600) == 0, log.read_text()[-4000:]
    assert second.returncode == 2, second.stdout + second.stderr
    assert "another run holds the pipeline" in second.stderr and "wrote nothing" in second.stderr

    assert helpers.query(str(lake / topic), "SELECT COUNT(*) AS n, MAX(ingest_batch_id) AS b FROM t") == [
        {"n": 200, "b": 1}]
    assert {(r.batch_id, r.status) for r in ledger.rows(topic)} == {(1, "committed")}
