"""bench.json's ``summary``: medians and ranges of the runs, the throughput ratios, the empty runs, the ledger
growth, the DAG under a running scheduler, and the targets. Computed from the runs only (no broker needed);
bench/report.py renders it."""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable

from bench import demo_runs
from bench.contenders import AVAILABLE_NOW, CONSUMER_PERF, CONTENDERS, LABELS, PLAIN_BATCH, TIDEMARK_DAG, TIDEMARK_JOB
from bench.knobs import RESULTS

METRICS = ("records_per_second", "mb_per_second", "seconds", "peak_tree_rss_mb", "peak_jvm_rss_mb")
BASELINES = {"available_now": AVAILABLE_NOW, "plain_batch": PLAIN_BATCH, "consumer_perf": CONSUMER_PERF}
PHASES = ("startup", "read_and_tally", "write_output", "ledger_commit", "shutdown")
SIDE_PARTS = {"typed_json": "typed_json.json", "avro": "avro.json", "typed_json_clean": "typed_json_clean.json",
              "avro_clean": "avro_clean.json", "small_batch": "small_batch.json",
              "object_storage": "object_storage.json", "console": "console.json", "tls": "tls.json",
              "ledger_contention": "ledger_contention.json", "audit": "audit.json",
              "maintenance": "maintenance.json", "fleet": "fleet.json", "read_path": "read_path.json",
              "class_data": "class_data.json", "ledger_size": "ledger_size.json", "demo": "demo.json"}
"""The benchmarks that run as programs of their own, by their key in bench.json's ``parts`` and their file."""


def spread(values: Iterable[float | None]) -> dict:
    found = [v for v in values if v is not None]
    if not found:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": round(statistics.median(found), 3), "min": round(min(found), 3), "max": round(max(found), 3),
            "n": len(found)}


def side(name: str) -> dict | None:
    path = RESULTS / name
    return json.loads(path.read_text()) if path.exists() else None


def side_parts() -> dict[str, dict]:
    """The parts that run as programs of their own (SIDE_PARTS), from the result files that exist."""
    return {name: found for name, file in SIDE_PARTS.items() if (found := side(file)) is not None}


def part(results: dict, name: str) -> dict | None:
    """One benchmark's results: bench.json's own (``skew``, ``scale``, ``profile``) or its ``parts`` entry,
    else its result file."""
    return results.get(name) or results.get("parts", {}).get(name) or side(SIDE_PARTS.get(name, f"{name}.json"))


def _contenders(runs: list[dict]) -> dict:
    return {name: {"label": LABELS[name], **{m: spread(r[m] for r in runs if r["contender"] == name) for m in METRICS}}
            for name in CONTENDERS if any(r["contender"] == name for r in runs)}


def _ratios(contenders: dict) -> dict:
    rps = {name: c["records_per_second"]["median"] for name, c in contenders.items()}
    return {f"{t}/{short}": round(rps[t] / rps[b], 3)
            for t in (TIDEMARK_JOB, TIDEMARK_DAG) for short, b in BASELINES.items() if t in rps and b in rps}


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

    out: dict = {shape: [row(e) for e in growth.get(shape, [])] for shape in ("synthetic", "protocol")}
    if len(synthetic := out["synthetic"]) >= 2:
        small, large = synthetic[0], synthetic[-1]
        for key in ("plan", "state", "full_read"):
            out[f"{key}_ratio"] = round(large[f"{key}_ms"] / small[f"{key}_ms"], 2)
        out["ratio_between"] = [small["batches"], large["batches"]]
    return out


