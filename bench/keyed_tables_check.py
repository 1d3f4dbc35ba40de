"""The tables of `make bench-keyed`: copies of the starting tables, row hashes and fingerprints, the result checked
against an independent reference of the changes, the commits a contender made, and Spark's event log (where the
time went, by stage and by the code that asked for it)."""

from __future__ import annotations

import collections
import json
import logging
import re
import shutil
from pathlib import Path

from bench.keyed_data import BOOKKEEPING, MERGE_METRICS, Changes
from bench.knobs import ROOT
from bench.profile_raw import add_task

log = logging.getLogger("bench")

# --- tables: copies, hashes, history -------------------------------------------------------------

def copy_table(source: str | Path, target: str | Path) -> None:
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)


def _frame(uri: str, columns: list[str] | None = None):
    from deltalake import DeltaTable

    frame = DeltaTable(uri).to_pyarrow_table(columns=columns).to_pandas()
    for name in frame.columns:
        if frame[name].dtype == object:  # bytes, header lists: their text, the same for both tables
            frame[name] = frame[name].map(repr)
    return frame


def row_hashes(uri: str, with_bookkeeping: bool):
    """Per id, a 64-bit hash of the row (every column, but the bookkeeping ones unless asked)."""
    import pandas as pd
    from deltalake import DeltaTable

    names = [f.name for f in DeltaTable(uri).schema().fields]
    frame = _frame(uri, [n for n in names if with_bookkeeping or n not in BOOKKEEPING])
    return pd.Series(pd.util.hash_pandas_object(frame, index=False).to_numpy(), index=frame["id"].to_numpy())


def fingerprint(uri: str) -> dict:
    """Row count, distinct keys and the sum (mod 2**64) of the rows' hashes, bookkeeping columns left out."""
    import numpy as np

    hashes = row_hashes(uri, with_bookkeeping=False)
    return {"rows": int(len(hashes)), "distinct_ids": int(hashes.index.nunique()),
            "row_hash_sum": str(int(hashes.to_numpy().sum(dtype=np.uint64)))}


def rows_changed(before, after) -> dict:
    """Rows that differ between two ``row_hashes`` (with bookkeeping): changed, gone, new."""
    common = before.index.intersection(after.index)
    changed = int((before.loc[common] != after.loc[common]).sum())
    return {"changed": changed, "deleted": int(len(before.index.difference(after.index))),
            "inserted": int(len(after.index.difference(before.index))),
            "total": changed + int(len(before.index.symmetric_difference(after.index)))}


def check_reference(uri: str, changes: Changes, table_rows: int, ids_below: int) -> dict:
    """The table against the reference: the row count, every changed key's row (or its absence), and every
    untouched starting row (ids below ``ids_below``) as it was produced."""
    import pandas as pd

    frame = _frame(uri, ["id", "name", "qty", "price"]).set_index("id")
    expected = changes.expected_rows(table_rows)
    problems = []
    if len(frame) != expected or not frame.index.is_unique:
        problems.append(f"{len(frame):,} rows ({frame.index.nunique():,} distinct ids), expected {expected:,}")
    deleted = [k for k, row in changes.final.items() if row is None]
    if back := int(frame.index.isin(deleted).sum()):
        problems.append(f"{back} deleted ids are in the table")
    live = pd.DataFrame([(k, *row) for k, row in changes.final.items() if row is not None],
                        columns=["id", "name", "qty", "price"]).set_index("id")
    joined = live.merge(frame, how="left", left_index=True, right_index=True, suffixes=("", "_table"))
    wrong = joined[(joined["name"] != joined["name_table"]) | (joined["qty"] != joined["qty_table"])
                   | (joined["price"] != joined["price_table"])]
    if len(wrong):
        problems.append(f"{len(wrong)} changed keys hold another row than their newest change, e.g. "
                        f"{wrong.head(3).reset_index().to_dict('records')}")
    untouched = frame[~frame.index.isin(list(changes.final)) & (frame.index < ids_below)]
    names = "init-" + pd.Series(untouched.index, index=untouched.index).astype(str)
    differ = int((untouched["name"] != names).sum())
    if differ or len(untouched) != ids_below - sum(1 for k in changes.final if k < ids_below):
        problems.append(f"{differ} untouched starting rows differ; {len(untouched):,} untouched rows")
    if problems:
        raise RuntimeError(f"{uri} differs from the reference built from the produced changes: "
                           + "; ".join(problems))
    return {"rows": len(frame), "changed_keys_checked": len(changes.final), "untouched_rows_checked": len(untouched)}


def commits_since(uri: str, version: int) -> list[dict]:
    """The table's commits after ``version``: operation, and Delta's operation metrics of a MERGE."""
    from deltalake import DeltaTable

    out = []
    for entry in DeltaTable(uri).history(50):
        if entry.get("version", -1) > version:
            metrics = entry.get("operationMetrics") or {}
            out.append({"version": entry["version"], "operation": entry.get("operation"),
                        "metrics": {k: int(metrics[k]) for k in MERGE_METRICS if k in metrics}})
    return sorted(out, key=lambda e: e["version"])


