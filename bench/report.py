"""bench/results/bench.json -> docs/BENCHMARKS.md and docs/benchmarks.png.

``python -m bench.report`` regenerates both from the stored JSON (no broker needed). Every number in
the document comes from the JSON; the prose of bench/findings.md is filled in with ``$name``
placeholders from the summary (see ``placeholders``).
"""

from __future__ import annotations

import json
import statistics
import string
from collections.abc import Iterable

from bench.contenders import AVAILABLE_NOW, CONSUMER_PERF, CONTENDERS, LABELS, PLAIN_BATCH, TIDEMARK_DAG, TIDEMARK_JOB
from bench.settings import RESULTS, ROOT

DOC = ROOT / "docs" / "BENCHMARKS.md"
CHART = ROOT / "docs" / "benchmarks.png"
FINDINGS = ROOT / "bench" / "findings.md"
METRICS = ("records_per_second", "mb_per_second", "seconds", "peak_tree_rss_mb", "peak_jvm_rss_mb")
BASELINES = {"available_now": AVAILABLE_NOW, "plain_batch": PLAIN_BATCH, "consumer_perf": CONSUMER_PERF}


# --- summary -------------------------------------------------------------------------------------

def spread(values: Iterable[float]) -> dict:
    found = [v for v in values if v is not None]
    if not found:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": round(statistics.median(found), 3), "min": round(min(found), 3), "max": round(max(found), 3),
            "n": len(found)}


def _contenders(runs: list[dict]) -> dict:
    return {name: {"label": LABELS[name], **{m: spread(r[m] for r in runs if r["contender"] == name) for m in METRICS}}
            for name in CONTENDERS if any(r["contender"] == name for r in runs)}


def _ratios(summary: dict) -> dict:
    ratios = {}
    for tidemark in (TIDEMARK_JOB, TIDEMARK_DAG):
        for short, baseline in BASELINES.items():
            if tidemark in summary and baseline in summary:
                ratios[f"{tidemark}/{short}"] = round(summary[tidemark]["records_per_second"]["median"]
                                                      / summary[baseline]["records_per_second"]["median"], 3)
    return ratios


PHASES = ("startup", "read_and_tally", "write_output", "ledger_commit", "shutdown")


def _phases(runs: list[dict]) -> dict:
    """Where the Tidemark ingest job's time goes (from its log lines), next to the plan call."""
    jobs = [r for r in runs if r["contender"] == TIDEMARK_JOB and "phases" in r]
    if not jobs:
        return {}
    return {"plan": spread(r["plan_seconds"] for r in jobs),
            **{phase: spread(r["phases"].get(phase) for r in jobs) for phase in PHASES}}


def _empty(empty_runs: list[dict]) -> dict:
    dag = [e for e in empty_runs if e["kind"] == "tidemark_dag_empty"]
    now = [e for e in empty_runs if e["kind"] == "available_now_empty"]
    out = {}
    if dag:
        out["dag"] = {"wall_seconds": spread(e["wall_seconds"] for e in dag),
                      "plan_task_seconds": spread(e["plan_task_seconds"] for e in dag),
                      "jvms_started": max(e["jvms_started"] for e in dag),
                      "ingest_task_states": sorted({str(e["ingest_task_state"]) for e in dag}),
                      "peak_tree_rss_mb": spread(e["peak_tree_rss_mb"] for e in dag),
                      **{f"breakdown_{k}": spread(e.get("plan_task_breakdown", {}).get(k) for e in dag)
                         for k in ("airflow_task_start", "plan_callable", "plan_task")}}
        out["cli"] = {"wall_seconds": spread(e["cli"]["wall_seconds"] for e in dag),
                      "jvms_started": max(e["cli"]["jvms_started"] for e in dag),
                      "peak_tree_rss_mb": spread(e["cli"]["peak_tree_rss_mb"] for e in dag)}
        out["plan_call"] = {"seconds": spread(e["plan_call_seconds"] for e in dag)}
    if now:
        out["available_now"] = {"wall_seconds": spread(e["wall_seconds"] for e in now),
                                "jvms_started": min(e["jvms_started"] for e in now),
                                "peak_tree_rss_mb": spread(e["peak_tree_rss_mb"] for e in now)}
    return out


def _ledger(growth: dict) -> dict:
    def row(entry: dict) -> dict:
        return {"batches": entry["batches"], "state_ms": entry["state"]["median_ms"],
                "full_read_ms": entry["full_read"]["median_ms"],
                "plan_ms": entry.get("plan", {}).get("median_ms"), "active_files": entry["active_files"],
                "log_json_files": entry["log_json_files"], "checkpoints": entry["checkpoints"],
                "rows": entry["rows"], "write_ms_per_batch_recent": entry.get("write_ms_per_batch_recent")}

    synthetic = [row(e) for e in growth.get("synthetic", [])]
    out: dict = {"synthetic": synthetic, "protocol": [row(e) for e in growth.get("protocol", [])]}
    if len(synthetic) >= 2:
        small, large = synthetic[0], synthetic[-1]
        out["plan_ratio"] = round(large["plan_ms"] / small["plan_ms"], 2)
        out["state_ratio"] = round(large["state_ms"] / small["state_ms"], 2)
        out["full_read_ratio"] = round(large["full_read_ms"] / small["full_read_ms"], 2)
        out["ratio_between"] = [small["batches"], large["batches"]]
    return out


SIDE_PARTS = {"typed_json": "typed_json.json", "avro": "avro.json", "small_batch": "small_batch.json",
              "object_storage": "object_storage.json", "console": "console.json"}
"""The benchmarks that run as programs of their own (make bench runs the first three), by their key in
bench.json's ``parts`` and their result file."""


def part(results: dict, name: str) -> dict | None:
    """One benchmark's results: bench.json's own (``skew``, ``scale``) or its ``parts`` entry, else
    its result file."""
    if name in results:
        return results[name]
    if name in results.get("parts", {}):
        return results["parts"][name]
    return _side(SIDE_PARTS.get(name, f"{name}.json"))


