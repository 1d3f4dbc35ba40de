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

def _n(value: float | None, digits: int = 0) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _range(s: dict, digits: int = 0) -> str:
    return f"{_n(s['median'], digits)} ({_n(s['min'], digits)}–{_n(s['max'], digits)})"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _section(title: str, text: str, *tables: str) -> str:
    return "\n\n".join([f"## {title}", text, *tables])


# --- the sections --------------------------------------------------------------------------------

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


def skew(part_: dict) -> str:
    m, backlog = part_["summary"], part_["backlog"]
    rows = [[label, str(c["runs"]), f"{c['median_seconds']} ({c['min_seconds']}–{c['max_seconds']})",
             f"{c['median_records_per_second']:,}", f"{c['median_machine_busy_share']:.0%}",
             _n(c["median_job_cpu_seconds"], 1)]
            for key, label in (("split", f"split at {part_.get('split_offsets', 500000):,} offsets per task"),
                               ("one_task_per_partition", "one Spark task per partition"))
            for c in [m[key]]]
    return _section(
        "Skew", f"{part_['date']}: {backlog['records']:,} records, {backlog['hot_share']:.0%} of them on one of "
        f"{len(backlog['records_per_partition'])} partitions, `{part_['master']}`. Split speed-up "
        f"**x{m['split_speedup']}**. *Machine busy*: the share of all cores in use during the job.",
        _table(["read", "runs", "seconds", "records/s", "machine busy", "job CPU s"], rows))


def profile(part_: dict) -> str:
    job, plain = part_["summary"]["tidemark_job"], part_["summary"]["plain_batch"]
    keys = (("wall_seconds", "whole run"), ("jvm_start_to_first_job_seconds", "JVM: start to the first Spark job"),
            ("jobs_seconds", "JVM: Spark jobs"), ("task_cpu_seconds", "JVM: tasks' CPU, summed"),
            ("task_gc_seconds", "JVM: tasks' GC, summed"))
    rows = [[label, _n(job[k], 1), _n(plain[k], 1)] for k, label in keys]
    rows += [[f"Python driver: {label}", _n(v, 2), _n(plain["python_spans"].get(label), 2)]
             for label, v in job["python_spans"].items()]
    return _section(
        "Profile of the raw path",
        f"{part_['date']}: {part_['backlog']['records']:,} records, {len(part_['runs']) // 2} runs each, with "
        f"Spark's event log and py-spy ({part_['sample_rate']} samples/s); medians, seconds. Python spans are "
        "inclusive and overlap.", _table(["", "Tidemark ingest job", "plain batch"], rows))


def scale(part_: dict) -> str:
    m = part_["summary"]
    rows = [[f"{int(size):,}", str(c["runs"]), _n(c["median_seconds"], 1), _n(c["median_records_per_second"]),
             f"{_n(c['median_peak_jvm_rss_mb'])} (max {_n(c['max_peak_jvm_rss_mb'])})",
             _n(c["median_python_driver_rss_mb"]), _n(c["median_peak_tree_rss_mb"])]
            for size, c in sorted(m["sizes"].items(), key=lambda kv: int(kv[0]))]
    return _section(
        "Scale", f"{part_['date']}: one batch of each size from one topic (`max_offsets_per_run`), `{part_['master']}`,"
        f" driver memory {part_['driver_memory']}. Largest / smallest: throughput **x{m['throughput_ratio']}**, "
        f"driver JVM RSS **x{m['jvm_rss_ratio']}**, Python driver RSS x{m['python_rss_ratio']}.",
        _table(["records", "runs", "seconds", "records/s", "driver JVM peak RSS, MB", "Python driver RSS, MB",
                "process tree RSS, MB"], rows))