def _scheduler(results: dict, contenders: dict) -> dict:
    if not (sched := results.get("scheduler")):
        return {}
    runs, empty = sched["runs"], sched["empty_runs"]
    out = {"run_seconds": spread(r["run_seconds"] for r in runs),
           "trigger_to_end_seconds": spread(r["trigger_to_end_seconds"] for r in runs),
           "between_tasks_seconds": spread(r.get("between_tasks_seconds") for r in runs),
           "tasks": {t: spread(r["tasks"].get(t, {}).get("seconds") for r in runs) for t in runs[0]["tasks"]}
           if runs else {},
           "empty_task_seconds": spread(e["task_seconds"] for e in empty),
           "empty_run_seconds": spread(e["run_seconds"] for e in empty),
           "empty_tasks": {t: spread(e["tasks"].get(t, {}).get("seconds") for e in empty) for t in empty[0]["tasks"]}
           if empty else {},
           "empty_jvms_started": max((e["jvms_started"] for e in empty), default=None),
           "empty_ingest_states": sorted({e["tasks"].get("ingest", {}).get("state") or "-" for e in empty})}
    if sched.get("job_alone"):  # measured beside the DAG runs, interleaved, with the same Airflow running
        out["job_alone_seconds"] = spread(j["seconds"] for j in sched["job_alone"])
        job = out["job_alone_seconds"]["median"]
    else:  # an older run: the contenders' job, without Airflow running
        job = contenders.get(TIDEMARK_JOB, {}).get("seconds", {}).get("median")
    if job and out["run_seconds"]["median"]:
        out["job_seconds"] = job
        out["dag_vs_job"] = round(job / out["run_seconds"]["median"], 3)
    return out


def _target(text: str, value: float | None, met: bool, shown: str = "{:.2f}x") -> list[dict]:
    return [] if value is None else [{"target": text, "measured": shown.format(value), "met": met}]


def _raw_why(summary: dict, baseline: str) -> str:
    """A missed raw row's measured reason: Tidemark's start and one pass against the baseline's whole run."""
    phases, ours = summary["tidemark_phases"], summary["contenders"].get(TIDEMARK_JOB, {}).get("seconds")
    theirs = summary["contenders"].get(BASELINES[baseline], {}).get("seconds")
    if not phases or not ours or not theirs or phases["write_output"]["median"] is None:
        return ""
    return (f"; Tidemark's JVM and session start {phases['startup']['median']:.2f} s and one pass "
            f"{phases['write_output']['median']:.2f} s (medians) against the baseline's whole run "
            f"{theirs['median']:.2f} s; the runs' spread: Tidemark {ours['min']:.1f}-{ours['max']:.1f} s, the baseline "
            f"{theirs['min']:.1f}-{theirs['max']:.1f} s")


def _typed_why(typed: dict, fmt: str) -> str:
    """A missed typed row's measured reason: the one pass that checks every record, against AvailableNow's run."""
    phases, now = typed.get("tidemark_phases", {}), typed["contenders"].get(f"available_now_{fmt}", {})
    if "write_output_and_tally" not in phases or "median_seconds" not in now:
        return ""
    return (f"; Tidemark's start {phases['startup']} s and one pass {phases['write_output_and_tally']} s, which checks "
            f"every record, against AvailableNow's whole run {now['median_seconds']} s")


def _targets(summary: dict, results: dict) -> list[dict]:
    return [*_throughput_targets(summary, results), *_scheduler_targets(summary, results),
            *_scale_out_targets(summary, results)]