def _scheduler(results: dict, summary: dict) -> dict:
    sched = results.get("scheduler")
    if not sched:
        return {}
    out = {"run_seconds": spread(r["run_seconds"] for r in sched["runs"]),
           "trigger_to_end_seconds": spread(r["trigger_to_end_seconds"] for r in sched["runs"]),
           "tasks": {t: spread(r["tasks"].get(t, {}).get("seconds") for r in sched["runs"])
                     for t in sched["runs"][0]["tasks"]} if sched["runs"] else {},
           "empty_task_seconds": spread(e["task_seconds"] for e in sched["empty_runs"]),
           "empty_run_seconds": spread(e["run_seconds"] for e in sched["empty_runs"]),
           "empty_tasks": {t: spread(e["tasks"].get(t, {}).get("seconds") for e in sched["empty_runs"])
                           for t in sched["empty_runs"][0]["tasks"]} if sched["empty_runs"] else {},
           "empty_jvms_started": max((e["jvms_started"] for e in sched["empty_runs"]), default=None),
           "empty_ingest_states": sorted({e["tasks"].get("ingest", {}).get("state") or "-"
                                          for e in sched["empty_runs"]})}
    if sched.get("job_alone"):  # measured beside the DAG runs, interleaved, with the same Airflow running
        out["job_alone_seconds"] = spread(j["seconds"] for j in sched["job_alone"])
        job = out["job_alone_seconds"]["median"]
    else:  # an older run: the contenders' job, without Airflow running
        job = summary["contenders"].get(TIDEMARK_JOB, {}).get("seconds", {}).get("median")
    if job and out["run_seconds"]["median"]:
        out["job_seconds"] = job
        out["dag_vs_job"] = round(job / out["run_seconds"]["median"], 3)
    return out


def _targets(summary: dict, results: dict) -> list[dict]:
    targets = []
    ratios = summary.get("ratios", {})
    for key, goal, text in (("tidemark_job/available_now", 1.0, "raw values: Tidemark >= 1.0x AvailableNow"),
                            ("tidemark_job/plain_batch", 0.95, "raw values: Tidemark >= 0.95x the plain batch")):
        if key in ratios:
            targets.append({"target": text, "measured": f"{ratios[key]:.2f}x", "met": ratios[key] >= goal})
    if typed := part(results, "typed_json"):
        for key, goal, text in (("available_now_json", 1.0, "JSON values: Tidemark >= 1.0x AvailableNow"),
                                ("plain_batch_json", 0.95, "JSON values: Tidemark >= 0.95x the plain batch")):
            if (ratio := typed["summary"]["ratios"].get(f"tidemark_json/{key}")) is not None:
                targets.append({"target": f"{text} ({typed['date']})", "measured": f"{ratio:.2f}x",
                                "met": ratio >= goal})
    if skew := part(results, "skew"):
        speedup = skew["summary"]["split_speedup"]
        targets.append({"target": "skew: split ranges >= 1.5x the unsplit read", "measured": f"{speedup:.2f}x",
                        "met": speedup >= 1.5})
    if scale := part(results, "scale"):
        m = scale["summary"]
        small, large = min(m["sizes"], key=int), max(m["sizes"], key=int)
        between = f"{int(large):,} vs {int(small):,}"
        targets.append({"target": f"scale: peak driver JVM RSS at {between} records within 10 %",
                        "measured": f"{m['jvm_rss_ratio']:.2f}x", "met": abs(m["jvm_rss_ratio"] - 1) <= 0.10})
        targets.append({"target": f"scale: throughput at {between} records >= 0.9x",
                        "measured": f"{m['throughput_ratio']:.2f}x", "met": m["throughput_ratio"] >= 0.9})
    sched = summary.get("scheduler", {})
    if "dag_vs_job" in sched:
        targets.append({"target": "the whole DAG under a running scheduler >= 0.85x the job alone",
                        "measured": f"{sched['dag_vs_job']:.2f}x", "met": sched["dag_vs_job"] >= 0.85})
    if sched.get("empty_task_seconds", {}).get("median") is not None:
        task_s, jvms = sched["empty_task_seconds"]["median"], sched["empty_jvms_started"]
        targets.append({"target": "empty run under the scheduler: <= 3 s of task time, no JVM",
                        "measured": f"{task_s:.2f} s; {jvms} JVM(s)", "met": task_s <= 3 and jvms == 0})
    if small := part(results, "small_batch"):
        warm = small["summary"]["spark-connect"]["median_seconds"]
        targets.append({"target": f"10,000-record batch on the warm path <= 3 s of job time ({small['date']})",
                        "measured": f"{warm:.2f} s", "met": warm <= 3})
    dag = summary.get("empty", {}).get("dag")
    if dag:
        no_jvm = f"{dag['jvms_started']} JVM(s), ingest task {'/'.join(dag['ingest_task_states'])}"
        plan = dag["plan_task_seconds"]["median"]
        targets.append({"target": "empty run under `airflow dags test`: the plan task <= 3 s, no JVM",
                        "measured": f"{plan:.2f} s; {no_jvm}", "met": plan <= 3 and dag["jvms_started"] == 0})
        callable_s = dag["breakdown_plan_callable"]["median"]
        if callable_s is not None:
            targets.append({"target": "... of which Tidemark's plan callable (cold process)",
                            "measured": f"{callable_s:.2f} s", "met": callable_s <= 3})
    ledger = summary.get("ledger", {})
    if "plan_ratio" in ledger:
        small, large = ledger["ratio_between"]
        targets.append({"target": f"plan time at {large:,} batches <= 1.5x that at {small:,}",
                        "measured": f"{ledger['plan_ratio']:.2f}x", "met": ledger["plan_ratio"] <= 1.5})
    return targets


def summarize(results: dict) -> dict:
    summary: dict = {"contenders": _contenders(results.get("runs", []))}
    summary["ratios"] = _ratios(summary["contenders"])
    summary["tidemark_phases"] = _phases(results.get("runs", []))
    summary["empty"] = _empty(results.get("empty_runs", []))
    summary["ledger"] = _ledger(results.get("ledger_growth", {}))
    summary["scheduler"] = _scheduler(results, summary)
    summary["targets"] = _targets(summary, results)
    return summary


# --- markdown ------------------------------------------------------------------------------------

