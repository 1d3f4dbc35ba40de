"""`make bench-demo`: the demo's two DAG runs as a new user meets them (issue 41 item 3: no task and no DAG run
waits for the class-data archive).

`scripts/demo.sh` runs against a fresh private broker (scripts/with_broker.sh), with a class-data folder
(``TIDEMARK_CDS_DIR``), an Airflow home, a lake and a log folder of its own, all new: the first run finds no
archive and starts the trainer, which works on while the second run runs, as on a fresh clone. From each run's
log (``airflow dags test``'s output, timestamped lines):

* the DAG run's seconds, and the ingest task's;
* how long the ingest task went on after its Spark JVM's last line: the JVM's exit (a JVM that writes an archive as
  it exits spends seconds there, the task and the run waiting);
* what the launch did about the class-data archive, from its log line (``tidemark_spark.class_data``): mapped it,
  started the trainer and ran without it, or had the job's own JVM write it as it exited (the old way, which the
  task waited for).

Then it waits for the trainer's archive (BENCH_DEMO_TRAINER_TIMEOUT, 900 s), reports when it was written, and runs
a third DAG run over 500 more records the same way: the time of the same work with the archive mapped and no
trainer beside it. Results: bench/results/demo.json.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench import machine
from bench.knobs import ROOT, save_result

log = logging.getLogger("bench")
STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z?\s")
ARCHIVE_WRITTEN_BY_JOB = "class-data archive written"
TAIL_TARGET_SECONDS = 3.0
"""The ingest task ends within this long of its JVM's last line: it waits for no archive."""


def _stamps(log_text: str, marker: str) -> list[float]:
    """The times (epoch seconds) of the log's timestamped lines that hold ``marker``."""
    found = []
    for line in log_text.splitlines():
        if marker in line and (m := STAMP.match(line)):
            found.append(dt.datetime.fromisoformat(m.group(1)).replace(tzinfo=dt.UTC).timestamp())
    return found


def read_run(log_text: str) -> dict:
    """One DAG run's figures from its log (module docstring)."""
    first = _stamps(log_text, "")[0]
    finished = _stamps(log_text, "DagRun Finished")[-1]
    started, ended = _stamps(log_text, "starting task_id=ingest")[0], _stamps(log_text, "end task task_id=ingest")[-1]
    jvm_last = max(t for t in _stamps(log_text, "SparkSubmitHook") if t <= ended)
    records = re.search(r"ingesting batch \d+ of pipeline '[^']+': ([\d,]+) offsets", log_text)
    return {"run_seconds": round(finished - first, 2), "ingest_task_seconds": round(ended - started, 2),
            "after_jvm_last_line_seconds": round(ended - jvm_last, 2), "archive": _archive(log_text),
            "offsets": int(records.group(1).replace(",", "")) if records else None}


def _archive(log_text: str) -> str:
    """What the launch did about the class-data archive (its log line)."""
    for marker, what in ((ARCHIVE_WRITTEN_BY_JOB, "written by the job's JVM"),
                         ("maps the class-data archive", "mapped"),
                         ("trains one in the background", "none: the trainer started"),
                         ("another process is training it", "none: the trainer at work")):
        if marker in log_text:
            return what
    return "none"


def targets(part_: dict | None) -> list[dict]:
    """The Targets row (bench.summary): the demo's second run waits for no archive."""
    if not part_:
        return []
    m = part_["summary"]
    return [{"target": f"the demo's second run waits for no class-data archive: no JVM of it writes one and its "
                       f"ingest task ends <= {TAIL_TARGET_SECONDS:g} s after the JVM's last line ({part_['date']})",
             "measured": f"{m['second_after_jvm_last_line_seconds']:.2f} s after; archive: {m['second_archive']}; "
                         f"the run {m['second_run_seconds']:.1f} s (a third, archive mapped: "
                         f"{m['third_run_seconds']:.1f} s)", "met": m["no_wait"]}]


