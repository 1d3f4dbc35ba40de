"""`make bench-fleet`: a fleet of pipelines, the shape of users with many topics and small batches
(bench/results/fleet.json).

BENCH_FLEET_PIPELINES (50) topics of BENCH_FLEET_PARTITIONS (4) partitions, each filled with
BENCH_FLEET_RECORDS (10,000) events of BENCH_RECORD_BYTES by bench/data.py. Four partitions: a small
topic of a fleet has a few, not one (one would hide the per-partition work of the plan, the ledger and
the checks), and four give each job's read one Spark task per partition, two per core of `local[2]`,
~2,500 records (~0.7 MB) on average, so every contender reads in parallel without per-task overhead
dominating (the producer's sticky partitioner fills a partition a batch of ~870 records at a time, so a
small topic's partitions are uneven: results keep each topic's offsets). The same topics serve every
contender, each into tables of its own.

* **Tidemark, one scheduler tick**, twice: on `make airflow`'s stack as users get it (`scripts/airflow.sh
  up`: LocalExecutor, AIRFLOW__CORE__PARALLELISM=4, PostgreSQL; AIRFLOW_LOCAL_HOME under BENCH_FLEET_WORK,
  .cache/bench-fleet), one pipeline per topic, the YAMLs written before Airflow starts; all DAG runs
  triggered at once through the REST API. Launchers: spark-submit (the default; `spark_default` of type
  spark, `local[2]`, 1g) and the warm path (`spark_default` of type `spark_connect`: a Spark Connect server,
  scripts/connect.sh, `local[2]`, 1g, started before the stack). Each stack first runs one more pipeline's
  DAG, untimed (a user's stack has run before: imports in the page cache, the server's first batch and
  JIT behind it). Measured from the first trigger to the last run's end (Airflow's end_date; every run
  must succeed, then the ledger holds each pipeline's batch committed): wall time, CPU seconds and peak
  RSS of the process trees of the four Airflow services (their task processes and spark-submits
  included), PostgreSQL and, on the warm path, the Connect server (bench.measure.TreesSampler).
* **Structured Streaming AvailableNow** (bench/jobs/available_now.py, Tidemark's spark-submit base, a fresh
  table and checkpoint per topic) run the way a user would: one after another, and BENCH_FLEET_CONCURRENCY
  (4, as Airflow's parallelism) at a time; one untimed job first. Wall time from the first start to the
  last end, CPU seconds and peak RSS of the jobs' trees.

Every output table is checked once: its rows per partition equal the topic's, with as many distinct
offsets (no loss, no duplicate). Target: the warm fleet >= 4x faster (wall) than the faster AvailableNow
variant (bench.summary.FLEET_TARGET_SPEEDUP). BENCH_FLEET_PHASE_TIMEOUT (3600 s) bounds each phase;
BENCH_FLEET_PHASES picks phases (all four by default). Ports (BENCH_FLEET_AIRFLOW_PORT 34580, BENCH_FLEET_PG_PORT
34532, BENCH_FLEET_CONNECT_PORT 34502) and the broker's (scripts/bench_fleet.sh, BENCH_FLEET_KAFKA_PORT 34592) are
private.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import os
import shutil
import signal
import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench import contenders, data, machine, stack
from bench.airflow_services import Airflow, epoch, seconds_between
from bench.knobs import ROOT, BenchSettings, save_result
from bench.measure import TreesSampler
from bench.summary import FLEET_TARGET_SPEEDUP
from devkit import localstack

log = logging.getLogger("bench")
SEQUENTIAL, CONCURRENT, SUBMIT, WARM = "available-now-sequential", "available-now-concurrent", "spark-submit", "warm"
PHASES = (SEQUENTIAL, CONCURRENT, SUBMIT, WARM)


@dataclasses.dataclass(frozen=True)
class Fleet:
    settings: BenchSettings
    topics: list[str]
    offsets: dict[str, dict[int, int]]
    """Each topic's end offset per partition (the records every output must hold, each once)."""
    records: int
    deadline_seconds: float
    ports: dict[str, int]


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, str(default)))