def _n(value: float | None, digits: int = 0) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _range(s: dict, digits: int = 0) -> str:
    return f"{_n(s['median'], digits)} ({_n(s['min'], digits)}–{_n(s['max'], digits)})"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def machine_section(results: dict) -> str:
    m, s = results["machine"], results["settings"]
    start, end = results.get("load_at_start", {}), results.get("load_at_end", {})
    runs = results.get("runs", [])
    loads = [r["load_1m"] for r in runs if "load_1m" in r]
    rows = [["CPU", f"{m['cpu_model']}, {m['cores']} cores"], ["RAM", f"{m['ram_gib']} GiB"], ["OS", m["os"]],
            ["Java", m["java"]], ["Python", m["python"]],
            ["Spark", f"{m['spark']} (pip), Delta Lake {m['delta_spark']}, Kafka client {m['spark_kafka_client']}"],
            ["Kafka broker", f"{m['kafka_broker']} (KRaft, single node, local disk)"],
            ["Airflow / delta-rs", f"{m['airflow']} / deltalake {m['deltalake']}"],
            ["Spark settings (1–3)", f"`--master {s['master']} --driver-memory {s['driver_memory']}`, Tidemark's "
                                     "`DEFAULT_CONF` and jars, session built by `spark_jobs/ingest.py`"],
            ["Load average (1 min)", f"{start.get('load_1m', '–')} at start, {end.get('load_1m', '–')} at end"
                                     + (f", {min(loads):.1f}–{max(loads):.1f} after the runs" if loads else "")]]
    return _table(["", ""], rows)


def contenders_section(summary: dict) -> str:
    rows = []
    for c in summary["contenders"].values():
        rows.append([c["label"], _range(c["records_per_second"]), _range(c["mb_per_second"], 1),
                     _range(c["seconds"], 1), _range(c["peak_tree_rss_mb"]), _range(c["peak_jvm_rss_mb"])])
    return _table(["contender", "records/s median (min–max)", "MB/s median (min–max)", "seconds median (min–max)",
                   "peak RSS of the process tree, MB", "peak JVM RSS, MB"], rows)


def ratios_section(summary: dict) -> str:
    ratios = summary["ratios"]
    rows = []
    for tidemark in (TIDEMARK_JOB, TIDEMARK_DAG):
        cells = [ratios.get(f"{tidemark}/{short}") for short in BASELINES]
        if any(c is not None for c in cells):
            rows.append([LABELS[tidemark], *[f"{c:.2f}x" if c is not None else "–" for c in cells]])
    return _table(["throughput ratio (medians)", "/ AvailableNow", "/ no-bookkeeping batch", "/ consumer perf"], rows)


def empty_section(summary: dict) -> str:
    e = summary["empty"]
    rows = []
    if "dag" in e:
        d = e["dag"]
        what = f"plan task {_range(d['plan_task_seconds'], 2)} s (Airflow's record)"
        if d["breakdown_plan_callable"]["median"] is not None:
            what += (f": Airflow starting the task {_range(d['breakdown_airflow_task_start'], 2)} s, Tidemark's "
                     f"plan callable {_range(d['breakdown_plan_callable'], 2)} s")
        rows.append(["Tidemark DAG, `airflow dags test`", _range(d["wall_seconds"], 1),
                     f"{what}; ingest task: {'/'.join(d['ingest_task_states'])}", str(d["jvms_started"]),
                     _range(d["peak_tree_rss_mb"])])
        c = e["cli"]
        rows.append(["Tidemark CLI, `tidemark run`", _range(c["wall_seconds"], 1), "plan, nothing new, no spark-submit",
                     str(c["jvms_started"]), _range(c["peak_tree_rss_mb"])])
        p = e["plan_call"]
        rows.append(["Tidemark plan call (`prepare_batch`, in process)", _range(p["seconds"], 3), "ledger read + Kafka "
                     "offsets", "0", "–"])
    if "available_now" in e:
        a = e["available_now"]
        rows.append(["AvailableNow, same checkpoint", _range(a["wall_seconds"], 1),
                     "Spark starts, finds no new offsets", f"{a['jvms_started']} (at least)",
                     _range(a["peak_tree_rss_mb"])])
    return _table(["empty run (nothing new)", "wall seconds median (min–max)", "what happens", "JVMs started",
                   "peak RSS, MB"], rows)


def ledger_section(summary: dict) -> str:
    ledger = summary["ledger"]
    rows = []
    for shape, label in (("synthetic", "few big appends"), ("protocol", "as runs write it")):
        for r in ledger.get(shape, []):
            rows.append([f"{r['batches']:,}", label, f"{r['rows']:,}", _n(r["state_ms"], 1), _n(r["full_read_ms"], 1),
                         _n(r["plan_ms"], 1), f"{r['log_json_files']:,} / {r['checkpoints']} / {r['active_files']:,}",
                         _n(r["write_ms_per_batch_recent"])])
    return _table(["committed batches", "ledger shape", "rows", "`Ledger.state` ms", "full read ms (before the fix)",
                   "plan call ms", "log JSON files / checkpoints / active files", "write ms per batch (recent)"], rows)


def phases_section(summary: dict) -> str:
    phases = summary.get("tidemark_phases", {})
    labels = {"plan": "plan call (Python, before spark-submit)",
              "startup": "JVM and session start, ledger check",
              "read_and_tally": "Kafka read into persisted rows and tally (only for values that can be bad)",
              "write_output": "output write, one Delta commit with the marker (raw values: the one pass over Kafka)",
              "ledger_commit": "ledger commit (delta-rs count of the batch in the output, merge)",
              "shutdown": "Spark stop, JVM exit"}
    return _table(["Tidemark ingest job phase", "seconds median (min–max)"],
                  [[labels[k], _range(v, 1)] for k, v in phases.items() if v["n"]])


