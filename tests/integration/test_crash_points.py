"""Kill the pipeline with SIGKILL at each step of the protocol, run it again, check the invariants.

The killed run is `tidemark run` in its own process (plan, then the ingest job: spark-submit, or a
Spark Connect client of a long-running server), so the kill takes the real process down: the
planner's, the Spark driver's, or the Connect client's. The runs that recover
after it need no process of their own: they plan and execute in this process, on the session's
SparkSession, as a different owner than the dead one (run_in_process)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from tests import helpers
from tidemark import fault_injection
from tidemark.errors import ConcurrentBatchWriteError
from tidemark.ledger.store import Ledger

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
# The kill lands before the output commit: recovery takes the batch over and re-executes its frozen ranges.
# Raw values have no dead letters (the point is passed before the output write); values that can be bad
# write their dead letters after the output commit.
BEFORE_OUTPUT = {"raw": (fault_injection.AFTER_PLAN_FROZEN, fault_injection.DURING_READ,
fault_injection.AFTER_DEAD_LETTERS),
                 "json": (fault_injection.AFTER_PLAN_FROZEN, fault_injection.DURING_READ)}


def tidemark_run(env: dict, pipeline: str) -> tuple[subprocess.CompletedProcess, int]:
    """`tidemark run` as a real process; returns its outcome and its pid (part of the owner id it froze
    its batch under)."""
    with subprocess.Popen([str(ROOT / ".venv" / "bin" / "tidemark"), "run", pipeline], env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        try:
            stdout, stderr = process.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr), process.pid


def run_in_process(spark, pipeline_name: str, env: dict, owner: str | None = None):
    """One run of the pipeline as `tidemark run` does it, in this process: recover and plan (with this
    process's own owner id, `cli:<host>:<pid of pytest>:...`), then execute the batch with the ingest
    job's core function on ``spark``. Returns the plan (empty when there was nothing new). The only
    place here that names the core's run functions."""
    from tidemark.batch.execute import execute_batch
    from tidemark.batch.prepare import prepare_batch
    from tidemark.config.pipeline import find_pipeline

    properties = json.loads(env["AIRFLOW_CONN_KAFKA_DEFAULT"])["extra"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TIDEMARK_PIPELINES_DIR", env["TIDEMARK_PIPELINES_DIR"])
        patch.setenv("TIDEMARK_LAKE_ROOT", env["TIDEMARK_LAKE_ROOT"])
        for name in ("TIDEMARK_LEDGER_URI", "TIDEMARK_CRASH_AT", "TIDEMARK_CRASH_ONCE"):
            patch.delenv(name, raising=False)
        config = find_pipeline(pipeline_name)
        plan = prepare_batch(config, properties, owner=owner)
        if not plan.is_empty:
            execute_batch(spark, plan, properties)
    return plan


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
    check_no_half_batch(table, rows)


def check_no_half_batch(table: str, rows: list) -> None:
    """Invariant 6, readers never see half a batch: in every version of the output a reader could
    have read, each batch has either none of its good records or all of them (the ledger's counts)."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    whole: dict[int, int] = {}
    for r in rows:
        whole[r.batch_id] = whole.get(r.batch_id, 0) + r.record_count - r.dead_letter_count
    for version in range(DeltaTable(table).version() + 1):
        batches = DeltaTable(table, version=version).to_pyarrow_table(columns=["ingest_batch_id"])["ingest_batch_id"]
        seen = {c["values"].as_py(): c["counts"].as_py() for c in pc.value_counts(batches)}
        assert all(seen[b] == whole[b] for b in seen), f"version {version} of {table} holds part of a batch: " \
                                                        f"{seen}, whole batches: {whole}"


def check_recovery(point: str, value_format: str, killed, marker: int | None, recovery, pid: int) -> None:
    """What the kill left (the ledger state ``killed`` and the output's batch ``marker``), and the path
    the first run after it took, are those the protocol prescribes for that point: re-execute the dead
    owner's batch with the same frozen ranges (taken over by this process's owner id), or, for a batch in
    the output whose dead letters may be missing, execute it again to complete them, or roll a batch
    already in the output forward (nothing left to execute), or find nothing pending."""
    if point in BEFORE_OUTPUT[value_format] or (point, value_format) == (fault_injection.AFTER_OUTPUT_COMMIT, "json"):
        before = point in BEFORE_OUTPUT[value_format]
        assert killed.pending_batch_id == 1 and marker == (None if before else 1), (killed, marker)
        assert killed.pending_owner.startswith(f"cli:{socket.gethostname()}:{pid}:"), killed.pending_owner
        assert recovery.recovered and recovery.batch_id == 1, recovery
        assert sorted(recovery.ranges) == killed.pending_ranges, "the retry must read the same frozen ranges"
        assert recovery.owner.startswith(f"cli:{socket.gethostname()}:{os.getpid()}:"), (
            f"the dead owner's batch is taken over by this process's own owner id, not {recovery.owner}")
    elif point in (fault_injection.AFTER_OUTPUT_COMMIT, fault_injection.AFTER_DEAD_LETTERS):
        assert killed.pending_batch_id == 1 and marker == 1, (killed, marker)
        assert recovery.is_empty, "the batch in the output (with its dead letters) is rolled forward, not read again"
    elif point == fault_injection.DURING_LEDGER_COMMIT:  # the kill lands before or after the ledger flip
        assert killed.pending_batch_id in (None, 1) and marker == 1, (killed, marker)
        assert recovery.is_empty
    else:
        assert killed.pending_batch_id is None and marker == 1, (killed, marker)
        assert recovery.is_empty


@pytest.fixture
def crash_env(kafka_bootstrap, tmp_path):
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    env = helpers.service_env(pipelines, tmp_path / "lake")
    return env, pipelines, tmp_path / "lake"


SUBMIT, CONNECT = "spark-submit", "spark-connect"
# Every point on the warm path (the job a Spark Connect client of the test run's server: no JVM of its
# own, so the kill takes down only the job's Python process), with JSON values (dead letters after the
# output). Raw values (one pass) on the warm path at the points where their path differs: mid-read, just
# before the output write (a strict take-over: the write was never sent, so no server finishes it) and
# after the output commit (rolled forward). Under spark-submit, where the kill also takes the driver's
# JVM down, one case: mid-read, found by the driver's status tracker (the Connect client learns it from
# the server's progress reports), which leaves the dead JVM's uncommitted part files in the table's
# folder; JSON values, the path with the most steps after the read. Nothing else depends on the
# launcher: the planner's kill (after_plan_frozen) lands in `tidemark run` before any job starts, the
# recovery runs in this process either way, and the steps around the commits are the same Python code
# (tidemark.batch.execute) with the same Delta commits on either launcher; each spark-submit case cost a
# JVM (10-15 CPU-seconds) for no further invariant.
CASES = [pytest.param(point, value_format, launcher, marks=pytest.mark.slow if launcher == SUBMIT else ())
         for point, value_format, launcher in [
             *((point, "json", CONNECT) for point in fault_injection.POINTS),
             *((point, "raw", CONNECT) for point in (fault_injection.DURING_READ, fault_injection.AFTER_DEAD_LETTERS,
                                                     fault_injection.AFTER_OUTPUT_COMMIT)),
             (fault_injection.DURING_READ, "json", SUBMIT)]]


def recover(spark, topic: str, env: dict, launcher: str) -> list:
    """Runs after the crash until one finds nothing new. On Spark Connect the killed job's last
    operation goes on in the server (the client is gone, the server finishes what it was sent): a
    write killed mid-read may still commit the output, before the recovery run or while it writes. Delta's
    marker lets only one of the two commit the batch; the other is skipped or fails on the concurrent
    transaction, which a later run rolls forward. So there, a run may fail on exactly that."""
    from tidemark.batch import cli_owner_id

    # one owner for all of them, as one process retrying: a run that lost to the killed job's write
    # keeps the batch it took over, and the next run (the same live owner) goes on with it
    owner, runs = cli_owner_id(), []
    for _ in range(4):
        try:
            runs.append(run_in_process(spark, topic, env, owner))
        except ConcurrentBatchWriteError:
            if launcher != CONNECT:
                raise
            continue
        if runs[-1].is_empty:
            return runs
    pytest.fail(f"the pipeline did not converge to 'nothing new' in four runs after the crash: {runs}")


@pytest.mark.parametrize(("point", "value_format", "launcher"), CASES)
def test_kill_at_each_step_then_rerun_gives_exactly_once(crash_env, spark, point, value_format, launcher, tmp_path,
                                                         request):
    env, pipelines, lake = crash_env
    if launcher == CONNECT:
        env["AIRFLOW_CONN_SPARK_DEFAULT"] = helpers.spark_connect_connection(request.getfixturevalue("spark_connect"))
    topic = helpers.create_topic(helpers.unique("crash"), partitions=3)
    pipeline = f"name: {topic}\ntopics: [{topic}]\ntable: {topic}\n"
    if value_format == "json":
        pipeline += "value_format: json\nvalue_schema: {order_id: bigint, amount: double}\n"
    (pipelines / f"{topic}.yaml").write_text(pipeline)
    helpers.produce(topic, 300)
    poison = {1: 3} if value_format == "json" else {}
    if poison:
        helpers.produce_values(topic, [b"{poison", b"[]", b'{"amount": 1}'], partition=1)

    crashed, pid = tidemark_run({**env, "TIDEMARK_CRASH_AT": point, "TIDEMARK_CRASH_ONCE": str(tmp_path / "crashed")},
                                topic)
    assert (tmp_path / "crashed").exists(), f"the crash point {point} was never reached:\n{crashed.stderr[-3000:]}"
    assert crashed.returncode != 0, "a killed run must not report success"
    assert f"TIDEMARK_CRASH_AT={point}" in crashed.stdout + crashed.stderr
    killed = Ledger(str(lake / "_tidemark" / "offsets")).state(topic)
    marker = helpers.txn_version(str(lake / topic), topic)

    if point in BEFORE_OUTPUT[value_format] or (point, value_format) == (fault_injection.AFTER_OUTPUT_COMMIT, "json"):
        helpers.produce(topic, 120, start=300)  # arrives before the recovery run executes the frozen batch again
    runs = recover(spark, topic, env, launcher)
    if launcher == CONNECT and point == fault_injection.DURING_READ:
        # the killed job's write may still land on the server (see recover): either the recovery took the
        # batch over and read it again, or it found the batch in the output and rolled it forward
        assert killed.pending_batch_id == 1 and killed.pending_owner.startswith(f"cli:{socket.gethostname()}:{pid}:")
        took_over = runs[0].recovered and runs[0].batch_id == 1 and sorted(runs[0].ranges) == killed.pending_ranges
        rolled_forward = not runs[0].recovered and runs[0].batch_id == 2  # then planned the records produced since
        assert took_over or rolled_forward, runs[0]
    else:
        check_recovery(point, value_format, killed, marker, runs[0], pid)
    check_invariants(lake, topic, topic, poison=poison)
