"""bench/results/*.json -> docs/BENCHMARKS.md and docs/benchmarks.png.

``python -m bench.report`` folds the result files of the benchmarks that run as programs of their own into
bench.json's ``parts``, recomputes its summary and writes the page: the hand-written findings
(bench/findings.md), then one table per measurement, every number from the JSON. The findings quote the
JSON with ``${path.in.bench.json}`` or ``${path:format}`` (a Python format spec), e.g.
``${summary.ratios.tidemark_job/plain_batch:.2f}``; a path the JSON does not hold fails the report.
"""

from __future__ import annotations

import json
import re

from bench import demo_runs
from bench.knobs import RESULTS, ROOT, save_result
from bench.report_sections import (
    _n,
    _range,
    _section,
    _table,
    audit,
    class_data,
    console,
    fleet,
    ledger_contention,
    ledger_size,
    maintenance,
    maintenance_targets,
    object_storage,
    profile,
    read_path,
    scale,
    skew,
    small_batch,
    tls,
    typed,
)
from bench.summary import part, side_parts, summarize

DOC = ROOT / "docs" / "BENCHMARKS.md"
CHART = ROOT / "docs" / "benchmarks.png"
FINDINGS = ROOT / "bench" / "findings.md"
PHASES = {"plan": "plan call (Python, before spark-submit)", "startup": "JVM and session start, ledger check",
          "read_and_tally": "Kafka read and tally (values that can be bad)",
          "write_output": "output write with the marker (the one pass over Kafka)",
          "ledger_commit": "ledger commit (count of the batch in the output, merge)",
          "shutdown": "Spark stop, JVM exit"}

METHOD = """\
* **Backlog**: a fresh topic of JSON order events of a fixed size, produced by Kafka's `ProducerPerformance`
  (typed values: bench/typed_json.py and bench/avro.py produce theirs, one poison record in 1,000).
* **Contenders** read the whole backlog into a fresh Delta table, each repetition starting one contender later:
  the *Tidemark ingest job* is the plan call then exactly the spark-submit of `tidemark run`; *Tidemark DAG*
  the whole DAG under `airflow dags test`; *AvailableNow* Structured Streaming with `Trigger.AvailableNow`
  and a fresh checkpoint; the *plain batch* one `spark.read` appended to Delta, no bookkeeping; *consumer perf*
  Kafka's `ConsumerPerformance` (read only). The Spark contenders share Tidemark's spark-submit command up to
  the script, its SparkSession builder, Kafka options and output columns (`bench/stack.py`, `bench/jobs/`);
  every output is counted back (typed values: and fingerprinted, so all decoded the same values).
* **Time** is wall time from process start to exit (JVM start included); Tidemark's adds its plan call.
  **MB** are value bytes (2^20). **Memory** is the peak resident set of the process tree, sampled every
  0.1 s; the JVM column is the largest single `java` process. Cells read *median (min–max)*."""

HOW = """\
```bash
make bench                                       # everything: 2,000,000 records of 300 bytes, 3 repetitions
BENCH_RECORDS=50000 BENCH_REPEATS=1 make bench   # a quick look
make bench-json  # or bench-avro, bench-small, bench-tls, bench-skew, bench-scale, bench-profile, bench-s3, bench-page,
                 # bench-read-path, bench-cds, bench-demo
make bench-fleet                                 # a fleet of 50 pipelines: one scheduler tick vs AvailableNow
make bench-history                               # a history table (keyed.history: scd2) against a keyed table
.venv/bin/python -m bench.report                 # this page again from bench/results/
```
Knobs: `BENCH_RECORDS`, `BENCH_RECORD_BYTES` (300), `BENCH_PARTITIONS` (8), `BENCH_REPEATS` (3),
`BENCH_JSON_RECORDS` / `BENCH_AVRO_RECORDS` / `BENCH_TLS_RECORDS` (1,000,000), `BENCH_LEDGER_SIZES`,
`BENCH_SCALE_SIZES`, `BENCH_CDS_SIZES`, `BENCH_FLEET_PIPELINES` (50) / `BENCH_FLEET_RECORDS` (10,000),
`BENCH_POISON_EVERY` (typed values: one poison record in N, 1,000; 0 for none), `BENCH_SKIP` (parts of
`make bench` not to run; they keep their last results),
`BENCH_RESULTS` (a folder for a trial run's results instead of bench/results); the docstrings of bench/*.py
list the rest."""


# --- cells and tables ----------------------------------------------------------------------------

