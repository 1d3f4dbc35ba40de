"""Faults, case 8 (security): Kafka over SASL_PLAINTEXT with SCRAM-SHA-512, the credentials only
in the Airflow connection. A random canary password carries the planner, the Spark read and the
CLI end to end, and then appears zero times in task logs, XCom (and the rest of the metadata DB),
the plan JSON, the command lines `ps` shows, Spark event logs, the output of every process, and the
errors of runs with a wrong password. The pipeline's values are Avro: a second canary, the password of
the Schema Registry connection (basic auth), goes with the plan task's requests to the registry and
appears nowhere either. A control test plants a canary to prove the searches find one.

scripts/kafka.sh opens the SASL listener on KAFKA_PORT+2; the tests create their own SCRAM user
with a random password through the PLAINTEXT listener (AdminClient, so it is on no command line).
The local registry (scripts/registry.sh) runs without auth and takes any credentials: the test checks,
in this process (where dag.test() runs the plan task), that its requests carried them."""

from __future__ import annotations

import base64
import json
import os
import secrets
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterable
from pathlib import Path

import pytest

from tests import helpers
from tidemark_spark.submit import INGEST_SCRIPT

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{password}";'
REGISTRY_USER = "tm_registry"
ORDER = {"type": "record", "name": "Order", "fields": [{"name": "order_id", "type": "long"},
                                                        {"name": "amount", "type": "double"}]}


def sasl_bootstrap() -> str:
    port = os.environ.get("KAFKA_SASL_PORT") or str(int(os.environ.get("KAFKA_PORT", "9092")) + 2)
    return f"127.0.0.1:{port}"


def create_scram_user(user: str, password: str) -> None:
    """A SCRAM-SHA-512 user, created through the PLAINTEXT listener, usable once the broker has it."""
    from kafka.admin import KafkaAdminClient, ScramMechanism, UserScramCredentialUpsertion

    admin = KafkaAdminClient(bootstrap_servers=helpers.bootstrap())
    try:
        upsert = UserScramCredentialUpsertion(user, ScramMechanism.SCRAM_SHA_512, password, iterations=4096)
        assert admin.alter_user_scram_credentials([upsert]) == {user: None}
        helpers.wait_until(lambda: admin.describe_user_scram_credentials([user]).get(user, {}).get("credential_infos"),
                           30, f"the broker to list the SCRAM user {user}")
    finally:
        admin.close()


