"""`make soak`: outside kills and concurrent runs, repeated, with the exactly-once ledger checked
after every trial. Not part of `make test` (it takes tens of minutes).

  kill trials       : a run through Airflow (`airflow dags test`), the Spark driver JVM killed with
                      SIGKILL at a random moment, then a recovery run through Airflow;
  concurrent trials : two `tidemark run` of the same pipeline started together (bypassing
                      max_active_runs).

After each trial: duplicates = output rows - distinct (topic, partition, offset); lost = offsets of
committed ranges missing from the output. Prints `N trials, D duplicates, L lost` per kind and writes
bench/results/soak.json (soak-s3.json on object storage). Environment: SOAK_TRIALS (20), KAFKA_PORT
(set by scripts/soak.sh), SOAK_LAKE=s3 to keep every table on the local S3 server (S3_PORT, started by
scripts/soak.sh) with credentials from the aws_default connection, SOAK_KINDS=kill or concurrent for
one kind of trial only.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devkit import localstack as helpers  # noqa: E402
from tidemark import storage  # noqa: E402
from tidemark.ledger.store import Ledger  # noqa: E402

WORK = ROOT / ".cache" / "soak"
TRIALS = int(os.environ.get("SOAK_TRIALS", "20"))
BIN = ROOT / ".venv" / "bin"
ON_S3 = os.environ.get("SOAK_LAKE", "local") == "s3"
KINDS = {k.strip() for k in os.environ.get("SOAK_KINDS", "kill,concurrent").split(",")}


def log(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", flush=True)


def audit(lake: str, pipeline: str, result: dict, produced: int) -> str:
    """Add the trial's duplicates and losses to ``result``; returns a summary for the log. Lost
    counts offsets of committed ranges missing from the output, plus records Kafka has that the
    output does not (after the trial's last run, nothing may be left behind)."""
    records, duplicates, lost = _count(lake, pipeline)
    lost += max(sum(helpers.end_offsets(pipeline).values()) - records, 0)
    result["duplicates"] += duplicates
    result["lost"] += lost
    return f"records={records}/{produced}, duplicates={duplicates}, lost={lost}"


def _count(lake: str, pipeline: str) -> tuple[int, int, int]:
    """(records, duplicates, lost) of the output against the ledger's committed ranges."""
    table = f"{lake}/{pipeline}"
    stats = helpers.query(table, "SELECT COUNT(*) AS n, COUNT(DISTINCT (kafka_topic, kafka_partition, kafka_offset)) "
                                 "AS uniq FROM t")[0]
    present = {(r["p"]): r["n"] for r in helpers.query(
        table, "SELECT kafka_partition AS p, COUNT(DISTINCT kafka_offset) AS n FROM t GROUP BY kafka_partition")}
    committed = {}
    store = (storage.ObjectStore(helpers.S3_ACCESS_KEY, helpers.S3_SECRET_KEY, endpoint_url=helpers.s3_endpoint())
             if ON_S3 else None)
    for row in Ledger(f"{lake}/_tidemark/offsets", store).rows(pipeline):
        if row.status == "committed":
            committed[row.partition] = committed.get(row.partition, 0) + (row.end_offset - row.start_offset)
    lost = sum(max(n - present.get(p, 0), 0) for p, n in committed.items())
    return stats["n"], stats["n"] - stats["uniq"], lost


def spark_driver_pids(app_name: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", f"org.apache.spark.deploy.SparkSubmit.*{app_name}"], capture_output=True,
                         text=True).stdout
    return [int(p) for p in out.split()]


def kill_trials(env: dict, pipelines: Path, lake: str) -> dict:
    topic = helpers.create_topic(helpers.unique("soak_kill"), partitions=4)
    (pipelines / f"{topic}.yaml").write_text(f"name: {topic}\ntopics: [{topic}]\ntable: {topic}\nretries: 0\n")
    dag_id = f"tidemark_ingest__{topic}"
    produced, landed = 0, 0
    result = {"trials": TRIALS, "duplicates": 0, "lost": 0}
    for trial in range(1, TRIALS + 1):
        count = random.randint(500, 5000)
        helpers.produce(topic, count, start=produced)
        produced += count
        run = subprocess.Popen([str(BIN / "airflow"), "dags", "test", dag_id], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        pids: list[int] = []
        while run.poll() is None and not pids:
            pids = spark_driver_pids(f"tidemark-{topic}")
            time.sleep(0.05)
        time.sleep(random.uniform(0, 12))
        killed = False
        for pid in spark_driver_pids(f"tidemark-{topic}"):
            os.kill(pid, signal.SIGKILL)
            killed = True
        landed += killed
        run.wait(timeout=900)
        recovery = subprocess.run([str(BIN / "airflow"), "dags", "test", dag_id], env=env, capture_output=True,
                                  text=True, timeout=900)
        if recovery.returncode != 0 or "state=success" not in recovery.stdout + recovery.stderr:
            log(f"kill trial {trial}: the recovery run failed:\n{(recovery.stdout + recovery.stderr)[-3000:]}")
            result["failed_recoveries"] = result.get("failed_recoveries", 0) + 1
        log(f"kill trial {trial}/{TRIALS}: killed mid-run={killed}, {audit(lake, topic, result, produced)}")
    result["kills_landed_mid_run"] = landed
    return result


def concurrent_trials(env: dict, pipelines: Path, lake: str) -> dict:
    topic = helpers.create_topic(helpers.unique("soak_twice"), partitions=4)
    (pipelines / f"{topic}.yaml").write_text(f"name: {topic}\ntopics: [{topic}]\ntable: {topic}\n")
    produced = 0
    result = {"trials": TRIALS, "duplicates": 0, "lost": 0, "both_succeeded_with_data": 0, "busy_refusals": 0}
    for trial in range(1, TRIALS + 1):
        count = random.randint(500, 5000)
        helpers.produce(topic, count, start=produced)
        produced += count
        runs = [subprocess.Popen([str(BIN / "tidemark"), "run", topic], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for _ in range(2)]
        outcomes = [r.communicate(timeout=900) for r in runs]
        busy = sum("another run holds the pipeline" in err for _, err in outcomes)
        committed = sum(r.returncode == 0 and "frozen" in out for r, (out, _) in zip(runs, outcomes, strict=True))
        result["busy_refusals"] += busy
        result["both_succeeded_with_data"] += committed == 2
        other_failures = [err[-2000:] for r, (_, err) in zip(runs, outcomes, strict=True)
                          if r.returncode != 0 and "another run holds the pipeline" not in err]
        for err in other_failures:
            log(f"concurrent trial {trial}: a run failed for another reason:\n{err}")
        subprocess.run([str(BIN / "tidemark"), "run", topic], env=env, capture_output=True, timeout=900)  # converge
        log(f"concurrent trial {trial}/{TRIALS}: committed by {committed} run(s), busy refusals={busy}, "
            f"{audit(lake, topic, result, produced)}")
    return result


def main() -> None:
    pipelines, airflow_home = WORK / "pipelines", WORK / "airflow"
    lake = helpers.s3_lake("soak") if ON_S3 else str(WORK / "lake")
    subprocess.run(["rm", "-rf", str(WORK)], check=True)
    pipelines.mkdir(parents=True)
    extra = {}
    if ON_S3:
        extra["AIRFLOW_CONN_AWS_DEFAULT"] = helpers.aws_connection()
    log(f"lake: {lake}")
    env = helpers.service_env(pipelines, lake, AIRFLOW_HOME=str(airflow_home), **extra,
                              AIRFLOW__CORE__DAGS_FOLDER=str(ROOT / "dags"), AIRFLOW__CORE__LOAD_EXAMPLES="False")
    subprocess.run([str(BIN / "airflow"), "db", "migrate"], env=env, check=True, capture_output=True)
    started = time.monotonic()
    none = {"trials": 0, "duplicates": 0, "lost": 0}
    kills = kill_trials(env, pipelines, lake) if "kill" in KINDS else {**none, "kills_landed_mid_run": 0}
    concurrent = (concurrent_trials(env, pipelines, lake) if "concurrent" in KINDS
                  else {**none, "busy_refusals": 0, "both_succeeded_with_data": 0})
    elapsed = time.monotonic() - started
    print(f"kill -9 of the Spark driver: {kills['trials']} trials, {kills['duplicates']} duplicates, "
          f"{kills['lost']} lost ({kills['kills_landed_mid_run']} kills landed mid-run)")
    print(f"two concurrent runs:         {concurrent['trials']} trials, {concurrent['duplicates']} duplicates, "
          f"{concurrent['lost']} lost ({concurrent['busy_refusals']} refused as busy, "
          f"{concurrent['both_succeeded_with_data']} trials where both committed data)")
    print(f"wall time: {elapsed / 60:.1f} min")
    suffix = "" if KINDS >= {"kill", "concurrent"} else "-" + "-".join(sorted(KINDS))
    out = ROOT / "bench" / "results" / (f"soak-s3{suffix}.json" if ON_S3 else f"soak{suffix}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"lake": "s3" if ON_S3 else "local", "kill_trials": kills,
                               "concurrent_trials": concurrent, "wall_seconds": round(elapsed),
                               "date": time.strftime("%Y-%m-%d")}, indent=2) + "\n")
    if kills["duplicates"] or kills["lost"] or concurrent["duplicates"] or concurrent["lost"]:
        sys.exit("soak: exactly-once was violated")


if __name__ == "__main__":
    main()
