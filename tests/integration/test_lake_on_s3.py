"""The lake on object storage, end to end: `tidemark run` and the ingest job (spark-submit, S3A, Tidemark's
put-if-absent Delta log store) with the output, dead-letter and ledger tables on the local S3 server
(scripts/storage.sh, started by `make test`), credentials from the `aws_default` connection. Every
record lands exactly once through a kill -9 of the driver, two concurrent runs, and a stale driver that
wakes up after another run took its batch over.

Both launchers write the lake on S3. By spark-submit: the second of two runs (it appends to the output
and creates the dead-letter table), the driver killed -9 mid-write and the stale driver, the three cases
where the driver's own JVM and its S3A and log-store settings are the subject. On the warm path (the test
run's Spark Connect server, started with the S3A and log-store settings of the local S3 server:
scripts/test.sh): the first of the two runs (it creates the output and the ledger), the recovery after
the kill, the take-over of the stale driver's batch, and the run that holds the pipeline while a second
is refused (what is tested there is the ledger on S3, not the launcher). Each warm run spares a
spark-submit JVM (10-15 CPU-seconds).

The tables are read back with delta-rs under the other scheme spelling (`s3://`) than the one Spark
wrote (`s3a://`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests import helpers
from tidemark import fault_injection, storage
from tidemark.batch.job_settings import SECRET_ENV_VARS
from tidemark.ledger.store import Ledger

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TIDEMARK = str(ROOT / ".venv" / "bin" / "tidemark")
CANARY = "canary-secret-7f3a91"


@pytest.fixture
def s3_pipeline(kafka_bootstrap, tmp_path, monkeypatch):
    """A topic, its pipeline file, a fresh lake root on S3 and the environment of a Tidemark process
    for them (the storage connection's secret is a canary). This process is configured for the same
    store, to read the ledger."""
    topic = helpers.create_topic(helpers.unique("s3"), partitions=3)
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    (pipelines / f"{topic}.yaml").write_text(
        f"name: {topic}\ntopics: [{topic}]\ntable: {topic}\nvalue_format: json\n"
        "value_schema: {order_id: bigint}\nspark_conf: {spark.sql.shuffle.partitions: '2'}\n")
    lake = helpers.s3_lake(topic)
    env = helpers.service_env(pipelines, lake, AIRFLOW_CONN_AWS_DEFAULT=helpers.aws_connection(CANARY))
    for name in ("TIDEMARK_CRASH_AT", "TIDEMARK_CRASH_ONCE", "TIDEMARK_PAUSE_AT"):
        env.pop(name, None)
    for name in ("TIDEMARK_PIPELINES_DIR", "TIDEMARK_LAKE_ROOT", "AIRFLOW_CONN_AWS_DEFAULT"):
        monkeypatch.setenv(name, env[name])
    yield topic, lake, env


def store() -> storage.ObjectStore:
    """The local S3 server's store, with the canary as its secret (as the aws_default connection holds it)."""
    return storage.ObjectStore(helpers.S3_ACCESS_KEY, CANARY, endpoint_url=helpers.s3_endpoint())


def run(env: dict, pipeline: str, *args: str, **extra: str) -> subprocess.CompletedProcess:
    """`tidemark run PIPELINE`, or `tidemark <args...> PIPELINE [--json]`."""
    command = [TIDEMARK, "run", pipeline] if not args else [TIDEMARK, *args[:2], pipeline, *args[2:]]
    return subprocess.run(command, env={**env, **extra}, capture_output=True, text=True, timeout=600)


def counts(table: str) -> dict[int, tuple[int, int]]:
    """partition -> (records, distinct offsets) of an output table, read by delta-rs as s3://."""
    rows = helpers.query(storage.delta_rs_uri(table), "SELECT kafka_partition AS p, COUNT(*) AS n, "
                                                      "COUNT(DISTINCT kafka_offset) AS d FROM t GROUP BY p")
    return {r["p"]: (r["n"], r["d"]) for r in rows}


def exactly_once(produced) -> dict[int, tuple[int, int]]:
    return {p: (n, n) for p, n in produced.items()}


def test_tidemark_run_writes_every_table_on_s3_exactly_once_and_never_prints_the_secret(s3_pipeline, spark_connect):
    """The first run on the warm path creates the output and the ledger; the second, by spark-submit,
    appends to the output and, for the poison record it reads, creates the dead-letter table."""
    topic, lake, env = s3_pipeline
    helpers.produce(topic, 60)  # offsets 0-19 of each of the three partitions
    first = run(env, topic, AIRFLOW_CONN_SPARK_DEFAULT=helpers.spark_connect_connection(spark_connect))
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-5000:]
    assert "on the Spark Connect server" in first.stderr, first.stderr[-3000:]
    helpers.produce(topic, 30, start=60)  # offsets 20-29
    helpers.produce_values(topic, [b"not json"], partition=0)  # offset 30 of partition 0
    second = run(env, topic)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-5000:]
    assert "on the Spark Connect server" not in second.stderr, second.stderr[-3000:]
    shown = run(env, topic, "offsets", "show", "--json")
    assert shown.returncode == 0, shown.stderr

    table = f"{lake}/{topic}"
    good = helpers.query(storage.delta_rs_uri(table), "SELECT COUNT(*) AS n, COUNT(DISTINCT kafka_partition || "
                                                      "':' || kafka_offset) AS d FROM t")
    assert good == [{"n": 90, "d": 90}]
    assert helpers.query(f"{table}_dead_letters", "SELECT kafka_partition AS p, kafka_offset AS o FROM t") == [
        {"p": 0, "o": 30}]
    end = helpers.end_offsets(topic)
    assert {p["partition"]: p["committed_offset"] for p in json.loads(shown.stdout)} == end
    ledger = Ledger(f"{lake}/_tidemark/offsets", store())
    assert {(r.batch_id, r.status) for r in ledger.rows(topic)} == {(1, "committed"), (2, "committed")}
    # An audited reset on S3, then the history shows it (the ledger's other commands).
    reset = subprocess.run([TIDEMARK, "offsets", "reset", topic, "--shift-by", "-5", "--execute", "--reason",
                            "replay on s3"], env=env, capture_output=True, text=True, timeout=300)
    assert reset.returncode == 0, reset.stdout + reset.stderr
    history = run(env, topic, "offsets", "history", "--json")
    assert history.returncode == 0, history.stderr
    assert {r["kind"] for r in json.loads(history.stdout)} >= {"reset"}
    assert {p["partition"]: p["committed_offset"] for p in json.loads(run(env, topic, "offsets", "show",
                                                                          "--json").stdout)} == {
        p: end - 5 for p, end in end.items()}

    # The secret key reached delta-rs and S3A without ever being printed.
    for result in (first, second, shown, reset, history):
        assert CANARY not in result.stdout + result.stderr
    assert CANARY not in history.stdout