def check_table(uri: str, expected: dict[int, int], what: str) -> int:
    """The table holds each offset of each partition exactly once; its row count."""
    rows = localstack.query(uri, "SELECT kafka_partition AS p, COUNT(*) AS n, COUNT(DISTINCT kafka_offset) AS d, "
                                 "MIN(kafka_offset) AS lo, MAX(kafka_offset) AS hi FROM t GROUP BY kafka_partition")
    found = {r["p"]: r for r in rows}
    for partition, end in expected.items():
        r = found.get(partition, {"n": 0, "d": 0, "lo": None, "hi": None})
        if not (r["n"] == r["d"] == end and (end == 0 or (r["lo"], r["hi"]) == (0, end - 1))):
            raise RuntimeError(f"{what}: partition {partition} of {uri} holds {r['n']} rows, {r['d']} distinct "
                               f"offsets ({r['lo']}..{r['hi']}); expected offsets 0..{end - 1}, each once")
    return sum(r["n"] for r in rows)


def check_ledger(name: str, topic: str, expected: dict[int, int]) -> None:
    """The pipeline's one batch is committed in the ledger over every partition's whole range."""
    from tidemark.ledger.store import COMMITTED, Ledger
    from tidemark.settings import ledger_uri

    rows = Ledger(ledger_uri()).rows(name)
    got = {r.partition: (r.start_offset, r.end_offset) for r in rows if r.status == COMMITTED and r.topic == topic}
    want = {p: (0, end) for p, end in expected.items() if end > 0}  # a partition with no record has no range
    if len(rows) != len(want) or got != want:
        held = [(r.batch_id, r.status, r.partition, r.start_offset, r.end_offset) for r in rows]
        raise RuntimeError(f"pipeline '{name}': the ledger holds {held} (batch, status, partition, start, end); "
                           f"expected one committed batch over {expected} (partition: end offset)")


def produce(settings: BenchSettings, pipelines: int, records: int, partitions: int) -> tuple[list[str], dict]:
    topics = [f"fleet_{i:03d}" for i in range(pipelines)]
    offsets = {}
    for topic in topics:
        data.create_topic(settings, topic, partitions)
        offsets[topic] = data.produce(settings, topic, records, settings.record_bytes)["records_per_partition"]
    return topics, offsets


def available_now_command(fleet: Fleet, topic: str, name: str) -> list[str]:
    settings = fleet.settings
    table = stack.fresh_folder(settings.lake / name)
    checkpoint = stack.fresh_folder(settings.work / "checkpoints" / name)
    return [*stack.spark_submit_base(settings, name.replace("_", "-")), str(contenders.JOBS / "available_now.py"),
            "--topic", topic, "--table", str(table), "--checkpoint", str(checkpoint)]


def _run_job(command: list[str], env: dict, what: str, deadline: float) -> float:
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=max(1, deadline - started))
    if done.returncode != 0:
        raise RuntimeError(f"{what} exited with {done.returncode}:\n{(done.stdout + done.stderr)[-4000:]}")
    return time.monotonic() - started


def available_now_fleet(fleet: Fleet, concurrency: int, tag: str) -> dict:
    """Every topic through its own AvailableNow job, CONCURRENCY at a time (1: one after another)."""
    names = [f"fleet_an_{tag}_{i:03d}" for i in range(len(fleet.topics))]
    commands = [available_now_command(fleet, topic, name) for topic, name in zip(fleet.topics, names, strict=True)]
    env = stack.spark_env(fleet.settings)
    deadline = time.monotonic() + fleet.deadline_seconds
    load = machine.load()["load_1m"]
    sampler = TreesSampler(own_children=True)
    sampler.start()
    started = time.monotonic()
    try:
        with ThreadPoolExecutor(concurrency) as pool:
            seconds = list(pool.map(lambda c: _run_job(c, env, f"the AvailableNow job {c[-5]}", deadline), commands))
        wall = time.monotonic() - started
    finally:
        sampler.stop()
    rows = sum(check_table(str(fleet.settings.lake / n), fleet.offsets[t], f"AvailableNow {n}")
               for t, n in zip(fleet.topics, names, strict=True))
    log.info("AvailableNow, %d at a time: %d jobs in %.1f s, %s", concurrency, len(names), wall, sampler.summary())
    return {"concurrency": concurrency, "jobs": len(names), "wall_seconds": round(wall, 2), **sampler.summary(),
            "job_seconds": _spread(seconds), "rows_checked": rows, "load_1m_at_start": load,
            "load_1m_at_end": machine.load()["load_1m"]}