def typed(part_: dict, title: str) -> str:
    m, s, backlog = part_["summary"], part_["settings"], part_["backlog"]
    rows = [[c["label"], f"{c['median_seconds']} ({c['min_seconds']}–{c['max_seconds']})",
             f"{c['median_records_per_second']:,}", f"{c['median_mb_per_second']}", f"{c['median_peak_tree_rss_mb']:,}"]
            for c in m["contenders"].values()]
    phases = ", ".join(f"{p} {v} s" for p, v in m.get("tidemark_phases", {}).items())
    return _section(
        title, f"{part_['date']}: {backlog['records']:,} records ({s['record_bytes']} bytes, "
        + (f"{backlog['poison']:,} of them poison: {', '.join(backlog['poison_kinds'])}" if backlog["poison"]
           else "none of them poison") + f") on {backlog['partitions']} partitions, "
        f"`{s['master']}`, {s['repeats']} runs each. Ratios: "
        + ", ".join(f"{k} **x{v}**" for k, v in m["ratios"].items())
        + f". Tidemark's plan call: {m.get('tidemark_plan_seconds')} s" + (f"; its phases: {phases}." if phases
                                                                           else "."),
        _table(["contender", "seconds", "records/s", "MB/s", "peak RSS, MB"], rows))


def small_batch(part_: dict) -> str:
    m = part_["summary"]
    rows = [[label, f"{c['median_seconds']} ({c['min_seconds']}–{c['max_seconds']})", str(c["runs"]),
             str(c["jvms_started_per_batch"]), f"{c['median_peak_tree_rss_mb']:,}"]
            for label, c in (("spark-submit", m["spark-submit"]), ("warm path (Spark Connect)", m["spark-connect"]))]
    return _section(
        "Small batches: the warm path", f"{part_['date']}: batches of {part_['records_per_batch']:,} records on "
        f"{part_['partitions']} partitions, the ingest job alone, alternating; the Spark Connect server on "
        f"`{part_['server']['master']}` (its memory is not in the job's RSS). Warm path **x{m['warm_speedup']}**; "
        f"the server's first batch took {m['first_warm_batch_seconds']} s.",
        _table(["launcher", "job seconds", "batches", "JVMs started per batch", "peak RSS of the job, MB"], rows))


def ledger_contention(part_: dict) -> str:
    b = part_["burst"]
    burst = [["freeze (plan read + compare-and-commit)", *(str(b["freeze"][k]) for k in ("median_ms", "p95_ms",
                                                                                          "max_ms"))],
             ["commit flip (merge)", *(str(b["commit"][k]) for k in ("median_ms", "p95_ms", "max_ms"))]]
    scale = [[f"{s['pipelines']} x {s['batches_each']:,}", f"{s['rows']:,}", str(s["plan_read"]["median_ms"]),
              str(s["freeze"]["median_ms"]), str(s["commit"]["median_ms"]), str(s["plan_and_commit_ms"])]
             for s in part_["scale"]]
    return _section(
        "The shared ledger under contention", f"{part_['date']} (`make bench-ledger`): {b['pipelines']} pipelines, "
        f"each in its own process, freeze and commit {b['batches_each']} batches, every step started at the same "
        f"moment: **{len(b['errors'])} errors** reached a run, {b['pipelines_all_committed']} of {b['pipelines']} "
        f"pipelines committed every batch, {b['races_lost_and_retried']} lost races were retried inside the ledger "
        f"(backoff with jitter), {b['wall_seconds']} s in all; the latencies below are mostly the {b['pipelines']} "
        f"processes' merges queueing for {part_['machine']['cores']} cores. Load average (1 min) "
        f"{part_['load_at_start']['load_1m']} at the start, {part_['load_at_end']['load_1m']} at the end.",
        _table(["burst: one step of one pipeline", "median ms", "p95 ms", "max ms"], burst),
        "One pipeline's plan read, freeze and commit (median of 7) on a ledger already holding other pipelines' "
        f"committed batches ({part_['partitions_per_batch']} partitions each): larger / smaller "
        f"**x{part_['scale_ratio']}**.",
        _table(["pipelines x batches", "ledger rows", "plan read ms", "freeze ms", "commit ms", "all three ms"], scale))


