"""Offset replay against the real broker and ledger: dry runs change nothing, executed resets are
audited rows, and re-reading after a reset back in time adds no duplicates."""

from __future__ import annotations

import datetime as dt

import pytest

from tests import helpers
from tidemark import settings
from tidemark.batch.execute import execute_batch
from tidemark.batch.prepare import prepare_batch
from tidemark.batch.reset import ResetRequest, reset_offsets
from tidemark.config.pipeline import parse_pipeline
from tidemark.errors import PipelineBusyError, ResetError
from tidemark.kafka.offsets import TopicPartition as TP
from tidemark.ledger.store import Ledger

pytestmark = pytest.mark.integration


def props() -> dict[str, str]:
    return {"bootstrap.servers": helpers.bootstrap()}


def ingested(config, spark) -> None:
    plan = prepare_batch(config, props())
    if not plan.is_empty:
        execute_batch(spark, plan, props())


@pytest.fixture
def loaded(kafka_bootstrap, spark, lake):
    """A two-partition topic with 20 records, fully ingested."""
    topic = helpers.create_topic(helpers.unique("replay"), partitions=2)
    helpers.produce(topic, 20)
    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic}, "test")
    ingested(config, spark)
    return config, topic


def test_dry_run_changes_nothing_and_execute_writes_an_audited_reset(loaded):
    config, topic = loaded
    ledger = Ledger(settings.ledger_uri())
    version = ledger.version()
    dry = reset_offsets(config, props(), ResetRequest("to-earliest"))
    assert not dry.executed and ledger.version() == version
    assert dry.preview.as_table() == [{"topic": topic, "partition": p, "current": 10, "new": 0, "change": -10}
                                   for p in (0, 1)]

    with pytest.raises(ResetError, match="needs a reason"):
        reset_offsets(config, props(), ResetRequest("to-earliest", execute=True))
    done = reset_offsets(config, props(), ResetRequest("shift-by", (f"{topic}:1",), shift=-4, execute=True,
                                                       reason="bug 42", owner="cli:me@host"))
    assert done.executed and done.batch_id == 2
    state = ledger.state(topic)
    assert state.positions == {TP(topic, 0): 10, TP(topic, 1): 6}
    row = [r for r in ledger.rows(topic) if r.kind == "reset"][0]
    assert (row.start_offset, row.end_offset, row.reason, row.dag_run_id, row.status) == (
        10, 6, "bug 42", "cli:me@host", "committed")


def test_replay_after_a_reset_back_in_time_adds_no_duplicates(loaded, spark):
    config, topic = loaded
    reset_offsets(config, props(), ResetRequest("to-earliest", execute=True, reason="replay", owner="test"))
    helpers.produce(topic, 6, start=20)
    plan = prepare_batch(config, props())
    assert plan.dedupe and [(r.start, r.end) for r in plan.ranges] == [(0, 13), (0, 13)]
    execute_batch(spark, plan, props())
    stats = helpers.query(config.table_uri, "SELECT COUNT(*) AS n, COUNT(DISTINCT (kafka_partition, kafka_offset)) "
                                            "AS uniq FROM t")
    assert stats == [{"n": 26, "uniq": 26}]
    batch = [r for r in Ledger(settings.ledger_uri()).rows(topic) if r.batch_id == plan.batch_id]
    assert sorted(r.record_count for r in batch) == [3, 3]  # only the new records were written


def test_every_scenario_plans_against_kafka(loaded, tmp_path):
    config, topic = loaded
    def new(request):
        return [r["new"] for r in reset_offsets(config, props(), request).preview.as_table()]

    assert new(ResetRequest("to-latest")) == [10, 10]
    assert new(ResetRequest("to-offset", offset=25)) == [10, 10]  # clamped to latest
    assert new(ResetRequest("to-offset", (f"{topic}:0",), offset=3)) == [3]
    assert new(ResetRequest("to-datetime", datetime="2000-01-01T00:00:00Z")) == [0, 0]
    future = (dt.datetime.now(dt.UTC) + dt.timedelta(days=1)).isoformat()
    assert new(ResetRequest("to-datetime", datetime=future)) == [10, 10]
    assert new(ResetRequest("by-duration", duration="P365D")) == [0, 0]
    assert new(ResetRequest("from-file", offsets_file=f"{topic},1,7\n")) == [7]
    with pytest.raises(ResetError, match="is not one of this pipeline's topics"):
        reset_offsets(config, props(), ResetRequest("to-earliest", ("nope",)))
    with pytest.raises(ResetError, match="not an ISO-8601 date-time"):
        reset_offsets(config, props(), ResetRequest("to-datetime", datetime="last tuesday"))


def test_timestamps_in_the_middle_map_to_the_first_record_at_or_after(kafka_bootstrap, lake):
    topic = helpers.create_topic(helpers.unique("times"), partitions=1)
    before = helpers.past_ms(60)
    helpers.produce(topic, 5, timestamp_ms=before)
    middle = helpers.at_ms(before + 1200)
    helpers.produce(topic, 5, start=5, timestamp_ms=before + 1400)
    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic}, "test")
    plan = reset_offsets(config, props(), ResetRequest("to-datetime", datetime=middle.isoformat())).preview
    assert [r.new for r in plan.rows] == [5]