def table_version(uri: str) -> int:
    from deltalake import DeltaTable

    return DeltaTable(uri).version()



# --- Spark's event log ---------------------------------------------------------------------------

def with_event_log(command: list[str], folder: Path) -> list[str]:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return [command[0], "--conf", "spark.eventLog.enabled=true", "--conf", f"spark.eventLog.dir={folder}",
            "--conf", "spark.eventLog.compress=false", "--conf", "spark.eventLog.rolling.enabled=false", *command[1:]]


def _function_at(site: str) -> str | None:
    """The function of the core around a Python call site (``.../tidemark/spark_io.py:273``): ``tally``."""
    match = re.search(r"(tidemark\w*)/([\w/]+\.py):(\d+)", site)
    if not match:
        return None
    path = ROOT / "plugins" / match.group(1) / match.group(2)
    if not path.exists():
        return None
    for line in reversed(path.read_text().splitlines()[:int(match.group(3))]):
        if found := re.match(r"def (\w+)", line):
            return found.group(1)
    return None


def _what(description: str) -> str:
    # a streaming query's: "\nid = <query>\nrunId = <run>\nbatch = 0 - MERGE operation - ..."
    what = re.sub(r"\s*id = \S+\s+runId = \S+\s+batch = \d+\s*[-:]?\s*", " ", description or "").strip()
    short = re.sub(r"^(\w+) at .*?([\w.]+:\d+)$", r"\1 at \2", what)
    short = re.sub(r"^(\w+) at NativeMethodAccessorImpl\.java:0$", r"\1", short)  # a py4j call: no Python site
    function = _function_at(what)
    return f"{short} ({function})" if function else short or "a micro-batch (foreachBatch)"


def event_log(folder: Path) -> dict | None:
    """Spark's event log of one job: the time from the application's start to its first Spark job; the
    top-level actions (root SQL executions: what the driver's code asked for, with everything Spark and Delta
    ran for it) with their wall time, named by their call site and the core's function there, ``[MERGE]``
    when a MERGE ran inside; the Spark jobs' wall time by Delta's job description or call site; and the
    tasks' run, CPU and GC time summed."""
    files = [p for p in folder.rglob("*") if p.is_file() and not p.name.startswith((".", "appstatus"))]
    if len(files) != 1:
        log.warning("no single event log in %s: %s", folder, files)
        return None
    app_start = app_end = None
    jobs: dict[int, dict] = {}
    executions: dict[int, dict] = {}
    tasks: collections.Counter = collections.Counter()
    for line in files[0].read_text().splitlines():
        event = json.loads(line)
        kind = event["Event"]
        if kind == "SparkListenerApplicationStart":
            app_start = event["Timestamp"]
        elif kind == "SparkListenerApplicationEnd":
            app_end = event["Timestamp"]
        elif kind.endswith("SQLExecutionStart"):
            executions[event["executionId"]] = {"root": event.get("rootExecutionId", event["executionId"]),
                                                "what": _what(event.get("description", "")), "start": event["time"]}
        elif kind.endswith("SQLExecutionEnd") and event["executionId"] in executions:
            executions[event["executionId"]]["end"] = event["time"]
        elif kind == "SparkListenerJobStart":
            props = event.get("Properties") or {}
            what = _what(props.get("spark.job.description") or props.get("callSite.short") or "?")
            jobs[event["Job ID"]] = {"submitted": event["Submission Time"], "what": what}
        elif kind == "SparkListenerJobEnd" and event["Job ID"] in jobs:
            jobs[event["Job ID"]]["completed"] = event["Completion Time"]
        elif kind == "SparkListenerTaskEnd":
            add_task(tasks, event)
    by_what: dict[str, float] = collections.defaultdict(float)
    for job in jobs.values():
        by_what[job["what"]] += (job.get("completed", job["submitted"]) - job["submitted"]) / 1000
    actions = []
    for eid, ex in sorted(executions.items(), key=lambda kv: kv[1]["start"]):
        if ex["root"] != eid:
            continue
        merged = any("MERGE" in x["what"] for x in executions.values() if x["root"] == eid)
        seconds = round((ex.get("end", ex["start"]) - ex["start"]) / 1000, 2)
        if seconds >= 0.1:
            actions.append({"what": ex["what"] + (" [MERGE]" if merged else ""), "seconds": seconds})
    first = min((j["submitted"] for j in jobs.values()), default=app_end)
    return {"app_start_to_first_job_seconds": round((first - app_start) / 1000, 2) if first and app_start else None,
            "actions": actions, "jobs": len(jobs), "jobs_seconds": round(sum(by_what.values()), 2),
            "jobs_by_what": {k: round(v, 2) for k, v in sorted(by_what.items(), key=lambda kv: -kv[1])},
            "tasks": tasks["tasks"], "task_run_seconds": round(tasks["run_ms"] / 1000, 1),
            "task_cpu_seconds": round(tasks["cpu_ns"] / 1e9, 1), "task_gc_seconds": round(tasks["gc_ms"] / 1000, 1)}
