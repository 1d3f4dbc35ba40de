"""`make bench-profile`: where the raw-value ingest job's time goes, next to the plain batch.

The backlog of `make bench` (BENCH_RECORDS events of BENCH_RECORD_BYTES on BENCH_PARTITIONS
partitions). Each repetition (BENCH_PROFILE_REPEATS, default 2) runs the Tidemark ingest job (the
`tidemark run` spark-submit) and the plain batch (`bench/jobs/plain_batch.py`, same spark-submit up
to the script), alternating which goes first, both with Spark's event log on and both under py-spy
(`record --pid <the driver> --idle --threads`, 50 samples/s, raw stacks):

* the JVM side, from the event log: the time from the JVM's start to the first Spark job, each job's
  wall time, and the tasks' run time, CPU time and GC time summed;
* the Python side, from py-spy: for the driver's main thread, the share of samples under each of a
  few functions (the session start, the Delta write, Tidemark's checks before and after it, imports).

Results: bench/results/profile.json (the collapsed stacks stay in .cache/bench/profile/).
"""

from __future__ import annotations

import collections
import datetime as dt
import json
import logging
import os
import shutil
import statistics
import subprocess
import threading
import time
from pathlib import Path

import psutil

from bench import data, machine, stack
from bench.contenders import JOBS
from bench.knobs import BIN, BenchSettings
from bench.measure import check, run_measured

log = logging.getLogger("bench")
RATE = 50

# Functions of the driver's main thread whose inclusive share of the samples is reported, by a label.
PYTHON_SPANS = {
    "imports (module loading)": ("_find_and_load",),
    "Spark session start (getOrCreate)": ("getOrCreate",),
    "the Delta write (DataFrameWriter.save: the one pass over Kafka)": ("save",),
    "Tidemark: output marker and frozen-plan checks before the read (delta-rs)": ("check_plan_is_frozen",
                                                                                   "output_txn_version"),
    "Tidemark: finalize (tables checked against the frozen ranges, ledger commit)": ("finalize_batch",),
    "Spark stop": ("stop",),
}


def add_task(tasks: collections.Counter, event: dict) -> None:
    """Add one SparkListenerTaskEnd event's metrics to ``tasks`` (tasks, run, CPU, GC and deserialize time,
    records read)."""
    metrics = event.get("Task Metrics") or {}
    tasks["tasks"] += 1
    tasks["run_ms"] += metrics.get("Executor Run Time", 0)
    tasks["cpu_ns"] += metrics.get("Executor CPU Time", 0)
    tasks["gc_ms"] += metrics.get("JVM GC Time", 0)
    tasks["deserialize_ms"] += metrics.get("Executor Deserialize Time", 0)
    tasks["records_read"] += (metrics.get("Input Metrics") or {}).get("Records Read", 0)


def _span(job: dict) -> float:
    return round((job.get("completed", job["submitted"]) - job["submitted"]) / 1000, 2)


def _event_log(folder: Path) -> dict:
    """Parse the one event log in FOLDER: start-up, jobs and task totals (seconds)."""
    [path] = [p for p in folder.rglob("*") if p.is_file() and not p.name.startswith((".", "appstatus"))]
    app_start = app_end = None
    jobs: dict[int, dict] = {}
    tasks = collections.Counter()
    for line in path.read_text().splitlines():
        event = json.loads(line)
        kind = event["Event"]
        if kind == "SparkListenerApplicationStart":
            app_start = event["Timestamp"]
        elif kind == "SparkListenerApplicationEnd":
            app_end = event["Timestamp"]
        elif kind == "SparkListenerJobStart":
            props = event.get("Properties") or {}
            jobs[event["Job ID"]] = {"submitted": event["Submission Time"],
                                     "what": props.get("callSite.short") or props.get("spark.job.description", "")}
        elif kind == "SparkListenerJobEnd":
            jobs[event["Job ID"]]["completed"] = event["Completion Time"]
        elif kind == "SparkListenerTaskEnd":
            add_task(tasks, event)
    ordered = sorted(jobs.values(), key=lambda j: j["submitted"])
    first = ordered[0]["submitted"] if ordered else app_end
    return {"app_start_to_first_job_seconds": round((first - app_start) / 1000, 2),
            "jobs": [{"what": j["what"], "seconds": _span(j)} for j in ordered],
            "jobs_seconds": round(sum(_span(j) for j in ordered), 2),
            "last_job_to_app_end_seconds": round((app_end - max(j.get("completed", 0) for j in ordered)) / 1000, 2)
            if ordered and app_end else None,
            "tasks": tasks["tasks"], "task_run_seconds": round(tasks["run_ms"] / 1000, 1),
            "task_cpu_seconds": round(tasks["cpu_ns"] / 1e9, 1), "task_gc_seconds": round(tasks["gc_ms"] / 1000, 1),
            "task_deserialize_seconds": round(tasks["deserialize_ms"] / 1000, 1),
            "records_read": tasks["records_read"]}


def _python_profile(raw: Path) -> dict:
    """py-spy's raw stacks of the driver (``thread (TID): NAME;frame;... count``) -> seconds of its
    main thread under each span."""
    spans = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack_text, _, count = line.rpartition(" ")
        frames = stack_text.split(";")
        if not frames[0].endswith(": MainThread"):
            continue  # py4j's and Spark's helper threads
        n = int(count)
        total += n
        names = {f.split(" (")[0].strip().rpartition(".")[2] for f in frames[1:]}  # DataFrameWriter.save: save
        for label, functions in PYTHON_SPANS.items():
            if names & set(functions):
                spans[label] += n
    return {"samples": total, "seconds": round(total / RATE, 1),
            "spans": {label: round(spans[label] / RATE, 2) for label in PYTHON_SPANS}}