def machine(results: dict) -> str:
    m, s, end = results["machine"], results["settings"], results.get("load_at_end", {})
    loads = [r["load_1m"] for r in results.get("runs", []) if "load_1m" in r]
    rows = [["CPU", f"{m['cpu_model']}, {m['cores']} cores"], ["RAM", f"{m['ram_gib']} GiB"], ["OS", m["os"]],
            ["Java / Python", f"{m['java']} / {m['python']}"],
            ["Spark", f"{m['spark']} (pip), Delta Lake {m['delta_spark']}, Kafka client {m['spark_kafka_client']}"],
            ["Kafka broker", f"{m['kafka_broker']} (KRaft, single node, local disk)"],
            ["Airflow / delta-rs", f"{m['airflow']} / deltalake {m['deltalake']}"],
            ["Spark settings", f"`--master {s['master']} --driver-memory {s['driver_memory']}`"],
            ["Load average (1 min)", f"{results.get('load_at_start', {}).get('load_1m', '–')} at start, "
                                     f"{end.get('load_1m', '–')} at end"
                                     + (f", {min(loads):.1f}–{max(loads):.1f} after the runs" if loads else "")]]
    return _table(["", ""], rows)


def throughput(results: dict) -> str:
    summary, s = results["summary"], results["settings"]
    rows = [[c["label"], _range(c["records_per_second"]), _range(c["mb_per_second"], 1), _range(c["seconds"], 1),
             _range(c["peak_tree_rss_mb"]), _range(c["peak_jvm_rss_mb"])] for c in summary["contenders"].values()]
    ratios = summary["ratios"]
    baselines = ("available_now", "plain_batch", "consumer_perf")
    ratio_rows = [[summary["contenders"][name]["label"], *[_n(ratios.get(f"{name}/{b}"), 2) + "x" for b in baselines]]
                  for name in ("tidemark_job", "tidemark_dag") if any(k.startswith(name) for k in ratios)]
    phases = [[PHASES.get(phase, phase), _range(v, 1)] for phase, v in summary["tidemark_phases"].items() if v["n"]]
    backlog = results.get("backlog", {})
    return _section(
        "Raw values: throughput",
        f"{s['records']:,} records of {s['record_bytes']} bytes ({s['megabytes']:,} MB of values) on "
        f"{s['partitions']} partitions, produced in {backlog.get('produce_seconds', '–')} s "
        f"({_n(backlog.get('producer_records_per_second'))} records/s as ProducerPerformance reports); {s['repeats']} "
        "repetitions. The phases of the Tidemark job come from the timestamps of its own log lines.",
        _table(["contender", "records/s", "MB/s", "seconds", "peak RSS of the process tree, MB", "peak JVM RSS, MB"],
               rows),
        _table(["throughput ratio (medians)", "/ AvailableNow", "/ plain batch", "/ consumer perf"], ratio_rows),
        _table(["Tidemark ingest job phase", "seconds"], phases))


def targets(results: dict) -> str:
    rows = [[t["target"], t["measured"], "yes" if t["met"] else "**no**"]
            for t in results["summary"]["targets"] + maintenance_targets(part(results, "maintenance"))]
    return _section("Targets", "Reported, not asserted: nothing on this page is checked by `make test`.",
                    _table(["target", "measured", "met"], rows))


def empty(results: dict) -> str:
    e, rows = results["summary"]["empty"], []
    if d := e.get("dag"):
        rows.append(["`airflow dags test`", _range(d["wall_seconds"], 1),
                     f"plan task {_range(d['plan_task_seconds'], 2)} s, of which Airflow starting the task "
                     f"{_range(d['breakdown_airflow_task_start'], 2)} s; ingest task "
                     + "/".join(d["ingest_task_states"]), str(d["jvms_started"]), _range(d["peak_tree_rss_mb"])])
        rows.append(["`tidemark run`", _range(e["cli"]["wall_seconds"], 1), "a fresh process: plan, no spark-submit",
                     str(e["cli"]["jvms_started"]), _range(e["cli"]["peak_tree_rss_mb"])])
        rows.append(["the plan call, in process", _range(e["plan_call"]["seconds"], 3), "ledger read, Kafka offsets",
                     "0", "–"])
    if a := e.get("available_now"):
        rows.append(["AvailableNow, same checkpoint", _range(a["wall_seconds"], 1), "Spark starts, finds nothing",
                     f"{a['jvms_started']} (at least)", _range(a["peak_tree_rss_mb"])])
    return _section("Empty runs", "The same pipeline again with nothing new; JVMs counted in the sampled process tree.",
                    _table(["empty run", "wall seconds", "what happens", "JVMs started", "peak RSS, MB"], rows))


def ledger(results: dict) -> str:
    rows = [[f"{r['batches']:,}", label, f"{r['rows']:,}", _n(r["state_ms"], 1), _n(r["full_read_ms"], 1),
             _n(r["plan_ms"], 1), f"{r['log_json_files']:,} / {r['checkpoints']} / {r['active_files']:,}",
             _n(r["write_ms_per_batch_recent"])]
            for shape, label in (("synthetic", "few big appends"), ("protocol", "as runs write it"))
            for r in results["summary"]["ledger"].get(shape, [])]
    return _section(
        "Ledger growth",
        "The plan call with N committed batches of one pipeline (8 rows per batch). *Few big appends*: rows written "
        "by delta-rs 2,000 batches at a time; *as runs write it*: a `planned` append then the committing merge per "
        "batch. `Ledger.state` is the read inside the plan; *full read* reads every row of the pipeline into Python.",
        _table(["batches", "ledger shape", "rows", "`Ledger.state` ms", "full read ms", "plan call ms",
                "log JSON files / checkpoints / active files", "write ms per batch (recent)"], rows),
        "![throughput, ledger growth and scale](benchmarks.png)")