def scheduler_section(results: dict, summary: dict) -> str:
    sched, m = results["scheduler"], summary["scheduler"]
    rows = [["whole DAG run (Airflow's start to end)", _range(m["run_seconds"], 1)],
            ["trigger (REST API) to the run's end", _range(m["trigger_to_end_seconds"], 1)]]
    rows += [[f"task `{t}`", _range(v, 2)] for t, v in m["tasks"].items()]
    if "job_alone_seconds" in m:
        rows.append(["the job alone (plan + spark-submit), interleaved, Airflow running",
                     _range(m["job_alone_seconds"], 1)])
    elif "job_seconds" in m:
        rows.append(["the job alone (plan + spark-submit, the contenders' median)", _n(m["job_seconds"], 1)])
    if "job_seconds" in m:
        rows.append(["throughput: DAG / job alone", f"{m['dag_vs_job']:.2f}x"])
    rows.append(["empty run: the whole DAG run", _range(m["empty_run_seconds"], 2)])
    rows.append(["empty run: task time, all tasks", _range(m["empty_task_seconds"], 2)])
    rows += [[f"empty run: task `{t}`", _range(v, 2)] for t, v in m["empty_tasks"].items() if v["n"]]
    rows.append(["empty run: the ingest task", "/".join(m["empty_ingest_states"])])
    rows.append(["empty run: JVMs started under the scheduler", str(m["empty_jvms_started"])])
    return (f"`scripts/airflow.sh up` (api-server, scheduler with the {sched['executor']}, dag-processor, triggerer "
            f"on {sched['database']}; up in {sched['airflow_up_seconds']} s), the ingest task launched by "
            f"{sched['launcher']}; {len(sched['runs'])} runs on the same backlog, one pipeline each, triggered through "
            "the REST API; then each DAG again with nothing new. Seconds: median (min–max); task times are "
            "Airflow's record.\n\n" + _table(["", "seconds"], rows))


def skew_section(skew: dict) -> str:
    m = skew["summary"]
    rows = []
    split = f"long ranges split (`max_offsets_per_spark_task` = {skew.get('split_offsets', 500000):,})"
    for key, label in (("split", split), ("one_task_per_partition", "one Spark task per partition (Spark's default)")):
        c = m[key]
        busy = c.get("median_machine_busy_share")
        seconds = f"{c['median_seconds']} ({c.get('min_seconds', '–')}–{c.get('max_seconds', '–')})"
        rows.append([label, str(c["runs"]), seconds,
                     f"{c['median_records_per_second']:,}", "–" if busy is None else f"{busy:.0%}",
                     _n(c.get("median_job_cpu_seconds"), 1)])
    return (f"{skew['date']}: {skew['backlog']['records']:,} records, {skew['backlog']['hot_share']:.0%} of them on "
            f"one of {len(skew['backlog']['records_per_partition'])} partitions, `{skew['master']}`, the "
            f"`tidemark run` path, alternating. Split speed-up **x{m['split_speedup']}** (target x1.5; at most x1.6 "
            "on 2 cores if the Spark tasks were the only work). *Machine busy* is the share of both cores in use "
            "during the job "
            "(every process: the job, the broker serving it, the benchmark); *job CPU* is the job's process "
            "tree.\n\n"
            + _table(["read", "runs", "seconds median (min–max)", "records/s", "machine busy", "job CPU s"], rows))


def scale_section(scale: dict) -> str:
    rows = []
    for size, c in sorted(scale["summary"]["sizes"].items(), key=lambda kv: int(kv[0])):
        rows.append([f"{int(size):,}", str(c["runs"]), _n(c["median_seconds"], 1), _n(c["median_records_per_second"]),
                     f"{_n(c['median_peak_jvm_rss_mb'])} (max {_n(c['max_peak_jvm_rss_mb'])})",
                     _n(c["median_python_driver_rss_mb"]), _n(c["median_peak_tree_rss_mb"])])
    m = scale["summary"]
    return (f"{scale['date']}: one topic of {scale['backlog']['records']:,} records ({scale['record_bytes']} bytes, "
            f"{scale['backlog']['partitions']} partitions); each batch a fresh pipeline capped at the size with "
            f"`max_offsets_per_run`, the `tidemark run` path (`{scale['master']}`, driver memory "
            f"{scale['driver_memory']}), sizes rotated per repetition. Largest / smallest: throughput "
            f"**x{m['throughput_ratio']}**, driver JVM peak RSS **x{m['jvm_rss_ratio']}**, Python driver RSS "
            f"x{m['python_rss_ratio']}.\n\n"
            + _table(["records", "runs", "seconds (median)", "records/s (median)", "driver JVM peak RSS, MB (median)",
                      "Python driver RSS, MB", "process tree RSS, MB"], rows))


def profile_section(profile: dict) -> str:
    m = profile["summary"]
    job, plain = m["tidemark_job"], m["plain_batch"]
    rows = [["whole run (py-spy and the event log on)", _n(job["wall_seconds"], 1), _n(plain["wall_seconds"], 1)],
            ["JVM: application start to its first Spark job", _n(job["jvm_start_to_first_job_seconds"], 1),
             _n(plain["jvm_start_to_first_job_seconds"], 1)],
            ["JVM: Spark jobs, wall", _n(job["jobs_seconds"], 1), _n(plain["jobs_seconds"], 1)],
            ["JVM: tasks' CPU time, summed", _n(job["task_cpu_seconds"], 1), _n(plain["task_cpu_seconds"], 1)],
            ["JVM: tasks' GC time, summed", _n(job["task_gc_seconds"], 1), _n(plain["task_gc_seconds"], 1)]]
    rows += [[f"Python driver: {label}", _n(job["python_spans"][label], 2), _n(plain["python_spans"][label], 2)]
             for label in job["python_spans"]]
    repeats = len(profile["runs"]) // 2
    return (f"{profile['date']}: the `make bench` backlog ({profile['backlog']['records']:,} records), the raw-value "
            f"job and the plain batch, {repeats} runs each, alternating, each with Spark's event log on and under "
            f"py-spy ({profile['sample_rate']} samples/s of the job driver's main thread, waiting included). "
            "Medians, seconds. The Python rows are inclusive (a span counts every sample with that function on "
            "the stack) and overlap: the Delta write is also inside Tidemark's execute.\n\n"
            + _table(["", "Tidemark ingest job", "plain batch"], rows))


def targets_section(summary: dict) -> str:
    return _table(["target (reported, not asserted)", "measured", "met"],
                  [[t["target"], t["measured"], "yes" if t["met"] else "**no**"] for t in summary["targets"]])


