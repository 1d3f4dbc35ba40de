"""The contenders, one function each: read the whole backlog into a fresh Delta table (or, for
Kafka's consumer perf tool, just read it) and return one measured repetition."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field

from bench import stack
from bench.knobs import BIN, ROOT, BenchSettings
from bench.measure import Measurement, check, run_measured

log = logging.getLogger("bench")
JOBS = ROOT / "bench" / "jobs"
KAFKA_SH = str(ROOT / "scripts" / "kafka.sh")

TIDEMARK_JOB = "tidemark_job"
TIDEMARK_DAG = "tidemark_dag"
AVAILABLE_NOW = "available_now"
PLAIN_BATCH = "plain_batch"
CONSUMER_PERF = "consumer_perf"
CONTENDERS = (TIDEMARK_JOB, TIDEMARK_DAG, AVAILABLE_NOW, PLAIN_BATCH, CONSUMER_PERF)
LABELS = {
    TIDEMARK_JOB: "Tidemark ingest job (plan + spark-submit)",
    TIDEMARK_DAG: "Tidemark DAG through Airflow (`airflow dags test`)",
    AVAILABLE_NOW: "Structured Streaming, Trigger.AvailableNow",
    PLAIN_BATCH: "Plain Spark batch read, no bookkeeping",
    CONSUMER_PERF: "Kafka ConsumerPerformance (no write)",
}


@dataclass
class Result:
    """One repetition of one contender."""

    contender: str
    repetition: int
    records: int
    seconds: float
    """The time the throughput is computed from (see ``timed``)."""
    timed: str
    measurement: Measurement
    extra: dict = field(default_factory=dict)

    def to_dict(self, megabytes: float) -> dict:
        return {"contender": self.contender, "repetition": self.repetition, "records": self.records,
                "seconds": round(self.seconds, 3), "timed": self.timed,
                "records_per_second": round(self.records / self.seconds, 1),
                "mb_per_second": round(megabytes / self.seconds, 2), **self.measurement.summary(), **self.extra}


def keep_log(settings: BenchSettings, name: str, measured: Measurement) -> None:
    """The run's output, for looking into it afterwards: .cache/bench/logs/NAME.log."""
    folder = settings.work / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.log").write_text(measured.output)


# Log lines of the ingest job (tidemark.batch.execute) that end a phase: raw values, then typed values
# (one pass writes the good records while Spark tallies every record; the dead letters read again).
RAW_PHASES = (("startup", r"batch \d+: reading \d+ offsets"), ("read_and_tally", r"batch \d+ read \d+ records"),
              ("write_output", r"batch \d+ committed to "), ("ledger_commit", r"batch \d+ committed in the ledger"))
TYPED_PHASES = (("startup", r"batch \d+: reading \d+ offsets"), ("write_output_and_tally", r"batch \d+ committed to "),
                ("dead_letters", r"dead letters written to "), ("ledger_commit", r"batch \d+ committed in the ledger"))
_STAMP = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO "


def ingest_phases(output: str, started: float, wall: float,
                  phases: tuple[tuple[str, str], ...] = RAW_PHASES) -> dict[str, float]:
    """Seconds spent in each phase of the ingest job, from its log lines' timestamps (``started`` is
    the epoch time the process started), and the shutdown after the last one. Raw values: start-up
    (JVM, session, ledger check), the Kafka read and tally (only for values that can be bad), the
    output write (the one pass over Kafka), the ledger commit."""
    import datetime as dt

    spent, previous = {}, started
    for phase, pattern in phases:
        match = re.search(_STAMP + r".*" + pattern, output, re.MULTILINE)
        if match:
            end = dt.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            spent[phase] = round(end - previous, 2)
            previous = end
    spent["shutdown"] = round(started + wall - previous, 2)
    return spent