def fleet(part_: dict) -> str:
    phases, m = part_["phases"], part_["summary"]
    labels = {"warm": "Tidemark, warm path (Spark Connect)", "spark-submit": "Tidemark, spark-submit",
              "available-now-sequential": "AvailableNow, one after another",
              "available-now-concurrent": f"AvailableNow, {part_['concurrency']} at a time"}
    rows = [[labels[name], str(p["wall_seconds"]), f"{p['cpu_seconds']:,}", f"{p['peak_rss_mb']:,}",
             f"{p.get('rss_at_start_mb', 0):,}", str(p.get("parallelism", p.get("concurrency"))),
             f"{p['load_1m_at_start']} / {p['load_1m_at_end']}"]
            for name, p in phases.items()]
    ticks = [f"{labels[n]}: runs {p['run_seconds']['median']} s median ({p['run_seconds']['min']}–"
             f"{p['run_seconds']['max']}), ingest task {p['ingest_task_seconds']['median']} s median, the last ingest "
             f"task started {p['last_ingest_started_after_seconds']} s after the first trigger, CPU by tree "
             + ", ".join(f"{k} {v}" for k, v in p["cpu_seconds_by_tree"].items())
             for n, p in phases.items() if "launcher" in p]
    verdict = (f" Warm path **x{m['warm_speedup']}** faster than the faster AvailableNow fleet "
               f"({labels[m['available_now_compared']]})."
               if "warm_speedup" in m else "")
    return _section(
        "A fleet of pipelines", f"{part_['date']} (`make bench-fleet`): {part_['pipelines']} pipelines, each on its "
        f"own topic of {part_['records_per_pipeline']:,} records ({part_['partitions']} partitions, "
        f"{part_['record_bytes']} B). Tidemark: one scheduler tick, every DAG run triggered at once through the REST "
        "API on `make airflow`'s stack (LocalExecutor, PostgreSQL), timed from the first trigger to the last run's "
        "end; CPU and peak RSS summed over the Airflow services' process trees (task processes and spark-submits "
        "included), PostgreSQL and the Spark Connect server (RSS counts pages shared by forked processes once per "
        "process). AvailableNow: the same topics, each job a spark-submit, timed from the first start to the last "
        f"end. Every output table checked: each offset exactly once.{verdict}",
        _table(["fleet", "wall seconds", "CPU seconds", "peak RSS MB", "RSS before the first start, MB",
                "at a time (Airflow's parallelism)", "load (1 min) start / end"],
               rows), "; ".join(ticks) + ".")


def audit(part_: dict) -> str:
    rows = [[f"{s['rows']:,}", f"{s['ledger_ranges']:,}", f"{s['output_mb']:,}", str(s["audit_seconds"]),
             " / ".join(str(x) for x in s["audit_seconds_runs"]), f"{s['peak_rss_mb']:,}"] for s in part_["sizes"]]
    return _section(
        "`tidemark audit` on a large table", f"{part_['date']} (`make bench-audit`): an output table written by "
        f"delta-rs in appends of 1,000,000 rows ({part_['partitions']} partitions, batches of "
        f"{part_['records_per_batch']:,} records, one record in {part_['dead_letter_every']:,} a dead letter), "
        f"audited in a fresh process (what `tidemark audit` runs), three times per size. Load average (1 min) "
        f"{part_['load_at_start']['load_1m']} at the start, {part_['load_at_end']['load_1m']} at the end.",
        _table(["output rows", "ledger ranges", "output MB", "audit seconds (median)", "runs", "peak RSS MB"], rows))