def placeholders(results: dict) -> dict[str, str]:
    """Flat ``$name`` values for bench/findings.md."""
    summary = results["summary"]
    values: dict[str, str] = {"records": f"{results['settings']['records']:,}",
                              "record_bytes": str(results["settings"]["record_bytes"]),
                              "repeats": str(results["settings"]["repeats"])}
    for name, c in summary["contenders"].items():
        for metric in METRICS:
            values[f"{name}_{metric}"] = _n(c[metric]["median"], 1 if metric != "records_per_second" else 0)
    for key, ratio in summary["ratios"].items():
        values[key.replace("/", "_vs_")] = f"{ratio:.2f}"
    for phase, value in summary.get("tidemark_phases", {}).items():
        values[f"phase_{phase}"] = _n(value["median"], 1)
    empty = summary["empty"]
    if "dag" in empty:
        values["empty_dag_wall"] = _n(empty["dag"]["wall_seconds"]["median"], 1)
        values["empty_plan_task"] = _n(empty["dag"]["plan_task_seconds"]["median"], 2)
        values["empty_cli_wall"] = _n(empty["cli"]["wall_seconds"]["median"], 1)
        values["empty_plan_call"] = _n(empty["plan_call"]["seconds"]["median"], 3)
        values["empty_airflow_task_start"] = _n(empty["dag"]["breakdown_airflow_task_start"]["median"], 2)
        values["empty_plan_callable"] = _n(empty["dag"]["breakdown_plan_callable"]["median"], 2)
    if "available_now" in empty:
        values["empty_available_now_wall"] = _n(empty["available_now"]["wall_seconds"]["median"], 1)
    if small := _side("small_batch.json"):
        values["small_warm_seconds"] = str(small["summary"]["spark-connect"]["median_seconds"])
        values["small_submit_seconds"] = str(small["summary"]["spark-submit"]["median_seconds"])
        values["small_warm_speedup"] = str(small["summary"]["warm_speedup"])
    values.update(_part_placeholders(results, summary))
    ledger = summary["ledger"]
    for key in ("plan_ratio", "state_ratio", "full_read_ratio"):
        if key in ledger:
            values[key] = f"{ledger[key]:.2f}"
    for shape in ("synthetic", "protocol"):
        for r in ledger.get(shape, []):
            for metric in ("state_ms", "full_read_ms", "plan_ms", "write_ms_per_batch_recent"):
                if r.get(metric) is not None:
                    values[f"{shape}_{r['batches']}_{metric}"] = _n(r[metric], 1)
    return values


def _part_placeholders(results: dict, summary: dict) -> dict[str, str]:
    """``$sched_*``, ``$skew_*`` and ``$scale_*`` for the findings."""
    values: dict[str, str] = {}
    if sched := summary.get("scheduler"):
        values["sched_run_seconds"] = _n(sched["run_seconds"]["median"], 1)
        values["sched_trigger_seconds"] = _n(sched["trigger_to_end_seconds"]["median"], 1)
        values["sched_empty_task_seconds"] = _n(sched["empty_task_seconds"]["median"], 2)
        values["sched_empty_run_seconds"] = _n(sched["empty_run_seconds"]["median"], 2)
        values["sched_empty_jvms"] = str(sched["empty_jvms_started"])
        for task, v in sched["tasks"].items():
            values[f"sched_task_{task}"] = _n(v["median"], 2)
        for task, v in sched["empty_tasks"].items():
            values[f"sched_empty_task_{task}"] = _n(v["median"], 2)
        tasks = sum(v["median"] or 0 for v in sched["tasks"].values())
        values["sched_tasks_total"] = _n(tasks, 1)
        values["sched_gaps"] = _n(sched["run_seconds"]["median"] - tasks, 1)
        if "dag_vs_job" in sched:
            values["sched_dag_vs_job"] = f"{sched['dag_vs_job']:.2f}"
            values["sched_job_seconds"] = _n(sched["job_seconds"], 1)
            values["sched_overhead"] = _n(sched["run_seconds"]["median"] - sched["job_seconds"], 1)
            values["sched_best_run"] = _n(sched["run_seconds"]["min"], 1)
            values["sched_best_ratio"] = f"{sched['job_seconds'] / sched['run_seconds']['min']:.2f}"
    if skew := part(results, "skew"):
        m = skew["summary"]
        values["skew_speedup"] = f"{m['split_speedup']:.2f}"
        for key, short in (("split", "split"), ("one_task_per_partition", "whole")):
            values[f"skew_{short}_seconds"] = _n(m[key]["median_seconds"], 1)
            if m[key].get("median_machine_busy_share") is not None:
                values[f"skew_{short}_busy"] = f"{m[key]['median_machine_busy_share']:.0%}"
                values[f"skew_{short}_cpu"] = _n(m[key]["median_job_cpu_seconds"], 1)
    if profile := part(results, "profile"):
        spans = {"session": "Spark session start (getOrCreate)",
                 "save": "the Delta write (DataFrameWriter.save: the one pass over Kafka)",
                 "checks": "Tidemark: output marker and frozen-plan checks before the read (delta-rs)",
                 "finalize": "Tidemark: finalize (tables checked against the frozen ranges, ledger commit)"}
        for short, name in (("job", "tidemark_job"), ("plain", "plain_batch")):
            m = profile["summary"][name]
            values[f"prof_{short}_wall"] = _n(m["wall_seconds"], 1)
            values[f"prof_{short}_first_job"] = _n(m["jvm_start_to_first_job_seconds"], 1)
            values[f"prof_{short}_jobs"] = _n(m["jobs_seconds"], 1)
            values[f"prof_{short}_cpu"] = _n(m["task_cpu_seconds"], 1)
            values[f"prof_{short}_gc"] = _n(m["task_gc_seconds"], 1)
            for key, label in spans.items():
                values[f"prof_{short}_{key}"] = _n(m["python_spans"].get(label), 2)
    if typed := part(results, "typed_json"):
        m = typed["summary"]
        values["json_vs_now"] = f"{m['ratios'].get('tidemark_json/available_now_json', 0):.2f}"
        values["json_vs_batch"] = f"{m['ratios'].get('tidemark_json/plain_batch_json', 0):.2f}"
        for key, short in (("startup", "startup"), ("write_output_and_tally", "write"), ("dead_letters", "dead"),
                           ("ledger_commit", "ledger")):
            values[f"json_{short}"] = _n(m.get("tidemark_phases", {}).get(key), 2)
    if scale := part(results, "scale"):
        m = scale["summary"]
        for key in ("throughput_ratio", "jvm_rss_ratio", "python_rss_ratio"):
            values[f"scale_{key}"] = f"{m[key]:.2f}"
        ordered = sorted(m["sizes"].items(), key=lambda kv: int(kv[0]))
        if len(ordered) >= 3:  # the two largest: does the RSS still grow once the heap has filled?
            (_, mid), (_, top) = ordered[-2], ordered[-1]
            values["scale_jvm_rss_ratio_top"] = f"{top['median_peak_jvm_rss_mb'] / mid['median_peak_jvm_rss_mb']:.2f}"
        for size, c in m["sizes"].items():
            label = f"{int(size) // 1_000_000}m" if int(size) % 1_000_000 == 0 else size
            values[f"scale_{label}_rps"] = _n(c["median_records_per_second"])
            values[f"scale_{label}_seconds"] = _n(c["median_seconds"], 1)
            values[f"scale_{label}_jvm_rss"] = _n(c["median_peak_jvm_rss_mb"])
            values[f"scale_{label}_python_rss"] = _n(c["median_python_driver_rss_mb"])
    return values