def _spread(values) -> dict:
    found = [v for v in values if v is not None]
    return {"median": round(statistics.median(found), 2), "min": round(min(found), 2), "max": round(max(found), 2)} \
        if found else {}


def _wait_all(airflow: Airflow, dag_ids: list[str], deadline: float) -> list[dict]:
    while True:
        runs = airflow.runs(dag_ids)
        if len(runs) == len(dag_ids) and all(r["state"] in ("success", "failed") for r in runs):
            return runs
        if time.monotonic() > deadline:
            states = sorted((r["dag_id"], r["state"]) for r in runs if r["state"] not in ("success", "failed"))
            raise RuntimeError(f"{len(states)} DAG run(s) not ended in time: {states[:10]}; logs in "
                               f"{airflow.home / 'logs'}")
        time.sleep(0.5)


def _tick(airflow: Airflow, dag_ids: list[str], roots: dict[str, int], deadline: float) -> dict:
    """All DAG_IDS triggered at once; measured until every run has ended."""
    sampler = TreesSampler(roots)
    sampler.start()
    try:
        first = time.time()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(airflow.trigger, dag_ids))
        last = time.time()
        runs = _wait_all(airflow, dag_ids, deadline)
        observed = time.time()
    finally:
        sampler.stop()
    failed = [r for r in runs if r["state"] != "success"]
    if failed:
        states = {r["dag_id"]: [(t["task_id"], t["state"]) for t in airflow.tasks(r["dag_id"], r["dag_run_id"])]
                  for r in failed[:5]}
        raise RuntimeError(f"{len(failed)} DAG run(s) failed: {states}; logs in {airflow.home / 'logs'}")
    ended = max(epoch(r["end_date"]) for r in runs)
    tasks = {r["dag_id"]: {t["task_id"]: t for t in airflow.tasks(r["dag_id"], r["dag_run_id"])} for r in runs}
    ingest = [t["ingest"] for t in tasks.values()]
    return {"wall_seconds": round(ended - first, 2), "observed_wall_seconds": round(observed - first, 2),
            "trigger_spread_seconds": round(last - first, 2), **sampler.summary(),
            "run_seconds": _spread(seconds_between(r["start_date"], r["end_date"]) for r in runs),
            "ingest_task_seconds": _spread(t.get("duration") for t in ingest),
            "last_ingest_started_after_seconds": round(max(epoch(t["start_date"]) for t in ingest) - first, 2),
            "runs": [{"dag_id": r["dag_id"], "start_date": r["start_date"], "end_date": r["end_date"],
                      **{f"{task}_seconds": t.get("duration") for task, t in tasks[r["dag_id"]].items()}}
                     for r in runs]}


def _write_pipelines(settings: BenchSettings, names: list[str], topics: list[str]) -> None:
    shutil.rmtree(settings.pipelines, ignore_errors=True)
    settings.pipelines.mkdir(parents=True)
    for name, topic in zip(names, topics, strict=True):
        stack.add_pipeline(settings, name, topic)