def plan_task_breakdown(output: str) -> dict[str, float]:
    """Where the plan task's time goes in an `airflow dags test` log: Airflow starting the task (the
    first task of `dags test` also starts its in-process execution API), Tidemark's plan callable
    (from its first log line to the returned plan), and the whole task as `dags test` ran it."""
    import datetime as dt

    def stamp(pattern: str) -> float | None:
        match = re.search(r"^(\S+Z) \[\w+\s*\] " + pattern, output, re.MULTILINE)
        return dt.datetime.fromisoformat(match.group(1).replace("Z", "+00:00")).timestamp() if match else None

    begin = stamp(r"\[DAG TEST\] running task <TaskInstance: \S+\.plan ")
    started = stamp(r"Task started")
    called = stamp(r"pipeline '[^']+': \w+ run \(")
    returned = stamp(r"Done\. Returned value was: \{")
    ended = stamp(r"\[DAG TEST\] end task task_id=plan ")
    spans = {"airflow_task_start": (begin, started), "plan_callable": (called, returned), "plan_task": (begin, ended)}
    return {name: round(b - a, 3) for name, (a, b) in spans.items() if a is not None and b is not None}


def _expect_rows(uri: str, records: int, what: str) -> None:
    found = stack.table_count(uri)
    if found != records:
        raise RuntimeError(f"{what}: the output table holds {found} rows, expected {records}")


def tidemark_job(settings: BenchSettings, topic: str, records: int, rep: int, name: str = "bench_job") -> Result:
    """The `tidemark run` path: plan (pure Python, timed apart) then the ingest job's spark-submit, on a
    fresh pipeline NAME_REP."""
    config = stack.add_pipeline(settings, f"{name}_{rep}", topic)
    plan, plan_seconds = stack.plan_batch(settings, config, expect=records)
    began = time.time()
    measured = stack.run_ingest(settings, plan, "the Tidemark ingest job")
    keep_log(settings, f"{TIDEMARK_JOB}-{rep}", measured)
    _expect_rows(config.table_uri, records, TIDEMARK_JOB)
    stack.remove_pipeline(settings, config)
    return Result(TIDEMARK_JOB, rep, records, plan_seconds + measured.wall_seconds,
                  "plan call + spark-submit wall time", measured,
                  {"plan_seconds": round(plan_seconds, 3), "submit_seconds": round(measured.wall_seconds, 3),
                   "phases": ingest_phases(measured.output, began, measured.wall_seconds)})


def airflow_dag_test(settings: BenchSettings, dag_id: str) -> tuple[Measurement, dict[str, dict]]:
    """`airflow dags test DAG_ID`, measured; returns the measurement and the run's task states."""
    measured = check(run_measured([str(BIN / "airflow"), "dags", "test", dag_id]), f"airflow dags test {dag_id}")
    match = re.search(r"DagRun Finished: dag_id=\S+, logical_date=[^,]*, run_id=([^,]+),.*?state=(\w+)",
                      measured.output)
    if match is None or match.group(2) != "success":
        raise RuntimeError(f"the run of {dag_id} did not succeed:\n{measured.output[-4000:]}")
    return measured, stack.task_durations(settings, dag_id, match.group(1))


def tidemark_dag(settings: BenchSettings, topic: str, records: int, rep: int) -> tuple[Result, dict]:
    """The whole DAG through Airflow; then the same DAG again with nothing new (an empty run).
    Returns the repetition and the empty run's facts."""
    config = stack.add_pipeline(settings, f"bench_dag_{rep}", topic)
    measured, tasks = airflow_dag_test(settings, stack.dag_id(config.name))
    keep_log(settings, f"{TIDEMARK_DAG}-{rep}", measured)
    _expect_rows(config.table_uri, records, TIDEMARK_DAG)
    empty, empty_tasks = airflow_dag_test(settings, stack.dag_id(config.name))
    keep_log(settings, f"{TIDEMARK_DAG}-{rep}-empty", empty)
    cli = check(run_measured([str(BIN / "tidemark"), "run", config.name]), "tidemark run (nothing new)")
    if "nothing new" not in cli.output:
        raise RuntimeError(f"`tidemark run {config.name}` found something new:\n{cli.output[-3000:]}")
    plan, plan_call = stack.plan_batch(settings, config)
    if not plan.is_empty:
        raise RuntimeError(f"pipeline '{config.name}': the plan call froze a batch with nothing new")
    stack.remove_pipeline(settings, config)
    result = Result(TIDEMARK_DAG, rep, records, measured.wall_seconds, "`airflow dags test` wall time", measured,
                    {"tasks": tasks})
    return result, {"kind": "tidemark_dag_empty", "repetition": rep, **empty.summary(), "tasks": empty_tasks,
                    "plan_task_seconds": empty_tasks.get("plan", {}).get("seconds"),
                    "ingest_task_state": empty_tasks.get("ingest", {}).get("state"),
                    "plan_task_breakdown": plan_task_breakdown(empty.output),
                    "cli": cli.summary(), "plan_call_seconds": round(plan_call, 3)}