def _throughput_targets(summary: dict, results: dict) -> list[dict]:
    """Records per second against the baselines: raw, typed, skewed and growing backlogs."""
    ratios, out = summary["ratios"], []
    for key, goal, what in (("available_now", 1.0, "AvailableNow"), ("plain_batch", 0.95, "the plain batch")):
        ratio = ratios.get(f"tidemark_job/{key}")
        met = ratio is not None and ratio >= goal
        out += _target(f"raw values: Tidemark >= {goal}x {what}", ratio, met, "{:.2f}x" + ("" if met else _raw_why(
            summary, key)))
    for name, fmt, what, goal in (("typed_json", "json", "JSON values, 0.1% poison", 1.0),
                                  ("typed_json_clean", "json", "JSON values, no poison", 1.05),
                                  ("avro", "avro", "Avro values, 0.1% poison", 1.0),
                                  ("avro_clean", "avro", "Avro values, no poison", 1.05)):
        if typed := part(results, name):
            ratio = typed["summary"]["ratios"].get(f"tidemark_{fmt}/available_now_{fmt}")
            met = ratio is not None and ratio >= goal
            out += _target(f"{what}: Tidemark >= {goal}x AvailableNow ({typed['date']})", ratio, met,
                           "{:.2f}x" + ("" if met else _typed_why(typed["summary"], fmt)))
    if skew := part(results, "skew"):
        speedup = skew["summary"]["split_speedup"]
        out += _target("skew: split ranges >= 1.5x the unsplit read", speedup, speedup >= 1.5)
    if scale := part(results, "scale"):
        m = scale["summary"]
        between = f"{max(map(int, m['sizes'])):,} vs {min(map(int, m['sizes'])):,}"
        out += _target(f"scale: peak driver JVM RSS at {between} records within 10 %", m["jvm_rss_ratio"],
                       abs(m["jvm_rss_ratio"] - 1) <= 0.10)
        out += _target(f"scale: throughput at {between} records >= 0.9x", m["throughput_ratio"],
                       m["throughput_ratio"] >= 0.9)
    return out


def _scheduler_targets(summary: dict, results: dict) -> list[dict]:
    """Under Airflow: the whole DAG, empty runs and the warm path."""
    out = []
    sched = summary["scheduler"]
    out += _target("the whole DAG under a running scheduler >= 0.9x the job alone", sched.get("dag_vs_job"),
                   sched.get("dag_vs_job", 0) >= 0.9)
    if (task_s := sched.get("empty_task_seconds", {}).get("median")) is not None:
        jvms = sched["empty_jvms_started"]
        out += _target("empty run under the scheduler: <= 3 s of task time, no JVM", task_s,
                       task_s <= 3 and jvms == 0, f"{{:.2f}} s; {jvms} JVM(s)")
    if small := part(results, "small_batch"):
        warm = small["summary"]["spark-connect"]["median_seconds"]
        batches = ", ".join(f"{r['wall_seconds']:.2f}" for r in small.get("runs", [])
                            if r.get("launcher") == "spark-connect")
        out += _target(f"10,000-record batch on the warm path <= 3 s of job time ({small['date']})", warm, warm <= 3,
                       "{:.2f} s" + ("" if warm <= 3 or not batches else
                                     f" (median); the server's batches after its first, in order: {batches} s"))
    if dag := summary["empty"].get("dag"):
        plan, states = dag["plan_task_seconds"]["median"], "/".join(dag["ingest_task_states"])
        out += _target("empty run under `airflow dags test`: the plan task <= 3 s, no JVM", plan,
                       plan <= 3 and dag["jvms_started"] == 0, f"{{:.2f}} s; {dag['jvms_started']} JVM(s), "
                                                               f"ingest task {states}")
        callable_s = dag["breakdown_plan_callable"]["median"]
        out += _target("... of which Tidemark's plan callable (cold process)", callable_s,
                       callable_s is not None and callable_s <= 3, "{:.2f} s")
    return out