def tidemark_fleet(fleet: Fleet, launcher: str) -> dict:
    """One scheduler tick of the whole fleet on a fresh `make airflow` stack with LAUNCHER."""
    settings, tag = fleet.settings, launcher.replace("-", "_")
    names = [f"fleet_{tag}_{i:03d}" for i in range(len(fleet.topics))]
    _write_pipelines(settings, [f"fleet_{tag}_warmup", *names], [fleet.topics[0], *fleet.topics])
    spark = {"conn_type": "spark", "host": settings.master}
    connect = None
    if launcher == WARM:
        connect = ConnectServer(settings.work / "connect", fleet.ports["connect"])
        spark = {"conn_type": "spark_connect", "host": "127.0.0.1", "port": fleet.ports["connect"]}
    try:
        if connect:
            connect.up()
        with Airflow(settings, home=settings.work / f"airflow-{tag}", airflow_port=fleet.ports["airflow"],
                     pg_port=fleet.ports["postgres"], AIRFLOW_CONN_SPARK_DEFAULT=json.dumps(spark)) as airflow:
            dag_ids = [stack.dag_id(n) for n in names]
            airflow.wait_for_dags([stack.dag_id(f"fleet_{tag}_warmup"), *dag_ids], timeout=fleet.deadline_seconds)
            warmup = airflow.run_dag(stack.dag_id(f"fleet_{tag}_warmup"), timeout=fleet.deadline_seconds)
            roots = airflow.service_pids() | ({"connect": connect.pid()} if connect else {})
            load = machine.load()["load_1m"]
            log.info("%s: triggering %d DAG runs at once ...", launcher, len(dag_ids))
            tick = _tick(airflow, dag_ids, roots, time.monotonic() + fleet.deadline_seconds)
            up_seconds = airflow.up_seconds
            parallelism = _parallelism(airflow.home)
    finally:
        if connect:
            connect.down()
    for name, topic in zip(names, fleet.topics, strict=True):
        check_table(_config(name).table_uri, fleet.offsets[topic], f"pipeline '{name}'")
        check_ledger(name, topic, fleet.offsets[topic])
    log.info("%s: %d DAG runs in %.1f s: %s", launcher, len(names), tick["wall_seconds"], tick)
    return {"launcher": launcher, "spark": spark, "pipelines": len(names), "airflow_up_seconds": up_seconds,
            "parallelism": parallelism, "executor": "LocalExecutor", "warmup_run_seconds": warmup["run_seconds"],
            **tick, "tables_checked": len(names), "ledger_checked": len(names), "load_1m_at_start": load,
            "load_1m_at_end": machine.load()["load_1m"],
            "connect_up_seconds": connect.up_seconds if connect else None}


def _config(name: str):
    from tidemark.config.pipeline import find_pipeline

    return find_pipeline(name)


def _parallelism(home: Path) -> int:
    """AIRFLOW__CORE__PARALLELISM as scripts/airflow.sh wrote it for its services."""
    for line in (home / "env.sh").read_text().splitlines():
        if line.startswith("export AIRFLOW__CORE__PARALLELISM="):
            return int(line.split("=", 1)[1])
    raise RuntimeError(f"no AIRFLOW__CORE__PARALLELISM in {home / 'env.sh'}")


class ConnectServer:
    """scripts/connect.sh on a private port and home, for the warm phase only."""

    def __init__(self, home: Path, port: int) -> None:
        self.home, self.port = home, port
        self.env = {**os.environ, "CONNECT_PORT": str(port), "CONNECT_HOME": str(home)}
        self.up_seconds: float | None = None

    def _script(self, command: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(ROOT / "scripts" / "connect.sh"), command], env=self.env, capture_output=True,
                              text=True, timeout=300)

    def up(self) -> None:
        started = time.monotonic()
        done = self._script("up")
        if done.returncode != 0:
            raise RuntimeError(f"scripts/connect.sh up (port {self.port}) failed:\n{done.stdout}\n{done.stderr}")
        self.up_seconds = round(time.monotonic() - started, 1)

    def pid(self) -> int:
        return int((self.home / "server.pid").read_text())

    def down(self) -> None:
        self._script("down")