def markdown(results: dict) -> str:
    summary = results["summary"]
    s = results["settings"]
    findings = string.Template(FINDINGS.read_text()).safe_substitute(placeholders(results)) if FINDINGS.exists() else ""
    parts = [
        "# Benchmarks",
        f"Generated by `make bench` from [`bench/results/bench.json`](../bench/results/bench.json) (run started "
        f"{results['started_at']}, {results.get('wall_minutes', '–')} min); regenerate this page from the JSON with "
        "`.venv/bin/python -m bench.report`. Nothing here is asserted by `make test`.",
        "## Machine", machine_section(results),
        "## How to run",
        "```bash\nmake bench                                   # the default: 2,000,000 records of 300 bytes, "
        "3 repetitions\nBENCH_RECORDS=50000 BENCH_REPEATS=1 make bench  # a quick look\n```\n\n"
        "`scripts/bench.sh` starts a private broker (`scripts/with_broker.sh bench ${BENCH_KAFKA_PORT:-19292}`) and "
        "runs `python -m bench.run`. Knobs: `BENCH_RECORDS`, `BENCH_RECORD_BYTES`, `BENCH_PARTITIONS` (8), "
        "`BENCH_REPEATS` (3), `BENCH_LEDGER_SIZES` (10,1000,10000), `BENCH_LEDGER_SMALL_COMMITS` (1000), "
        "`BENCH_DRIVER_MEMORY` (1g), `BENCH_SCALE_SIZES` (2000000,6000000,12000000), `BENCH_SCALE_REPEATS` "
        "(`BENCH_REPEATS`), `BENCH_SPLIT_OFFSETS` (500000), `BENCH_SKIP` (`contenders`, `scheduler`, `ledger`, "
        "`skew`, `profile`, `scale`, `json`, `avro`, `small`: the parts not to run; a part of `bench.run` left "
        "out keeps its last results). Work files go to `.cache/bench` "
        "(its own lake, pipelines folder and Airflow home), results to `bench/results/bench.json`, this page and "
        "`docs/benchmarks.png`.",
        "## Method",
        f"* **Backlog**: a fresh topic, {s['partitions']} partitions, {s['records']:,} JSON order events of "
        f"{s['record_bytes']} bytes ({s['megabytes']:,} MB of values), produced by Kafka's "
        "`org.apache.kafka.tools.ProducerPerformance` with `--payload-file` (no compression)."
        + (f" It took {results['backlog']['produce_seconds']} s "
           f"({results['backlog']['producer_records_per_second']:,.0f} records/s as the tool reports)."
           if "backlog" in results else ""),
        "* **Contenders**, each reading the whole backlog into a fresh Delta table (consumer perf only reads), "
        f"{s['repeats']} repetitions, interleaved (each repetition starts one contender later):\n"
        "  1. *Tidemark ingest job*: `tidemark.batch.prepare_batch` (the plan, timed in process) then exactly the "
        "spark-submit of `tidemark run` (`tidemark_spark.submit.spark_submit_command`), i.e. "
        "`tidemark_spark/ingest.py` with its "
        "ledger check, read check, Delta commit with the idempotency marker and ledger commit; *Tidemark DAG*: the "
        "whole `tidemark_ingest__<pipeline>` DAG with `airflow dags test` (plan, ingest, report);\n"
        "  2. *AvailableNow*: `bench/jobs/available_now.py`, Structured Streaming, Kafka source -> Delta sink, "
        "fresh checkpoint, `Trigger.AvailableNow`;\n"
        "  3. *plain batch*: `bench/jobs/plain_batch.py`, `spark.read` earliest -> latest, `append` to Delta;\n"
        "  4. *consumer perf*: `org.apache.kafka.tools.ConsumerPerformance` (read_committed, a fresh group).\n"
        "* 1–3 run with the **same spark-submit command** up to the script (master, driver memory, jars, conf: "
        "`bench.stack.spark_submit_base` cuts Tidemark's own command), the same SparkSession builder "
        "(`spark_jobs.ingest.build_session`), the same Kafka client options (`tidemark.spark_io.kafka_source_options`) "
        "and the same output columns (`tidemark.spark_io.to_rows`). Every output table is checked to hold exactly "
        "the backlog's records.",
        "* **Time** is wall time from process start to exit (JVM start included, for every contender); Tidemark's "
        "job adds its plan call. **MB** are value bytes (2^20 bytes, as Kafka's tools count). **Memory** is the peak "
        "resident set of the whole process tree (spark-submit's JVM driver plus the Python driver, or Airflow and "
        "everything it starts), sampled every 0.1 s with psutil; the JVM column is the largest single `java` "
        "process.",
        "## Throughput", contenders_section(summary), "", ratios_section(summary),
        "Where the Tidemark ingest job's time goes, from the timestamps of its own log lines:",
        phases_section(summary),
        "## Targets", targets_section(summary),
        "## Fixed costs: empty runs",
        "The same pipeline run again with nothing new. JVMs are counted by sampling the process tree every 0.1 s "
        "(a JVM lives for seconds, so none can be missed); the ingest task's state comes from Airflow's database.",
        empty_section(summary),
        "## Ledger growth",
        "Plan time with N committed batches of one pipeline (one row per partition and batch). *Few big appends*: "
        "rows shaped like real ones written with delta-rs in appends of 2,000 batches. *As runs write it*: every "
        "batch a `planned` append then the merge that commits it (two Delta commits per batch). `Ledger.state` is "
        "the ledger read inside the plan; *full read* is how it read the ledger before this benchmark (every row of "
        "the pipeline into Python, then `derive_state`); *plan call* is `prepare_batch` on a topic with nothing new "
        "(ledger read, Kafka metadata and offsets).",
        ledger_section(summary),
        "![throughput, ledger growth and scale](benchmarks.png)",
    ]
    if results.get("scheduler"):
        parts += ["## The DAG under a running scheduler", scheduler_section(results, summary)]
    if skew := part(results, "skew"):
        parts += ["## Skew", skew_section(skew)]
    if profile := part(results, "profile"):
        parts += ["## Profile of the raw path", profile_section(profile)]
    if scale := part(results, "scale"):
        parts += ["## Scale", scale_section(scale)]
    if kept := results.get("kept_from"):
        parts += ["Parts not run this time (`BENCH_SKIP`) keep their last results: " + ", ".join(
            f"{k} from the run of {v}" for k, v in kept.items()) + "."]
    if findings:
        parts += ["## Findings", findings.strip()]
    parts += other_measurements()
    return "\n\n".join(parts) + "\n"