def scheduler(results: dict) -> str:
    sched, m = results["scheduler"], results["summary"]["scheduler"]
    rows = [["whole DAG run", _range(m["run_seconds"], 1)],
            ["trigger (REST API) to the run's end", _range(m["trigger_to_end_seconds"], 1)],
            *[[f"task `{t}`", _range(v, 2)] for t, v in m["tasks"].items()]]
    if m.get("between_tasks_seconds", {}).get("n"):
        rows.append(["the run minus its tasks' times (the scheduler's hand-overs)",
                     _range(m["between_tasks_seconds"], 2)])
    if "job_alone_seconds" in m:
        rows.append(["the job alone (plan + spark-submit), interleaved", _range(m["job_alone_seconds"], 1)])
    if "dag_vs_job" in m:
        rows.append(["throughput: DAG / job alone", f"{m['dag_vs_job']:.2f}x"])
    rows += [["empty run: the whole DAG run", _range(m["empty_run_seconds"], 2)],
             ["empty run: task time", _range(m["empty_task_seconds"], 2)],
             *[[f"empty run: task `{t}`", _range(v, 2)] for t, v in m["empty_tasks"].items() if v["n"]],
             ["empty run: the ingest task", "/".join(m["empty_ingest_states"])],
             ["empty run: JVMs started", str(m["empty_jvms_started"])]]
    return _section(
        "The DAG under a running scheduler",
        f"`scripts/airflow.sh up` (the {sched['executor']} on {sched['database']}, up in "
        f"{sched['airflow_up_seconds']} s), the ingest task launched by {sched['launcher']}; {len(sched['runs'])} "
        "runs triggered through the REST API, then each DAG again with nothing new. Task times are Airflow's.",
        _table(["", "seconds"], rows))


def _flat(value, prefix: str = "") -> dict:
    if isinstance(value, dict | list):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        return {k: v for key, item in items for k, v in _flat(item, f"{prefix}{key}.").items()}
    return {prefix[:-1]: value}


def findings(results: dict) -> str:
    """bench/findings.md with its ``${path}`` and ``${path:format}`` filled in from the results."""
    values = _flat(results)

    def fill(match: re.Match) -> str:
        path, spec = match.group(1), match.group(2) or ""
        if path not in values:
            raise SystemExit(f"bench/findings.md: ${{{path}}} is not in the results (bench/results/bench.json)")
        value = values[path]
        return "–" if value is None else format(value, spec or (",", "")[isinstance(value, str)])

    return re.sub(r"\$\{(.+?)(?::([,.\w%]*))?\}", fill, FINDINGS.read_text()).strip()


def markdown(results: dict) -> str:
    parts = ["# Benchmarks",
             f"Generated by `make bench` (run started {results['started_at']}, {results.get('wall_minutes', '–')} "
             "min) from the JSON in [`bench/results/`](../bench/results/); a part run on its own carries its "
             "own date. What the numbers mean first, then the measurements.",
             "## Findings\n\n" + findings(results), targets(results), "## Machine\n\n" + machine(results),
             "## Method\n\n" + METHOD, "## How to run\n\n" + HOW, throughput(results), empty(results), ledger(results)]
    if results.get("scheduler"):
        parts.append(scheduler(results))
    for name, render in (("skew", skew), ("profile", profile), ("scale", scale), ("small_batch", small_batch),
                         ("object_storage", object_storage), ("console", console), ("tls", tls),
                         ("ledger_contention", ledger_contention), ("fleet", fleet), ("audit", audit),
                         ("read_path", read_path), ("class_data", class_data),
                         ("maintenance", maintenance), ("ledger_size", ledger_size), ("demo", demo_runs.section)):
        if found := part(results, name):
            parts.append(render(found))
    for name, title in (("typed_json", "JSON with a declared schema"), ("typed_json_clean", "JSON with no poison"),
                        ("avro", "Avro from a Schema Registry"), ("avro_clean", "Avro with no poison")):
        if found := part(results, name):
            parts.append(typed(found, title))
    if kept := results.get("kept_from"):
        parts.append("Parts not run the last time keep their results: "
                     + ", ".join(f"{k} from the run of {v}" for k, v in kept.items()) + ".")
    return "\n\n".join(parts) + "\n"


def write(results: dict) -> None:
    from bench.chart import chart

    DOC.write_text(markdown(results))
    chart(results, part(results, "scale"), CHART)


def main() -> None:
    results = json.loads((RESULTS / "bench.json").read_text())
    results["parts"] = side_parts()
    results["summary"] = summarize(results)
    save_result("bench.json", results)
    write(results)
    print(f"wrote {RESULTS / 'bench.json'}, {DOC} and {CHART}")


if __name__ == "__main__":
    main()