def maintenance_targets(part_: dict | None) -> list[dict]:
    """The small-files row's targets (bench/maintenance.py): files and read time after maintenance."""
    if not part_:
        return []
    before, after = part_["before"], part_["after"]
    files = f"{before['active_files']:,} -> {after['active_files']:,} files"
    return [{"target": f"after {part_['batches']:,} small batches, maintenance leaves <= 1 active file per 100 "
                       f"batches ({part_['date']})", "measured": files,
             "met": after["active_files"] <= max(1, part_["batches"] // 100)},
            {"target": "... and a full-table read >= 2x faster after it", "measured": f"{part_['read_speedup']}x "
             f"({before['read_seconds']} -> {after['read_seconds']} s)", "met": part_["read_speedup"] >= 2}]


def maintenance(part_: dict) -> str:
    rows = [[label, f"{s['active_files']:,}", f"{s['files_on_disk']:,}", f"{s['version']:,}", str(s["read_seconds"]),
             " / ".join(str(x) for x in s["read_seconds_runs"]), str(s["first_read_seconds"])]
            for label, s in (("before maintenance", part_["before"]), ("after `maintain` (VACUUM retaining 168h)",
                                                                       part_["after"]),
                             ("after a VACUUM 7 days later", part_["after_vacuum_7_days_later"]))]
    return _section(
        "Small files: 1,000 small batches, before and after maintenance",
        f"{part_['date']} (`make bench-maintenance`): {part_['batches']:,} commits of {part_['records_per_batch']} "
        f"records ({part_['partitions']} partitions, {part_['value_bytes']}-byte values), written directly as Delta "
        f"appends with the ingest job's layout (one Parquet file per Kafka partition per batch, the raw pipeline's "
        f"columns, the marker and `userMetadata` in each commit, file statistics; pyarrow writes the files, "
        f"delta-rs the commits) in {part_['write_seconds']} s; not through Spark. Then "
        f"`tidemark.operations.table_maintenance.maintain` (what the maintenance DAG runs: OPTIMIZE compaction, "
        f"VACUUM retaining 168h, checkpoints) in "
        f"**{part_['maintain_seconds']} s**. A full-table read is delta-rs loading the table and reading every "
        f"column of every row (median of 5 after a first read): **x{part_['read_speedup']}** faster after "
        f"maintenance. Load average (1 min) {part_['load_at_start']['load_1m']} at the start, "
        f"{part_['load_at_end']['load_1m']} at the end.",
        _table(["table", "active files", "files on disk", "Delta version", "full read, s (median)", "runs, s",
                "first read, s"], rows))


def ledger_size(part_: dict) -> str:
    """bench/ledger_size.py: the ledger's bytes after N entries, what each entry adds, what VACUUM frees."""
    def kb(value: float) -> str:
        return f"{value / 1024:,.1f}"

    rows = [[f"{p['entries']:,}", f"{p['seeded']['rows']:,}", f"{p['seeded']['active_files']:,}",
             kb(p["seeded"]["active_bytes"]), _n(p["ms_per_entry"]), kb(p["data_bytes_per_entry"]),
             kb(p["reclaimable_bytes_per_entry"]), kb(p["log_bytes_per_entry"]), str(p["after_vacuum"]["seconds"])]
            for p in part_["points"]]
    last = part_["points"][-1]
    return _section(
        "The ledger's size",
        f"{part_['date']} (`make bench-ledger-size`): one pipeline, {part_['rows_per_entry']} rows (partitions) per "
        f"entry, delta-rs on the local disk, no Kafka or Spark. A ledger of N committed entries (seeded in appends "
        f"of 5,000 entries, then compacted), then {last['sample_entries']} more written as runs write them (the "
        f"planned rows' append, the commit flip's merge, a compaction of the pipeline's files every "
        f"{part_['compact_after_files']}); then a VACUUM (full, retention 0: what one 7 days later finds). "
        f"After {last['entries']:,} entries the ledger's rows take **{kb(last['seeded']['active_bytes'])} KB** "
        f"({last['seeded']['rows']:,} rows), what a VACUUM leaves; each entry written as runs write it adds "
        f"{kb(last['data_bytes_per_entry'])} KB of data files there, all of it reclaimable, because the commit flip "
        f"rewrites the planned rows' file and each compaction rewrites the pipeline's compacted file, which grows "
        f"with its history. Added up over the sizes measured (trapezoid rule, an estimate), a ledger written entry "
        f"by entry holds **{part_['estimated_reclaimable_bytes_at_last_size'] / 1024 ** 3:,.1f} GB** of files no "
        f"version needs after {last['entries']:,} entries, besides {kb(last['log_bytes_per_entry'])} KB of log per "
        f"entry (the log cleanup of a maintenance run keeps 30 days of it). Load average (1 min) "
        f"{part_['load_average_at_start']} at the start, {part_['load_average_at_end']} at the end.",
        _table(["entries", "rows", "active files", "active KB", "write ms per entry", "data KB per entry",
                "reclaimable KB per entry", "log KB per entry", "VACUUM s"], rows))


def tls(part_: dict) -> str:
    m = part_["summary"]
    rows = [[label, f"{c['median_seconds']} ({c['min_seconds']}–{c['max_seconds']})",
             f"{c['median_records_per_second']:,}", str(c["median_plan_seconds"]), str(c["median_tree_cpu_seconds"]),
             f"{c['median_peak_tree_rss_mb']:,}"]
            for label, c in (("PLAINTEXT", m["plaintext"]), ("SASL_SSL (SCRAM-SHA-512)", m["sasl_ssl"]))]
    return _section(
        "Kafka over TLS", f"{part_['date']}: {part_['records']:,} records of {part_['record_bytes']} bytes on "
        f"{part_['partitions']} partitions (replication factor 3) of the three-broker cluster, read by the Tidemark "
        f"ingest job (plan call + spark-submit) over each listener, {m['plaintext']['runs']} runs each, alternating. "
        f"SASL_SSL / PLAINTEXT: **x{m['sasl_ssl_over_plaintext']}** the time. Load average (1 min) "
        f"{part_['load_at_start']['load_1m']} at the start, {part_['load_at_end']['load_1m']} at the end.",
        _table(["listener", "seconds (plan + job)", "records/s", "plan call, s", "CPU seconds of the job",
                "peak RSS of the job, MB"], rows))


def object_storage(part_: dict) -> str:
    m = part_["summary"]
    return _section(
        "S3 against the local disk", f"{part_['date']}: {part_['backlog']['records']:,} records in one `tidemark "
        f"run` batch, {m['local']['runs']} runs each, alternating; the S3 server is moto on loopback, not AWS.",
        _table(["lake", "median seconds"], [["local disk", str(m["local"]["median_seconds"])],
                                            ["local S3 server", str(m["s3"]["median_seconds"])],
                                            ["S3 / local", f"x{m['s3_over_local']}"]]))


def read_path(part_: dict) -> str:
    m = part_["medians"]
    rows = [[label, str(m[f"v1_relation_{sink}"]["median_seconds"]), str(m[f"v2_scan_{sink}"]["median_seconds"]),
             f"x{part_['v2_over_v1'][sink]}"]
            for label, sink in (("read alone (noop sink)", "noop"), ("read + Delta append", "delta"))]
    return _section(
        "Kafka read: V1 relation or V2 scan", f"{part_['date']}: {part_['records']:,} records of "
        f"{part_['record_bytes']} bytes on {part_['partitions']} partitions, one JVM taking turns after a warm-up "
        "round, "
        f"{part_['rounds']} rounds, medians in seconds (`bench/read_path.py`). Spark sends a batch read of Kafka to "
        "its V1 relation unless `spark.sql.sources.useV1SourceList` leaves `kafka` out; Tidemark's job reads "
        "through the V2 scan.",
        _table(["", "V1 relation", "V2 scan", "V2 / V1"], rows))


def class_data(part_: dict) -> str:
    rows = [[f"{int(size):,}", str(m["off_seconds"]), str(m["on_seconds"]), f"x{m['on_over_off']}",
             f"{m['off_cpu_seconds']} / {m['on_cpu_seconds']}", str(m["first_seconds"])]
            for size, m in part_["summary"]["sizes"].items()]
    return _section(
        "The JVM's start: class-data sharing", f"{part_['date']}: the Tidemark job (plan call + spark-submit, "
        f"`{part_['master']}`) on batches of each size, {part_['rounds']} rounds taking turns between sharing off "
        "(`TIDEMARK_CDS_DIR=off`) and on, medians (`bench/class_data_sharing.py`). "
        + ("The first job on a fresh host starts the trainer, which writes the archive "
           f"({part_['archive_mb']} MB) beside it" if any("archive_ready_seconds" in r for r in part_.get("runs", []))
           else f"The first job on a fresh host writes the archive ({part_['archive_mb']} MB) as its JVM exits (the "
                "release that measured it)")
        + "; later jobs map it (docs/OPERATIONS.md, *The job's JVM start*).",
        _table(["records per batch", "seconds, off", "seconds, on", "on / off", "CPU seconds, off / on",
                "the first job, s"], rows))


def console(part_: dict) -> str:
    routes = list(part_["ledgers"][0]["routes"])
    rows = [[ledger["shape"], f"{ledger['batches']:,}", *[f"{t['median_ms']:.0f}" for t in ledger["routes"].values()]]
            for ledger in part_["ledgers"]]
    return _section("The Tidemark page", f"{part_['date']}: each route, median ms of 7 calls after a warm-up, "
                    "in process (no HTTP stack), against a live broker.", _table(["ledger", "batches", *routes], rows))


# --- the page ------------------------------------------------------------------------------------

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