def sasl_properties(user: str, password: str) -> dict[str, str]:
    return {"bootstrap.servers": sasl_bootstrap(), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": JAAS.format(user=user, password=password)}


def connection(properties: dict[str, str]) -> str:
    """An AIRFLOW_CONN_* value: the only place the tests put a password."""
    return json.dumps({"conn_type": "kafka", "extra": properties})


def registry_connection(url: str, password: str) -> str:
    """An AIRFLOW_CONN_* value for the Schema Registry, with basic-auth credentials."""
    return json.dumps({"conn_type": "http", "host": url, "login": REGISTRY_USER, "password": password})


def spy_on_registry_requests(monkeypatch, url: str) -> list[str | None]:
    """The Authorization header of every HTTP request to ``url`` that this process sends from now
    on (requests' transport adapter), in order. Nothing is written anywhere."""
    from requests.adapters import HTTPAdapter

    seen: list[str | None] = []
    send = HTTPAdapter.send

    def spying(self, request, *args, **kwargs):
        if request.url.startswith(url):
            seen.append(request.headers.get("Authorization"))
        return send(self, request, *args, **kwargs)

    monkeypatch.setattr(HTTPAdapter, "send", spying)
    return seen


def registry_lines(log: str, url: str, subject: str) -> list[str]:
    """The log lines naming the registry a plan read ``subject`` from (RegistryClient.versions)."""
    return [line for line in log.splitlines() if f"schema registry {url}: subject '{subject}'" in line]


class CommandLines(threading.Thread):
    """Every process's command line, as `ps -eww -o args` shows it, read from /proc every 0.2 s while the test
    runs. It reads /proc instead of running ps, so it starts no process: a thread that does, while another thread
    forks without exec (the DAG runs in this process with `dag.test()`, its listeners with it), can have its pipes
    inherited by that fork and wait, without failing, until the fork exits. One CI run's sampler took 5 samples,
    none failed, in a whole test and never saw spark-submit."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.lines: set[str] = set()
        self.samples = 0
        self.errors: list[str] = []
        self._halt = threading.Event()

    @staticmethod
    def sample() -> set[str]:
        """The command lines of the processes running now (a process that ends while it is read is left out)."""
        found = set()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                raw = Path("/proc", pid, "cmdline").read_bytes()
            except OSError:  # gone, or not ours to read
                continue
            if raw:  # kernel threads have none
                found.add(raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace"))
        return found

    def run(self) -> None:
        # a sample that fails is counted and the sampling goes on
        while not self._halt.is_set():
            try:
                # a new set, never one changed in place: the test iterates `lines` while this thread samples
                self.lines = self.lines | self.sample()
                self.samples += 1
            except OSError as error:
                self.errors.append(repr(error))
            self._halt.wait(0.2)

    def __str__(self) -> str:
        return f"ps sampler: {self.samples} samples, {len(self.errors)} failed {self.errors[-3:]}"

    def stop(self) -> set[str]:
        self._halt.set()
        self.join(timeout=10)
        return self.lines


# Runs in a child process: opening and closing the metadata DB's files here, with plain file calls,
# would drop every POSIX lock this process's SQLite connections hold on them (locks belong to the
# process, not the descriptor). A CLI process that then closed the DB last would checkpoint and
# delete airflow.db-wal/-shm under the open connections ("disk I/O error" at the next query).
_FILES_WITH = """
import json, sys
from pathlib import Path
needle, hits = sys.stdin.read().encode(), {}
for root in map(Path, sys.argv[1:]):
    for path in ([root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())):
        count = path.read_bytes().count(needle)
        if count:
            hits[str(path)] = count
print(json.dumps(hits))
"""


def files_with(secret: str, roots: Iterable[Path]) -> dict[str, int]:
    """Files under the roots holding the secret, as bytes (SQLite databases and logs alike). The
    secret goes to the searching process on stdin, never on its command line."""
    found = subprocess.run([sys.executable, "-c", _FILES_WITH, *map(str, roots)], input=secret, capture_output=True,
                           text=True, timeout=300, check=True)
    return json.loads(found.stdout)


def texts_with(secret: str, texts: dict[str, str]) -> dict[str, int]:
    return {name: text.count(secret) for name, text in texts.items() if secret in text}


def metadata_db(airflow_home: Path) -> Path:
    return airflow_home / "airflow.db"


def airflow_files(airflow_home: Path) -> list[Path]:
    """Task logs, the OpenLineage events (with the full task info) and the metadata DB's files: the
    pytest process keeps the SQLite DB open, so its newest pages may still be in the write-ahead log
    (airflow.db-wal) rather than in airflow.db."""
    from tests.e2e.conftest import OPENLINEAGE_FILE

    lineage = airflow_home / OPENLINEAGE_FILE
    assert lineage.is_file(), f"no OpenLineage events in {lineage}: the leak search would miss them"
    return [airflow_home / "logs", lineage, *sorted(airflow_home.glob(metadata_db(airflow_home).name + "*"))]


def xcom_values(airflow_home: Path, dag_id: str) -> dict[str, str]:
    """Task id -> the XCom value as stored (Airflow 3 keeps JSON text)."""
    with sqlite3.connect(metadata_db(airflow_home)) as db:
        rows = db.execute("SELECT task_id, key, value FROM xcom WHERE dag_id = ?", (dag_id,)).fetchall()
    return {f"{task}/{key}": value if isinstance(value, str) else bytes(value).decode() for task, key, value in rows}


def event_logs(events: Path) -> dict[str, str]:
    """Spark event logs (uncompressed JSON lines): file -> text."""
    files = [p for p in events.rglob("*") if p.is_file() and p.name.startswith("events_")]
    logs = {str(p): p.read_text() for p in files}
    for name, text in logs.items():
        assert json.loads(text.splitlines()[0])["Event"] == "SparkListenerLogStart", f"{name} is not plain JSON"
    return logs


def process_output(result: subprocess.CompletedProcess) -> str:
    return (result.stdout or "") + (result.stderr or "")


def test_the_leak_searches_find_a_planted_canary(tmp_path):
    """The searches below can fail: each finds a canary planted where a leak would put it."""
    canary = "canary" + secrets.token_hex(16)
    (tmp_path / "logs" / "dag_id=x" / "run_id=y").mkdir(parents=True)
    (tmp_path / "logs" / "dag_id=x" / "run_id=y" / "attempt=1.log").write_text(f"a log line {canary}\n")
    with sqlite3.connect(tmp_path / "airflow.db") as db:
        db.execute("CREATE TABLE xcom (dag_id TEXT, task_id TEXT, key TEXT, value TEXT)")
        db.execute("INSERT INTO xcom VALUES ('d', 'plan', 'return_value', ?)", (json.dumps({"p": canary}),))
    events = tmp_path / "events" / "eventlog_v2_local-1"
    events.mkdir(parents=True)
    (events / "events_1_local-1").write_text(json.dumps({"Event": "SparkListenerLogStart"}) + "\n"
                                              + json.dumps({"Spark Properties": {"k": canary}}) + "\n")
    assert files_with(canary, [tmp_path / "logs"]) == {str(tmp_path / "logs/dag_id=x/run_id=y/attempt=1.log"): 1}
    assert list(files_with(canary, [tmp_path / "airflow.db"]).values()) == [1]
    assert texts_with(canary, xcom_values(tmp_path, "d")) == {"plan/return_value": 1}
    assert list(texts_with(canary, event_logs(tmp_path / "events")).values()) == [1]
    planted = f"INFO - schema registry http://r:1/api: subject 's-value' has versions [1] (ids [7]) {canary}\n"
    assert [line for line in registry_lines(planted + f"other {canary}\n", "http://r:1/api", "s-value")
            if canary in line] == [planted.strip()]

    sampler = CommandLines()
    sampler.start()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)", f"--password={canary}"])
    try:
        helpers.wait_until(lambda: any(canary in line for line in sampler.lines), 10,
                           "the command-line sampler to see the sleeper's --password argument", interval=0.1)
    finally:
        sleeper.kill()
        lines = sampler.stop()
    assert texts_with(canary, {"ps": "\n".join(lines)}) == {"ps": 1}


@pytest.fixture
def sasl_stack(stack, tmp_path):
    """The e2e stack with the Kafka connection on the SASL listener and a fresh SCRAM user whose
    random password is the canary. No other connection points at Kafka."""
    user, canary = helpers.unique("tm_user"), "canary" + secrets.token_hex(16)
    create_scram_user(user, canary)
    stack.env.pop("AIRFLOW_CONN_KAFKA_DEFAULT", None)
    stack.env["AIRFLOW_CONN_KAFKA_SASL"] = connection(sasl_properties(user, canary))
    events = tmp_path / "spark-events"
    events.mkdir()
    sampler = CommandLines()
    sampler.start()
    yield stack, user, canary, events, sampler
    sampler.stop()


def event_log_conf(events: Path) -> dict[str, str]:
    return {"spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri(), "spark.eventLog.compress": "false"}


def secured_pipeline(stack, topic: str, events: Path, **extra) -> str:
    return stack.add_pipeline(topic, [topic], kafka_conn_id="kafka_sasl", retries=0, spark_conf=event_log_conf(events),
                              **extra)


def test_sasl_scram_end_to_end_and_the_password_appears_nowhere(sasl_stack, airflow_home, schema_registry,
                                                                 monkeypatch):
    stack, user, canary, events, sampler = sasl_stack
    registry_canary = "canary" + secrets.token_hex(16)
    stack.env.pop("AIRFLOW_CONN_SCHEMA_REGISTRY_DEFAULT", None)
    stack.env["AIRFLOW_CONN_SCHEMA_REGISTRY_SASL"] = registry_connection(schema_registry, registry_canary)
    topic = helpers.create_topic(helpers.unique("sasl"), partitions=3)
    dag_id = secured_pipeline(stack, topic, events, value_format="avro", schema_registry_conn_id="schema_registry_sasl")
    schema_id = helpers.register_schema(f"{topic}-value", ORDER)
    for p in range(3):
        helpers.produce_values(topic, [helpers.avro_value(schema_id, ORDER, {"order_id": i, "amount": i * 1.5})
                                       for i in range(p, 90, 3)], partition=p)
    registry_auth = spy_on_registry_requests(monkeypatch, schema_registry)

    # The SASL listener takes no unauthenticated client: whatever worked below used the password.
    from tidemark.errors import KafkaUnavailableError
    from tidemark.kafka.client import KafkaOffsets

    with pytest.raises(KafkaUnavailableError):
        KafkaOffsets({"bootstrap.servers": sasl_bootstrap()}, timeout_ms=3000)

    # 1. plan (kafka-python; the registry's schemas with basic auth), ingest (Spark's Kafka source,
    # from_avro) and report, all through Airflow over SASL
    run = stack.run_dag(dag_id)
    assert run.state == "success", run.log[-6000:]
    assert run.task_states == {"plan": "success", "ingest": "success"}
    assert helpers.query(str(stack.lake / topic), "SELECT COUNT(*) AS n, COUNT(DISTINCT (kafka_partition, "
                                                  "kafka_offset)) AS u, SUM(order_id) AS s FROM t") == \
        [{"n": 90, "u": 90, "s": sum(range(90))}]
    expected_auth = "Basic " + base64.b64encode(f"{REGISTRY_USER}:{registry_canary}".encode()).decode()
    assert registry_auth, "the plan task sent no request to the Schema Registry"
    assert all(auth == expected_auth for auth in registry_auth), "a registry request without the connection's login"
    # the plan task names the registry it read: by its URL, without the password (not even masked)
    named = registry_lines(run.log, schema_registry, f"{topic}-value")
    assert named, f"no log line names the registry {schema_registry}"
    assert not [line for line in named if registry_canary in line or "***" in line], named
    ends = helpers.end_offsets(topic)
    assert helpers.describe_group(topic) == {p: (end, 0) for p, end in ends.items()}  # mirrored over SASL

    # 2. the CLI outside Airflow reads the same connection (AIRFLOW_CONN_KAFKA_SASL)
    shown = stack.tidemark("offsets", "show", topic, "--json")
    assert shown.returncode == 0, shown.stderr
    assert {o["partition"]: (o["committed_offset"], o["lag"]) for o in json.loads(shown.stdout)} == \
        {p: (end, 0) for p, end in ends.items()}
    lag = stack.tidemark("lag", topic)
    assert lag.returncode == 0 and f"total lag of '{topic}': 0" in lag.stdout, lag.stderr

    # 3. search everything for the canary
    lines = sampler.stop()
    submits = [line for line in lines if INGEST_SCRIPT in line and "--plan" in line and topic in line]
    assert submits, f"{sampler} never saw this pipeline's spark-submit"
    xcoms = xcom_values(airflow_home, dag_id)
    plan = json.loads(xcoms["plan/return_value"])
    plan = json.loads(plan) if isinstance(plan, str) else plan
    assert plan["pipeline"] == topic and {r["topic"] for r in plan["ranges"]} == {topic}
    events_text = event_logs(events)
    # the read, through the Kafka source's DataSource V2 scan (spark_io.read_ranges)
    assert any("BatchScan KafkaTable" in text and topic in text for text in events_text.values()), \
        "no Kafka read logged"
    # dag.test() writes no task log files: run.log holds every task's lines as Airflow printed them
    for task_line in ("batch 1 frozen", "Spark-Submit cmd", f"batch 1 committed to {stack.lake / topic}",
                      "total lag: 0"):
        assert task_line in run.log, task_line
    assert metadata_db(airflow_home) in airflow_files(airflow_home)
    for secret in (canary, registry_canary):
        assert files_with(secret, [*airflow_files(airflow_home), stack.lake, events]) == {}
        assert texts_with(secret, {**xcoms, "plan": json.dumps(plan), "ps": "\n".join(lines), **events_text,
                                   "task logs": run.log, "offsets show": process_output(shown),
                                   "lag": process_output(lag)}) == {}
    assert not [line for line in submits if "required username=" in line or user in line]


def test_a_wrong_password_fails_clearly_without_echoing_it_and_loses_nothing(sasl_stack, airflow_home):
    stack, user, canary, events, sampler = sasl_stack
    wrong = "wrong" + secrets.token_hex(16)
    stack.env["AIRFLOW_CONN_KAFKA_WRONG"] = connection(sasl_properties(user, wrong))
    topic = helpers.create_topic(helpers.unique("saslbad"), partitions=2)
    secured_pipeline(stack, topic, events)
    helpers.produce(topic, 40)
    bad = helpers.unique("saslbad")
    # 15 s: kafka-python sometimes sees only a disconnect, not the broker's refusal, on one try (more
    # often under load); bootstrap retries about once a second within the timeout
    bad_dag = stack.add_pipeline(bad, [topic], kafka_conn_id="kafka_wrong", retries=3, retry_delay_seconds=1,
                                 kafka_timeout_seconds=15)
    outputs: dict[str, str] = {}

    # 1. Airflow: the plan task fails at once (no retry can fix credentials), naming the cause
    run = stack.run_dag(bad_dag)
    outputs["task logs (wrong)"] = run.log
    assert run.state == "failed"
    assert "refused the credentials of the Kafka connection" in run.log
    assert "SCRAM-SHA-512" in run.log
    assert run.task_states["plan"] == "failed"  # not up_for_retry

    # 2. the CLI: exit code 2 and the same message
    shown = stack.tidemark("offsets", "show", bad)
    outputs["offsets show (wrong)"] = process_output(shown)
    # exit code 2 either way; the wording depends on what kafka-python saw: over SASL a refused login
    # sometimes reaches it only as disconnects (steps 1 and 3 check the "refused" wording)
    assert shown.returncode == 2
    assert ("refused the credentials of the Kafka connection" in shown.stderr
            or "check the Kafka connection (and its SASL credentials)" in shown.stderr), shown.stderr[-2000:]

    # 3. Spark: a batch frozen with the right password, read with a wrong one. The freeze runs in a
    # process of its own on purpose: step 4 needs the batch's owner to be gone. It opens the run as the CLI
    # does: the connection is an AIRFLOW_CONN_ variable, read without importing Airflow (the Airflow side's
    # lookup over SASL is the DAG run's, in the test above).
    freeze = subprocess.run(
        [sys.executable, "-c", "import sys\nfrom tidemark_cli.connection_commands import open_run\n"
         "print(open_run(sys.argv[1]).prepare().to_json())", topic],
        env=stack.env, capture_output=True, text=True, timeout=120)
    outputs["freeze"] = process_output(freeze)
    assert freeze.returncode == 0, outputs["freeze"]
    from tidemark.batch.plan import BatchPlan
    from tidemark_spark.submit import local_spark_env, spark_submit_command

    plan = BatchPlan.from_json(freeze.stdout.strip().splitlines()[-1])
    assert plan.batch_id == 1 and plan.total_offsets == 40
    spark = subprocess.run(
        spark_submit_command(plan, "local[2]", event_log_conf(events)),
        env={**stack.env, **local_spark_env(),
             "TIDEMARK_KAFKA_PROPERTIES": json.dumps(sasl_properties(user, wrong))},
        capture_output=True, text=True, timeout=600)
    outputs["spark-submit (wrong)"] = process_output(spark)
    assert spark.returncode != 0
    assert "KafkaAuthenticationError" in outputs["spark-submit (wrong)"]
    assert "refused the credentials of the Kafka connection (SaslAuthenticationException" in outputs[
        "spark-submit (wrong)"]
    assert helpers.query_or_none(str(stack.lake / topic)) is None

    # 4. with the right password the CLI runs the same frozen batch (its owner, the process that froze
    # it, is gone): every record once
    ran = stack.tidemark("run", topic)
    outputs["tidemark run"] = process_output(ran)
    assert ran.returncode == 0, outputs["tidemark run"][-4000:]
    assert helpers.query(str(stack.lake / topic), "SELECT COUNT(*) AS n, COUNT(DISTINCT (kafka_partition, "
                                                  "kafka_offset)) AS u, MAX(ingest_batch_id) AS b FROM t") == \
        [{"n": 40, "u": 40, "b": 1}]

    # 5. neither password, nor the JAAS config that holds them, in anything these runs left
    lines = sampler.stop()
    assert any(INGEST_SCRIPT in line for line in lines), f"{sampler} never saw spark-submit"
    searched = {**outputs, "ps": "\n".join(lines), **event_logs(events), **xcom_values(airflow_home, bad_dag)}
    for secret in (canary, wrong, "ScramLoginModule required"):
        assert texts_with(secret, searched) == {}, secret
        assert files_with(secret, [*airflow_files(airflow_home), stack.lake, events]) == {}, secret