def available_now(settings: BenchSettings, topic: str, records: int, rep: int) -> tuple[Result, dict]:
    """AvailableNow into a fresh table and checkpoint; then again with nothing new (an empty run)."""
    table = stack.fresh_folder(settings.lake / f"bench_available_now_{rep}")
    checkpoint = stack.fresh_folder(settings.work / "checkpoints" / f"available_now_{rep}")
    command = [*stack.spark_submit_base(settings, f"bench-available-now-{rep}"), str(JOBS / "available_now.py"),
               "--topic", topic, "--table", str(table), "--checkpoint", str(checkpoint)]
    measured = check(run_measured(command, stack.spark_env(settings)), "the AvailableNow job")
    keep_log(settings, f"{AVAILABLE_NOW}-{rep}", measured)
    _expect_rows(str(table), records, AVAILABLE_NOW)
    empty = check(run_measured(command, stack.spark_env(settings)), "the empty AvailableNow run")
    _expect_rows(str(table), records, "the empty AvailableNow run")
    stack.drop_table(str(table))
    stack.drop_table(str(checkpoint))
    result = Result(AVAILABLE_NOW, rep, records, measured.wall_seconds, "spark-submit wall time", measured)
    return result, {"kind": "available_now_empty", "repetition": rep, **empty.summary()}


def plain_batch(settings: BenchSettings, topic: str, records: int, rep: int) -> Result:
    table = stack.fresh_folder(settings.lake / f"bench_plain_batch_{rep}")
    command = [*stack.spark_submit_base(settings, f"bench-plain-batch-{rep}"), str(JOBS / "plain_batch.py"),
               "--topic", topic, "--table", str(table)]
    measured = check(run_measured(command, stack.spark_env(settings)), "the plain batch job")
    keep_log(settings, f"{PLAIN_BATCH}-{rep}", measured)
    _expect_rows(str(table), records, PLAIN_BATCH)
    stack.drop_table(str(table))
    return Result(PLAIN_BATCH, rep, records, measured.wall_seconds, "spark-submit wall time", measured)


def consumer_perf(settings: BenchSettings, topic: str, records: int, rep: int) -> Result:
    """Kafka's ConsumerPerformance (read_committed, a fresh group): wall time of the tool's JVM, and
    the tool's own figures (which leave out JVM start and group join)."""
    config = settings.work / "consumer-perf.properties"
    config.write_text("isolation.level=read_committed\n")
    command = [KAFKA_SH, "run-class", "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server",
               settings.bootstrap, "--topic", topic, "--messages", str(records), "--group",
               f"bench-consumer-perf-{rep}-{int(time.time())}", "--consumer.config", str(config), "--timeout", "60000"]
    measured = check(run_measured(command), "ConsumerPerformance")
    return Result(CONSUMER_PERF, rep, records, measured.wall_seconds, "JVM wall time", measured,
                  _consumer_perf_figures(measured.output, records))


def _consumer_perf_figures(output: str, records: int) -> dict:
    """The tool's CSV line: start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg,
    nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec."""
    for line in output.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) == 10 and cols[4].isdigit():
            if int(cols[4]) < records:
                raise RuntimeError(f"ConsumerPerformance read {cols[4]} records, expected {records}")
            return {"tool_mb_per_second": float(cols[3]), "tool_records_per_second": float(cols[5]),
                    "tool_fetch_records_per_second": float(cols[9]), "tool_rebalance_ms": int(cols[6])}
    raise RuntimeError(f"cannot read ConsumerPerformance's result:\n{output[-3000:]}")