class _DriverSpy(threading.Thread):
    """Waits for the job's Python driver (a process whose script is SCRIPT, started by spark-submit's
    JVM) and records it with py-spy until it exits."""

    def __init__(self, script: str, raw: Path) -> None:
        super().__init__(daemon=True)
        self.script, self.raw, self.started = script, raw, time.time()
        self.spy: subprocess.Popen | None = None
        self.done = threading.Event()

    def _driver(self) -> int | None:
        for proc in psutil.process_iter(["cmdline", "create_time"]):
            cmd = proc.info["cmdline"] or []
            if len(cmd) > 1 and cmd[1].endswith(self.script) and (proc.info["create_time"] or 0) >= self.started - 1:
                return proc.pid
        return None

    def run(self) -> None:
        while not self.done.is_set():
            if (pid := self._driver()) is not None:
                self.spy = subprocess.Popen(
                    [str(BIN / "py-spy"), "record", "--pid", str(pid), "--idle", "--threads", "--rate", str(RATE),
                     "--format", "raw", "--output", str(self.raw)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                self.spy.wait()
                return
            time.sleep(0.05)

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=60)


def _profiled(settings: BenchSettings, name: str, command: list[str], folder: Path, script: str) -> dict:
    events = folder / "events"
    events.mkdir(parents=True)
    raw = folder / "stacks.txt"
    command = [command[0], "--conf", "spark.eventLog.enabled=true", "--conf", f"spark.eventLog.dir={events}",
               "--conf", "spark.eventLog.compress=false", "--conf", "spark.eventLog.rolling.enabled=false",
               *command[1:]]
    spy = _DriverSpy(script, raw)
    spy.start()
    try:
        measured = check(run_measured(command, stack.spark_env(settings)), name)
    finally:
        spy.stop()
    return {"wall_seconds": round(measured.wall_seconds, 2), "jvm": _event_log(events),
            "python": _python_profile(raw) if raw.exists() else None}


def one(settings: BenchSettings, topic: str, name: str, rep: int, work: Path) -> dict:
    folder = work / f"{name}-{rep}"
    if name == "tidemark_job":
        config = stack.add_pipeline(settings, f"bench_profile_{rep}", topic)
        plan, _ = stack.plan_batch(settings, config)
        result = _profiled(settings, name, stack.ingest_command(settings, plan)[0], folder, "ingest.py")
        if stack.table_count(config.table_uri) != settings.records:
            raise RuntimeError(f"{name}: the output does not hold the backlog")
        stack.remove_pipeline(settings, config)
    else:
        table = stack.fresh_folder(settings.lake / f"bench_profile_plain_{rep}")
        command = [*stack.spark_submit_base(settings, f"bench-profile-plain-{rep}"), str(JOBS / "plain_batch.py"),
                   "--topic", topic, "--table", str(table)]
        result = _profiled(settings, name, command, folder, "plain_batch.py")
        if stack.table_count(str(table)) != settings.records:
            raise RuntimeError(f"{name}: the output does not hold the backlog")
        stack.drop_table(str(table))
    log.info("%s %d: %.1f s; JVM: %.1f s to the first job, jobs %.1f s, task CPU %.1f s, GC %.1f s; Python: %s",
             name, rep, result["wall_seconds"], result["jvm"]["app_start_to_first_job_seconds"],
             result["jvm"]["jobs_seconds"], result["jvm"]["task_cpu_seconds"], result["jvm"]["task_gc_seconds"],
             result["python"] and result["python"]["spans"])
    return {"contender": name, "repetition": rep, **result}


def run(settings: BenchSettings) -> dict:
    if not (BIN / "py-spy").exists():
        raise SystemExit("py-spy is missing: scripts/bench_profile.sh installs it into .venv")
    work = settings.work / "profile"
    shutil.rmtree(work, ignore_errors=True)
    topic = f"bench_profile_{int(time.time())}"
    backlog = data.produce_backlog(settings, topic)
    repeats = int(os.environ.get("BENCH_PROFILE_REPEATS", "2"))
    runs = []
    for rep in range(1, repeats + 1):
        for name in (("tidemark_job", "plain_batch") if rep % 2 else ("plain_batch", "tidemark_job")):
            runs.append(one(settings, topic, name, rep, work))

    def median(name: str, pick) -> float | None:
        values = [pick(r) for r in runs if r["contender"] == name and pick(r) is not None]
        return round(statistics.median(values), 2) if values else None

    summary = {}
    for name in ("tidemark_job", "plain_batch"):
        summary[name] = {
            "wall_seconds": median(name, lambda r: r["wall_seconds"]),
            "jvm_start_to_first_job_seconds": median(name, lambda r: r["jvm"]["app_start_to_first_job_seconds"]),
            "jobs_seconds": median(name, lambda r: r["jvm"]["jobs_seconds"]),
            "task_cpu_seconds": median(name, lambda r: r["jvm"]["task_cpu_seconds"]),
            "task_gc_seconds": median(name, lambda r: r["jvm"]["task_gc_seconds"]),
            "python_spans": {label: median(name, lambda r, label=label: r["python"] and r["python"]["spans"][label])
                             for label in PYTHON_SPANS}}
    return {"date": dt.date.today().isoformat(), "machine": machine.describe(), "master": settings.master,
            "backlog": backlog, "sample_rate": RATE, "runs": runs, "summary": summary}


def main() -> None:
    stack.run_alone(run, "profile.json")


if __name__ == "__main__":
    main()