def _side(name: str) -> dict | None:
    path = RESULTS / name
    return json.loads(path.read_text()) if path.exists() else None


def other_measurements() -> list[str]:
    """The benchmarks with a make target of their own, from their result files when present."""
    parts = []
    if storage := _side("object_storage.json"):
        m = storage["summary"]
        parts += ["### One batch to S3 vs the local disk (`make bench-s3`, `bench/results/object_storage.json`)",
                  f"{storage['date']}: {storage['backlog']['records']:,} records in one `tidemark run` batch, "
                  f"{m['local']['runs']} runs each, alternating: local disk median {m['local']['median_seconds']} s, "
                  f"the local S3 server (moto on loopback, not AWS) median {m['s3']['median_seconds']} s: "
                  f"**x{m['s3_over_local']}**."]
    if typed := _side("typed_json.json"):
        m, s, backlog = typed["summary"], typed["settings"], typed["backlog"]
        rows = ["| contender | median | records/s | peak RSS |", "|---|---|---|---|"]
        rows += [f"| {c['label']} | {c['median_seconds']} s ({c['min_seconds']}–{c['max_seconds']}) | "
                 f"{c['median_records_per_second']:,} | {c['median_peak_tree_rss_mb']:,} MB |"
                 for c in m["contenders"].values()]
        ratios = m["ratios"]
        text = [f"{typed['date']}: {backlog['good']:,} JSON order events ({s['record_bytes']} bytes) and "
                f"{backlog['poison']:,} poison lines (`{{not json` or an event cut in half, spread over every "
                f"partition) on {backlog['partitions']} partitions, `{s['master']}`, {s['repeats']} runs each, "
                f"interleaved; a declared schema of {len(typed['value_schema'])} fields, parsed by every contender "
                "with `from_json` into the same typed columns (checked: equal sums over every parsed field of the "
                "good records). Tidemark writes the poison to its dead-letter table with the reason; the baselines "
                "keep it as rows of nulls. Throughput counts every record of the topic."]
        if (vs_now := ratios.get("tidemark_json/available_now_json")) is not None:
            text.append(f"Tidemark vs AvailableNow: **x{vs_now}** the throughput")
            if (vs_batch := ratios.get("tidemark_json/plain_batch_json")) is not None:
                text[-1] += f"; vs the plain batch: **x{vs_batch}**"
            text[-1] += (f" (Tidemark's time includes its plan call, {m.get('tidemark_plan_seconds')} s).")
        if phases := m.get("tidemark_phases"):
            names = {"startup": "start-up",
                     "write_output_and_tally": "the one pass that writes the good records and tallies every record",
                     "dead_letters": "the dead letters (the partitions with bad records read again)",
                     "ledger_commit": "the ledger commit", "shutdown": "shutdown"}
            text.append("Tidemark's phases (medians, from the job's log lines): " + ", ".join(
                f"{names.get(p, p)} {v} s" for p, v in phases.items()) + ".")
        parts += ["### JSON with a declared schema (`make bench-json`, `bench/results/typed_json.json`)",
                  " ".join(text), "\n".join(rows)]
    if avro := _side("avro.json"):
        m, s, backlog = avro["summary"], avro["settings"], avro["backlog"]
        rows = ["| contender | median | records/s | peak RSS |", "|---|---|---|---|"]
        rows += [f"| {c['label']} | {c['median_seconds']} s ({c['min_seconds']}–{c['max_seconds']}) | "
                 f"{c['median_records_per_second']:,} | {c['median_peak_tree_rss_mb']:,} MB |"
                 for c in m["contenders"].values()]
        ratios = m["ratios"]
        text = [f"{avro['date']}: {backlog['records']:,} Avro records in the Confluent wire format "
                f"({s['record_bytes']} bytes, one schema version of {len(avro['schema']['fields'])} fields from the "
                f"Schema Registry, {backlog['poison']:,} poison records: a wrong magic byte or a truncated body) on "
                f"{backlog['partitions']} partitions, `{s['master']}`, {s['repeats']} runs each, interleaved; every "
                "contender decodes the same schema into the same typed columns (checked: equal sums over every "
                "decoded field). Tidemark writes the poison to its dead-letter table with the reason; the baselines "
                "keep it as rows of nulls."]
        if (vs_now := ratios.get("tidemark_avro/available_now_avro")) is not None:
            text.append(f"Tidemark vs AvailableNow, both decoding with `from_avro`: **x{vs_now}** the throughput "
                        f"(Tidemark's time includes its plan call, "
                        f"{m.get('tidemark_plan_seconds')} s, which reads and freezes the schemas).")
        if "fastavro_batch/from_avro_batch" in ratios:
            text.append(f"The decoder, in the same plain batch read: fastavro's `schemaless_reader` in `mapInArrow` "
                        f"ran at **x{ratios['fastavro_batch/from_avro_batch']}** the throughput of Spark's "
                        "`from_avro`. Tidemark decodes with `from_avro`: it stays in the JVM (no Python worker per "
                        "core, no Arrow round trip of every row's columns), resolves each writer schema into the "
                        "reader schema by Avro's rules, and types the columns exactly as the plan computes them.")
        parts += ["### Avro (`make bench-avro`, `bench/results/avro.json`)", " ".join(text), "\n".join(rows)]
    if small := _side("small_batch.json"):
        m = small["summary"]
        submit, warm = m["spark-submit"], m["spark-connect"]
        rows = ["| launcher | median job time | range | JVMs started per batch | peak RSS of the job's processes |",
                "|---|---|---|---|---|"]
        rows += [f"| {label} | {c['median_seconds']} s | {c['min_seconds']}–{c['max_seconds']} s | "
                 f"{c['jvms_started_per_batch']} | {c['median_peak_tree_rss_mb']:,} MB |"
                 for label, c in (("spark-submit (default)", submit), ("warm path (Spark Connect server)", warm))]
        parts += ["### Small batches: the warm path (`make bench-small`, `bench/results/small_batch.json`)",
                  f"{small['date']}: batches of {small['records_per_batch']:,} records ({small['record_bytes']} bytes) "
                  f"on {small['partitions']} partitions, the ingest job alone (plan excluded), "
                  f"{submit['runs']} batches per launcher, alternating; spark-submit on `{small['master']}`, "
                  f"the Spark Connect server on "
                  f"`{small['server']['master']}` (its memory is not in the job's RSS). The warm path is "
                  f"**x{m['warm_speedup']}** faster; the server's first batch after it started took "
                  f"{m['first_warm_batch_seconds']:.1f} s (class loading, JIT). Target: at most 3 s on the warm path; "
                  "see the findings for where the rest goes.", "\n".join(rows)]
    if page := _side("console.json"):
        rows = ["| ledger | batches | " + " | ".join(page["ledgers"][0]["routes"]) + " |",
                "|---|---|" + "---|" * len(page["ledgers"][0]["routes"])]
        rows += [f"| {ledger['shape']} | {ledger['batches']:,} | "
                 + " | ".join(f"{t['median_ms']:.0f} ms" for t in ledger["routes"].values()) + " |"
                 for ledger in page["ledgers"]]
        parts += ["### The Tidemark page (`make bench-page`, `bench/results/console.json`)",
                  f"{page['date']}: each route of the page, median of 7 calls after a warm-up, in-process (no HTTP "
                  "stack or login check), against a live broker; target: under a second at 10,000 batches.",
                  "\n".join(rows)]
    return ["## Other measurements", *parts] if parts else []