def summarize(out: dict) -> dict:
    phases = out["phases"]
    summary = {name: {k: p[k] for k in ("wall_seconds", "cpu_seconds", "peak_rss_mb")} for name, p in phases.items()}
    now = [p for name, p in phases.items() if name in (SEQUENTIAL, CONCURRENT)]
    if now and WARM in phases:
        better = min(now, key=lambda p: p["wall_seconds"])
        summary["available_now_compared"] = SEQUENTIAL if better["concurrency"] == 1 else CONCURRENT
        summary["warm_speedup"] = round(better["wall_seconds"] / phases[WARM]["wall_seconds"], 2)
        summary["warm_target_met"] = summary["warm_speedup"] >= FLEET_TARGET_SPEEDUP
    if now and SUBMIT in phases:
        better = min(now, key=lambda p: p["wall_seconds"])
        summary["submit_speedup"] = round(better["wall_seconds"] / phases[SUBMIT]["wall_seconds"], 2)
    return summary


def _terminated(*_) -> None:
    raise SystemExit("bench.fleet: SIGTERM; stopping the services it started")  # the finally blocks run


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="[bench %(asctime)s] %(message)s", datefmt="%H:%M:%S")
    for chatty in ("kafka", "httpx"):  # the Kafka clients' connection lines, one line per REST call
        logging.getLogger(chatty).setLevel(logging.WARNING)
    signal.signal(signal.SIGTERM, _terminated)
    work = Path(os.environ.get("BENCH_FLEET_WORK", str(ROOT / ".cache" / "bench-fleet")))
    settings = dataclasses.replace(BenchSettings.from_env(), work=work)
    pipelines, records = _env_int("BENCH_FLEET_PIPELINES", 50), _env_int("BENCH_FLEET_RECORDS", 10_000)
    partitions, concurrency = _env_int("BENCH_FLEET_PARTITIONS", 4), _env_int("BENCH_FLEET_CONCURRENCY", 4)
    chosen = [p for p in os.environ.get("BENCH_FLEET_PHASES", ",".join(PHASES)).split(",") if p]
    if unknown := set(chosen) - set(PHASES):
        raise SystemExit(f"BENCH_FLEET_PHASES: unknown phase(s) {sorted(unknown)}; choose from {', '.join(PHASES)}")
    stack.reset_work(settings)
    stack.configure_environment(settings)
    started = time.monotonic()
    topics, offsets = produce(settings, pipelines, records, partitions)
    produce_seconds = round(time.monotonic() - started, 1)
    log.info("%d topics of %d records on %d partitions in %.0f s", pipelines, records, partitions, produce_seconds)
    fleet = Fleet(settings, topics, offsets, records, float(_env_int("BENCH_FLEET_PHASE_TIMEOUT", 3600)),
                  {"airflow": _env_int("BENCH_FLEET_AIRFLOW_PORT", 34580), "postgres": _env_int("BENCH_FLEET_PG_PORT",
                   34532), "connect": _env_int("BENCH_FLEET_CONNECT_PORT", 34502)})
    out = {"date": dt.date.today().isoformat(), "machine": machine.describe(), "pipelines": pipelines,
           "records_per_pipeline": records, "record_bytes": settings.record_bytes, "partitions": partitions,
           "master": settings.master, "driver_memory": settings.driver_memory, "concurrency": concurrency,
           "produce_seconds": produce_seconds, "records_per_partition": offsets, "phases": {}, "phase_seconds": {}}
    if SEQUENTIAL in chosen or CONCURRENT in chosen:  # one untimed job: jars and Python in the page cache
        _run_job(available_now_command(fleet, topics[0], "fleet_an_warmup"), stack.spark_env(settings),
                 "the warm-up AvailableNow job", time.monotonic() + fleet.deadline_seconds)
    for phase in chosen:
        began = time.monotonic()
        log.info("phase %s ...", phase)
        if phase in (SEQUENTIAL, CONCURRENT):
            sequential = phase == SEQUENTIAL
            out["phases"][phase] = available_now_fleet(fleet, 1 if sequential else concurrency,
                                                       "seq" if sequential else "conc")
        else:
            out["phases"][phase] = tidemark_fleet(fleet, phase)
        out["phase_seconds"][phase] = round(time.monotonic() - began, 1)
    out["summary"] = summarize(out)
    log.info("results: %s", save_result("fleet.json", out))
    print(json.dumps(out["summary"], indent=2))


if __name__ == "__main__":
    main()