def section(part_: dict) -> str:
    """The page's section (bench.report)."""
    rows = "\n".join(f"| {r['run']} | {r['offsets']:,} | {r['run_seconds']} | {r['ingest_task_seconds']} | "
                     f"{r['after_jvm_last_line_seconds']} | {r['archive']} |" for r in part_["runs"])
    archive = part_["archive"]
    written = (f"The trainer that the first run started wrote its archive ({archive['mb']} MB) "
               f"{archive['written_seconds_after_demo_start']} s after the demo started, while the second run ran."
               if archive else "The trainer had written no archive when the wait ended.")
    return (f"## The demo's first runs\n\n{part_['date']}: `make bench-demo` (bench/demo_runs.py), `scripts/demo.sh` "
            f"on a fresh private broker with a new class-data folder, Airflow home and lake, as on a fresh clone "
            f"({part_['demo_seconds']} s in all, the broker's start and Airflow's migration included), then a third "
            f"run of 500 records once the archive was there. From each run's log: the DAG run, its ingest task, how "
            f"long the task went on after its Spark JVM's last line (a JVM that writes a class-data archive as it "
            f"exits spends seconds there), and what the launch did about the archive. {written}\n\n"
            f"| run | offsets | DAG run, s | ingest task, s | task after the JVM's last line, s | class-data archive |"
            f"\n|---|---|---|---|---|---|\n{rows}")


def _third_run(env: dict[str, str], logs: Path) -> dict:
    """500 more orders, then the ingest DAG once more (``airflow dags test``, as the demo runs it)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{env.get('KAFKA_PORT', '9092')}")
    for n in range(500):
        producer.send("orders", key=str(n).encode(), value=b'{"order_id": %d, "customer": "c1", "amount": 5.5, '
                                                           b'"created_at": 0}' % n)
    producer.flush()
    producer.close()
    done = subprocess.run(["bash", "-c", "source scripts/env.sh && exec airflow dags test tidemark_ingest__orders"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    (logs / "run3.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0 or "state=success" not in done.stdout + done.stderr:
        raise RuntimeError(f"the third DAG run failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return {"run": 3, **read_run(done.stdout + done.stderr)}


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING)  # the third run's producer
    work = Path(tempfile.mkdtemp(prefix="tidemark-bench-demo-"))
    cds, logs = work / "cds", work / "logs"
    env = {**os.environ, "TIDEMARK_CDS_DIR": str(cds), "AIRFLOW_HOME": str(work / "airflow"),
           "TIDEMARK_LAKE_ROOT": str(work / "lake"), "TIDEMARK_DEMO_LOGS": str(logs)}
    env = {k: v for k, v in env.items() if k not in ("SPARK_SUBMIT_OPTS", "SPARK_CONF_DIR")}  # a user has neither
    try:
        begun, begun_wall = time.monotonic(), time.time()
        log.info("make demo's script on the private broker, fresh class-data folder %s ...", cds)
        demo = subprocess.run([str(ROOT / "scripts" / "demo.sh")], env=env, capture_output=True, text=True,
                              timeout=1800)
        if demo.returncode != 0:
            raise RuntimeError(f"scripts/demo.sh failed ({demo.returncode}):\n{demo.stdout[-3000:]}"
                               f"{demo.stderr[-3000:]}")
        demo_seconds = round(time.monotonic() - begun, 1)
        runs = [{"run": n, **read_run((logs / f"run{n}.log").read_text())} for n in (1, 2)]
        deadline = time.monotonic() + float(os.environ.get("BENCH_DEMO_TRAINER_TIMEOUT", "900"))
        while not list(cds.glob("spark-*.jsa")) and time.monotonic() < deadline:
            time.sleep(2)
        archives = list(cds.glob("spark-*.jsa"))
        archive = {"written_seconds_after_demo_start": round(archives[0].stat().st_mtime - begun_wall, 1),
                   "mb": round(archives[0].stat().st_size / 1e6)} if archives else None
        runs.append(_third_run(env, logs))
        for run in runs:
            log.info("run %d: %s", run["run"], run)
        second = runs[1]
        out = {"date": dt.date.today().isoformat(), "machine": machine.describe(), "demo_seconds": demo_seconds,
               "runs": runs, "archive": archive,
               "summary": {"second_run_seconds": second["run_seconds"], "third_run_seconds": runs[2]["run_seconds"],
                           "second_after_jvm_last_line_seconds": second["after_jvm_last_line_seconds"],
                           "second_archive": second["archive"],
                           "no_wait": second["archive"] != "written by the job's JVM"
                           and second["after_jvm_last_line_seconds"] <= TAIL_TARGET_SECONDS}}
        log.info("wrote %s", save_result("demo.json", out))
    finally:
        _stop_trainers(cds)
        shutil.rmtree(work, ignore_errors=True)


def _stop_trainers(cds: Path) -> None:
    """A trainer still at work on this run's folder (the wait timed out) is stopped: it would write into nothing."""
    import psutil

    for process in psutil.process_iter(["cmdline"]):
        if str(cds) in " ".join(process.info["cmdline"] or []):
            process.kill()


if __name__ == "__main__":
    main()