def _scale_out_targets(summary: dict, results: dict) -> list[dict]:
    """Many pipelines, the fleet, the demo, the audit and the ledger as they grow."""
    out = []
    if contention := part(results, "ledger_contention"):
        b = contention["burst"]
        out += _target(f"{b['pipelines']} pipelines freezing and committing at once: all commit on their first try "
                       f"({contention['date']})", len(b["errors"]), not b["errors"] and
                       b["pipelines_all_committed"] == b["pipelines"], "{} errors reached a run")
        small, large = contention["scale"]
        out += _target(f"plan + commit at {large['pipelines']} pipelines x {large['batches_each']:,} batches <= 2x "
                       f"that at {small['pipelines']} x {small['batches_each']}", contention["scale_ratio"],
                       contention["scale_ratio"] <= 2)
    out += _fleet_targets(part(results, "fleet"))
    out += demo_runs.targets(part(results, "demo"))
    if (audit := part(results, "audit")) and len(audit["sizes"]) > 1:
        small, large = audit["sizes"][0], audit["sizes"][-1]
        growth = round(large["peak_rss_mb"] / small["peak_rss_mb"], 2)
        out += _target(f"`tidemark audit`: peak memory at {large['rows']:,} rows <= 2x that at {small['rows']:,} "
                       f"({audit['date']})", growth, growth <= 2, f"{{:.2f}}x ({small['peak_rss_mb']} -> "
                                                                 f"{large['peak_rss_mb']} MB)")
    if "plan_ratio" in (ledger := summary["ledger"]):
        small_n, large_n = ledger["ratio_between"]
        out += _target(f"plan time at {large_n:,} batches <= 1.5x that at {small_n:,}", ledger["plan_ratio"],
                       ledger["plan_ratio"] <= 1.5)
    return out

FLEET_TARGET_SPEEDUP = 4.0
"""The warm fleet against the faster AvailableNow fleet (round 4, issue 41; round 3's was 3x)."""


def _fleet_targets(fleet: dict | None) -> list[dict]:
    """bench/fleet.py: the warm fleet against the faster AvailableNow fleet, and every table checked."""
    if not fleet or "warm_speedup" not in (m := fleet["summary"]):
        return []
    phases = fleet["phases"]
    compared, warm = phases[m["available_now_compared"]], phases["warm"]
    how = "one after another" if compared["concurrency"] == 1 else f"{compared['concurrency']} at a time"
    shape = f"{fleet['pipelines']} pipelines x {fleet['records_per_pipeline']:,} records"
    tables = sum(p.get("tables_checked", p.get("jobs", 0)) for p in phases.values())
    met = m["warm_speedup"] >= FLEET_TARGET_SPEEDUP
    trees = warm.get("cpu_seconds_by_tree", {})
    why = "" if met or "scheduler" not in trees else (
        f"; of the warm tick's {warm['cpu_seconds']} CPU seconds, {trees['scheduler']} were Airflow's scheduler tree "
        f"(its workers and task processes) and {trees.get('connect', '-')} the Spark Connect server")
    return (_target(f"a fleet of {shape}, one scheduler tick: the warm path >= {FLEET_TARGET_SPEEDUP:g}x faster than "
                    f"AvailableNow, the faster of one after another and {fleet['concurrency']} at a time "
                    f"({fleet['date']})", m["warm_speedup"], met,
                    f"{{:.2f}}x ({warm['wall_seconds']} s vs {compared['wall_seconds']} s, {how}){why}")
            + _target(f"... every output table of the fleet holds each record exactly once ({fleet['date']})",
                      tables, True, "{} tables checked")
            + _target(f"... the fleet on `make airflow`'s default launcher >= 1.0x AvailableNow ({fleet['date']}; the "
                      f"default is the warm path since 2026-11-28, spark-submit before)", m["warm_speedup"],
                      m["warm_speedup"] >= 1.0, "{:.2f}x on the warm path (" + (
                          f"by spark-submit: {m['submit_speedup']}x" if "submit_speedup" in m
                          else "its spark-submit phase was not run") + ")"))


def summarize(results: dict) -> dict:
    summary: dict = {"contenders": _contenders(results.get("runs", []))}
    summary["ratios"] = _ratios(summary["contenders"])
    summary["tidemark_phases"] = _phases(results.get("runs", []))
    summary["empty"] = _empty(results.get("empty_runs", []))
    summary["ledger"] = _ledger(results.get("ledger_growth", {}))
    summary["scheduler"] = _scheduler(results, summary["contenders"])
    summary["targets"] = _targets(summary, results)
    return summary