def test_kill_9_of_the_driver_during_the_s3_write_then_recovery_on_the_warm_path(s3_pipeline, spark_connect):
    topic, lake, env = s3_pipeline
    produced = helpers.produce(topic, 90)
    killed = run(env, topic, TIDEMARK_CRASH_AT=fault_injection.DURING_READ)
    assert killed.returncode != 0 and "killing process" in killed.stdout + killed.stderr, killed.stderr[-3000:]
    ledger = Ledger(f"{lake}/_tidemark/offsets", store())
    assert ledger.state(topic).pending_batch_id == 1  # the batch stays frozen, nothing committed
    assert helpers.query_or_none(f"{lake}/{topic}") is None

    recovered = run(env, topic, AIRFLOW_CONN_SPARK_DEFAULT=helpers.spark_connect_connection(spark_connect))
    assert recovered.returncode == 0, recovered.stdout[-3000:] + recovered.stderr[-5000:]
    assert "recovered" in recovered.stdout
    assert "on the Spark Connect server" in recovered.stderr, recovered.stderr[-3000:]
    assert counts(f"{lake}/{topic}") == exactly_once(produced)
    assert {(r.batch_id, r.status) for r in ledger.rows(topic)} == {(1, "committed")}


@pytest.mark.slow
def test_two_concurrent_runs_on_s3_one_commits_and_the_other_writes_nothing(s3_pipeline, spark_connect, tmp_path):
    """The first run stops itself (SIGSTOP) right after it froze its batch in the ledger on S3, so the second
    runs while the first holds the pipeline every time (not only while a spark-submit JVM happens to be
    starting); continued, the first commits on the warm path. The ledger on S3 decides, not the launcher."""
    topic, lake, env = s3_pipeline
    produced = helpers.produce(topic, 90)
    ledger = Ledger(f"{lake}/_tidemark/offsets", store())
    log = tmp_path / "first.log"
    with helpers.paused_run([TIDEMARK, "run", topic],
                            {**env, "AIRFLOW_CONN_SPARK_DEFAULT": helpers.spark_connect_connection(spark_connect)},
                            log, fault_injection.AFTER_PLAN_FROZEN, "the first run") as first:
        assert ledger.state(topic).pending_batch_id == 1, log.read_text()[-4000:]
        second = run(env, topic)
    assert first.wait(timeout=600) == 0, log.read_text()[-4000:]
    assert "on the Spark Connect server" in log.read_text(), log.read_text()[-4000:]
    assert second.returncode == 2 and "another run holds the pipeline" in second.stderr, second.stderr[-3000:]
    assert counts(f"{lake}/{topic}") == exactly_once(produced)
    assert {(r.batch_id, r.status) for r in ledger.rows(topic)} == {(1, "committed")}