def test_reset_is_refused_while_a_batch_is_pending(kafka_bootstrap, lake):
    topic = helpers.create_topic(helpers.unique("pending"), partitions=1)
    helpers.produce(topic, 3)
    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic}, "test")
    prepare_batch(config, props(), owner="manual__x")
    with pytest.raises(PipelineBusyError, match="froze batch 1, which is planned but not committed"):
        reset_offsets(config, props(), ResetRequest("to-earliest", execute=True, reason="r"))


def test_cli_reset_dry_run_execute_and_history(kafka_bootstrap, tmp_path):
    import json
    import subprocess
    from pathlib import Path

    tidemark = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "tidemark")
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    env = helpers.service_env(pipelines, tmp_path / "lake")
    topic = helpers.create_topic(helpers.unique("cli"), partitions=2)
    helpers.produce(topic, 8)
    (pipelines / f"{topic}.yaml").write_text(f"name: {topic}\ntopics: [{topic}]\ntable: {topic}\n")

    def cli(*args):
        return subprocess.run([tidemark, *args], env=env, capture_output=True, text=True, timeout=120)

    dry = cli("offsets", "reset", topic, "--to-offset", "3", "--topic", f"{topic}:1")
    assert dry.returncode == 0, dry.stderr
    assert "DRY RUN: nothing changed" in dry.stdout and f"{topic}  1          -        3" in dry.stdout
    assert json.loads(cli("offsets", "history", topic, "--json").stdout) == []

    refused = cli("offsets", "reset", topic, "--to-offset", "3", "--execute")
    assert refused.returncode == 2 and "needs a reason" in refused.stderr

    done = cli("offsets", "reset", topic, "--to-offset", "3", "--topic", f"{topic}:1", "--execute",
               "--reason", "start partition 1 at 3")
    assert done.returncode == 0 and "applied: ledger entry 1" in done.stdout, done.stderr
    history = json.loads(cli("offsets", "history", topic, "--json").stdout)
    assert [(h["kind"], h["partition"], h["end_offset"], h["reason"]) for h in history] == [
        ("reset", 1, 3, "start partition 1 at 3")]
    shown = {o["partition"]: o for o in json.loads(cli("offsets", "show", topic, "--json").stdout)}
    assert (shown[1]["committed_offset"], shown[1]["lag"]) == (3, 1)

    bad = cli("offsets", "reset", topic, "--to-datetime", "soon")
    assert bad.returncode == 2 and "not an ISO-8601 date-time" in bad.stderr


def test_each_scenario_executed_moves_the_position_and_the_next_run_adds_no_duplicates(loaded, spark):
    """One topic, every scenario in turn: dry run changes nothing, execute moves the position to the
    planned offsets, the next run reads from there and the output stays unique on the coordinates."""
    config, topic = loaded
    ledger = Ledger(settings.ledger_uri())
    start = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    cases = [  # (request, new position of partitions 0 and 1)
        (ResetRequest("to-earliest"), {0: 0, 1: 0}),
        (ResetRequest("to-offset", (f"{topic}:1",), offset=4), {0: 10, 1: 4}),
        (ResetRequest("shift-by", shift=-3), {0: 7, 1: 7}),
        (ResetRequest("to-datetime", datetime=start.isoformat()), {0: 0, 1: 0}),
        (ResetRequest("by-duration", duration="PT10M"), {0: 0, 1: 0}),
        (ResetRequest("from-file", offsets_file=f"{topic},0,2\n{topic},1,9\n"), {0: 2, 1: 9}),
        (ResetRequest("to-latest"), {0: 13, 1: 13}),  # after 6 new records: they are skipped on purpose
    ]
    for request, expected in cases:
        if request.scenario == "to-latest":
            helpers.produce(topic, 6, start=100)
        version = ledger.version()
        dry = reset_offsets(config, props(), request)
        assert ledger.version() == version, f"{request.scenario}: a dry run wrote to the ledger"
        assert {r["partition"]: r["new"] for r in dry.preview.as_table()} == {
            p: n for p, n in expected.items() if not request.scopes or p == 1}, request.scenario
        executed = reset_offsets(config, props(), ResetRequest(**{**request.__dict__, "execute": True,
                                                                   "reason": f"test {request.scenario}"}))
        assert executed.executed
        positions = ledger.state(topic).positions
        assert {tp.partition: o for tp, o in positions.items()} == expected, request.scenario
        ingested(config, spark)
        assert {tp.partition: o for tp, o in ledger.state(topic).positions.items()} == helpers.end_offsets(topic)
        stats = helpers.query(config.table_uri, "SELECT COUNT(*) AS n, COUNT(DISTINCT (kafka_partition, "
                                                "kafka_offset)) AS uniq FROM t")[0]
        assert stats["n"] == stats["uniq"] == 20, f"{request.scenario}: {stats}"
    kinds = [r.kind for r in ledger.rows(topic) if r.status == "committed"]
    assert kinds.count("reset") >= 12  # one row per partition moved, per executed scenario