# --- chart ---------------------------------------------------------------------------------------

def chart(results: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = results["summary"]
    scale = part(results, "scale")
    extra = scale is not None
    fig, axes = plt.subplots(1, 3 if extra else 2, figsize=(21 if extra else 14, 5.5))
    left, right = axes[0], axes[1]
    names = list(summary["contenders"])
    medians = [summary["contenders"][n]["records_per_second"]["median"] / 1000 for n in names]
    lows = [m - summary["contenders"][n]["records_per_second"]["min"] / 1000 for n, m in zip(names, medians,
                                                                                              strict=True)]
    highs = [summary["contenders"][n]["records_per_second"]["max"] / 1000 - m for n, m in zip(names, medians,
                                                                                               strict=True)]
    colors = ["#1f77b4" if n.startswith("tidemark") else "#999999" for n in names]
    left.barh(range(len(names)), medians, xerr=[lows, highs], color=colors, capsize=4)
    left.set_yticks(range(len(names)), [LABELS[n].split(" (")[0] for n in names])
    left.invert_yaxis()
    left.set_xlabel("thousand records/s (median, min–max); process start to exit")
    left.set_title(f"{results['settings']['records']:,} records of {results['settings']['record_bytes']} B, "
                   f"{results['settings']['partitions']} partitions")
    for shape, style in (("synthetic", "o-"), ("protocol", "s--")):
        rows = summary["ledger"].get(shape, [])
        if rows:
            right.plot([r["batches"] for r in rows], [r["state_ms"] for r in rows], style,
                       label=f"Ledger.state ({shape})")
            right.plot([r["batches"] for r in rows], [r["full_read_ms"] for r in rows], style, alpha=0.5,
                       label=f"full read, before the fix ({shape})")
    planned = [r for r in summary["ledger"].get("synthetic", []) if r["plan_ms"] is not None]
    if planned:
        right.plot([r["batches"] for r in planned], [r["plan_ms"] for r in planned], "^-",
                   label="plan call (synthetic)")
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("committed batches in the ledger")
    right.set_ylabel("milliseconds (median)")
    right.set_title("Ledger growth")
    right.legend(fontsize=8)
    if scale is not None:
        _chart_scale(axes[2], scale)
    fig.tight_layout()
    fig.savefig(CHART, dpi=110)
    plt.close(fig)


def _chart_scale(ax, scale: dict) -> None:
    """Throughput (left axis) and peak memory (right axis) per batch size."""
    sizes = sorted(scale["summary"]["sizes"].items(), key=lambda kv: int(kv[0]))
    xs = [int(k) / 1e6 for k, _ in sizes]
    ax.plot(xs, [v["median_records_per_second"] / 1000 for _, v in sizes], "o-", label="records/s (thousands)")
    ax.set_xlabel("records in the batch (millions)")
    ax.set_ylabel("thousand records/s (median)")
    memory = ax.twinx()
    memory.plot(xs, [v["median_peak_jvm_rss_mb"] for _, v in sizes], "s--", color="#d62728",
                label="driver JVM peak RSS, MB")
    memory.plot(xs, [v["median_python_driver_rss_mb"] for _, v in sizes], "^:", color="#2ca02c",
                label="Python driver peak RSS, MB")
    memory.set_ylabel("MB (median)")
    memory.set_ylim(bottom=0)
    ax.set_ylim(bottom=0)
    ax.set_title("Scale: one batch of each size")
    lines = ax.get_legend_handles_labels()
    more = memory.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="lower right")


def write(results: dict) -> None:
    DOC.write_text(markdown(results))
    chart(results)


def main() -> None:
    """Regenerate the page from bench.json, first folding the result files of the benchmarks that run
    as programs of their own into its ``parts`` (so bench.json holds every row of the page)."""
    from bench.settings import save_result

    results = json.loads((RESULTS / "bench.json").read_text())
    results["parts"] = {name: found for name, file in SIDE_PARTS.items() if (found := _side(file)) is not None}
    results["summary"] = summarize(results)
    save_result("bench.json", results)
    write(results)
    print(f"wrote {RESULTS / 'bench.json'}, {DOC} and {CHART}")


if __name__ == "__main__":
    main()