@pytest.mark.slow
def test_a_stale_driver_that_wakes_after_a_take_over_commits_nothing(s3_pipeline, spark_connect, tmp_path):
    """The case only a cluster has: driver A is frozen (SIGSTOP of its whole process group: JVM and
    Python) after it checked that it owns the batch and just before its output commit; its run is marked
    failed, run B (on the warm path) takes the batch over and commits it; then A wakes up (SIGCONT) and
    carries on. A must commit nothing: the output's marker already holds the batch, and the ledger already
    has it."""
    from tidemark.batch.prepare import prepare_batch
    from tidemark.config.pipeline import find_pipeline
    from tidemark_spark.submit import local_spark_env, run_ingest_job, spark_submit_command

    topic, lake, env = s3_pipeline
    # Raw values: their one pass has the dead-letter crash point before the output commit (values that can
    # be bad commit the output first, and a pause after it would leave B nothing to take over: its recovery
    # rolls a batch with a good record at every offset forward).
    (Path(env["TIDEMARK_PIPELINES_DIR"]) / f"{topic}.yaml").write_text(f"name: {topic}\ntopics: [{topic}]\n"
                                                                         f"table: {topic}\n")
    produced = helpers.produce(topic, 90)
    config = find_pipeline(topic)
    properties = {"bootstrap.servers": helpers.bootstrap()}
    job_env = {**env, **local_spark_env(), "TIDEMARK_KAFKA_PROPERTIES": json.dumps(properties),
               storage.ENV_VAR: store().to_json()}
    plan_a = prepare_batch(config, properties, owner="manual__A", store=store())
    log = tmp_path / "driver_a.log"
    with helpers.paused_run(spark_submit_command(plan_a, "local[2]", config.spark_conf),
                            job_env, log, fault_injection.AFTER_DEAD_LETTERS, "driver A") as stale:
        # A's run is over as far as the orchestrator knows: B takes the batch over and commits it.
        plan_b = prepare_batch(config, properties, owner="manual__B", run_state=lambda run_id: "failed",
                               store=store())
        assert (plan_b.batch_id, plan_b.ranges, plan_b.recovered) == (plan_a.batch_id, plan_a.ranges, True)
        assert run_ingest_job(plan_b, spark_connect, config.spark_conf,
                              extra_env={key: job_env[key] for key in SECRET_ENV_VARS}) == 0
        table, ledger = f"{lake}/{topic}", Ledger(f"{lake}/_tidemark/offsets", store())
        versions = (helpers.table_version(table), ledger.version())
        assert counts(table) == exactly_once(produced)
    stale.wait(timeout=300)
    stale_out = log.read_text()

    assert (helpers.table_version(table), ledger.version()) == versions, stale_out[-4000:]
    assert counts(table) == exactly_once(produced)
    assert {(r.batch_id, r.status, r.dag_run_id) for r in ledger.rows(topic)} == {(1, "committed", "manual__B")}
    assert "continued" in stale_out and "already" in stale_out, stale_out[-4000:]
