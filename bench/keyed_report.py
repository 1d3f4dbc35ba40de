"""The results of `make bench-keyed`: a run merged with the stored ones (bench/results/keyed.json), their summary, and
the section and Targets rows of docs/BENCHMARKS.md."""

from __future__ import annotations

import collections
import json
import logging
import re
import statistics
from pathlib import Path

from bench import page
from bench.keyed_data import DOC, LABELS, NOW, PARTS, RESULT_FILE, TARGET_PREFIX, TIDEMARK, TITLE
from bench.knobs import RESULTS

log = logging.getLogger("bench")

# --- summary, section and targets ----------------------------------------------------------------

def _merge_commit(row: dict) -> dict:
    merges = [c for c in row.get("commits", []) if c["operation"] == "MERGE"]
    return merges[-1]["metrics"] if merges else {}


def _short_action(what: str) -> str:
    if "[MERGE]" in what:
        return "MERGE"
    found = re.search(r"\((\w+)\)$", what)
    return found.group(1) if found else what


def _spent(run_: dict) -> dict:
    """A run's driver actions (its event log) by the core's function, ``MERGE`` for the one that ran it:
    seconds in all, in the MERGE and before it."""
    by: dict[str, float] = collections.defaultdict(float)
    for a in (run_.get("spark") or {}).get("actions") or []:
        name = _short_action(a["what"])
        by["other" if a["seconds"] < 1 and name not in ("MERGE", "tally") else name] += a["seconds"]
    merge = by.get("MERGE", 0.0)
    return {"by_function": {k: round(v, 2) for k, v in by.items()}, "merge": round(merge, 2),
            "before_merge": round(sum(by.values()) - merge, 2), "actions": round(sum(by.values()), 2)}


def _part_date(out: dict, part: str) -> str:
    return out.get("parts", {}).get(part, {}).get("date", out["date"])


def _part_load(out: dict, part: str) -> str:
    meta = out.get("parts", {}).get(part) or {}
    meta = meta if "load_at_end" in meta else out
    return f"{meta['load_at_start']['load_1m']} at the start, {meta['load_at_end']['load_1m']} at the end"


def summarize(out: dict) -> dict:
    """Per contender its median, range and MERGE metrics, Tidemark / AvailableNow, where the time went, the
    replay, the growth and the targets; each from the parts measured."""
    runs = out.get("runs") or []

    def median(name: str, key: str) -> float:
        return round(statistics.median(r[key] for r in runs if r["contender"] == name), 2)

    summary: dict = {"contenders": {}}
    for name, label in LABELS.items():
        if mine := [r for r in runs if r["contender"] == name]:
            summary["contenders"][name] = {
                "label": label, "runs": len(mine), "median_seconds": median(name, "seconds"),
                "min_seconds": min(r["seconds"] for r in mine), "max_seconds": max(r["seconds"] for r in mine),
                "median_changes_per_second": round(out["settings"]["changes"] / median(name, "seconds")),
                "median_peak_tree_rss_mb": round(statistics.median(r["peak_tree_rss_mb"] for r in mine)),
                "median_tree_cpu_seconds": median(name, "tree_cpu_seconds"), "merge": _merge_commit(mine[-1])}
    t, n = summary["contenders"].get(TIDEMARK), summary["contenders"].get(NOW)
    if t and n:
        summary["speed_vs_available_now"] = round(n["median_seconds"] / t["median_seconds"], 3)
        tidemark_runs = [r for r in runs if r["contender"] == TIDEMARK]
        summary["tidemark_plan_seconds"] = round(statistics.median(r["plan_seconds"] for r in tidemark_runs), 3)
        summary["tidemark_phases"] = tidemark_runs[-1]["phases"]
        summary["where"] = {name: _spent([x for x in runs if x["contender"] == name][-1]) for name in LABELS}
    if replay := out.get("replay"):
        summary["replay"] = {"seconds": replay["seconds"], "offsets": replay["offsets"],
                             "rows_changed": replay["rows_changed"]["total"],
                             "versions_added": replay["versions_added"], "commits": replay["commits"],
                             "where": _spent(replay)}
    if (big := (out.get("growth") or {}).get("tidemark")) and t:
        small_merge, big_merge = t["merge"], _merge_commit(big)
        summary["growth"] = {
            "small_rows": out["settings"]["table_rows"], "big_rows": out["settings"]["big_rows"],
            "small_seconds": t["median_seconds"], "big_seconds": big["seconds"],
            "seconds_ratio": round(big["seconds"] / t["median_seconds"], 3),
            "small_merge_ms": small_merge.get("executionTimeMs"), "big_merge_ms": big_merge.get("executionTimeMs"),
            "merge_ms_ratio": round(big_merge["executionTimeMs"] / small_merge["executionTimeMs"], 3)
            if big_merge.get("executionTimeMs") and small_merge.get("executionTimeMs") else None,
            "big_phases": big["phases"], "small_merge": small_merge, "big_merge": big_merge,
            "small_where": summary["where"][TIDEMARK], "big_where": _spent(big)}
        if now_big := out["growth"].get("available_now"):
            summary["growth"]["available_now_big_seconds"] = now_big["seconds"]
            summary["growth"]["available_now_big_merge_ms"] = _merge_commit(now_big).get("executionTimeMs")
            summary["growth"]["available_now_seconds_ratio"] = round(now_big["seconds"] / n["median_seconds"], 3)
    setup = out.get("setup") or {}
    if (keyed := setup.get("big_table")) and (append := setup.get("big_append")):
        summary["snapshot"] = {"rows": out["settings"]["big_rows"], "keyed_seconds": keyed["seconds"],
                               "append_seconds": append["seconds"],
                               "seconds_ratio": round(keyed["seconds"] / append["seconds"], 3),
                               "keyed_where": _spent(keyed), "append_where": _spent(append)}
    summary["targets"] = targets(out, summary)
    return summary


def targets(out: dict, summary: dict) -> list[dict]:
    s, rows = out["settings"], []
    shape = f"{s['changes']:,} changes over {s['keys']:,} keys into {s['table_rows']:,} rows"
    if (ratio := summary.get("speed_vs_available_now")) is not None:
        t, n = summary["contenders"][TIDEMARK], summary["contenders"][NOW]
        why = ""
        if ratio < 1.0 and (w := summary["where"][TIDEMARK]) and w.get("before_merge"):
            why = (f"; before its MERGE ({w['merge']} s) Tidemark spends {w['before_merge']} s: "
                   + ", ".join(f"{k} {v} s" for k, v in w["by_function"].items() if k != "MERGE")
                   + f" (Spark's event log); AvailableNow's micro-batch, Kafka read and MERGE: "
                     f"{summary['where'][NOW]['merge']} s")
        rows.append({"target": f"keyed table, {shape}: Tidemark >= 1.0x AvailableNow with an idempotent foreachBatch "
                               f"MERGE ({_part_date(out, 'compare')})",
                     "measured": f"{ratio:.2f}x ({t['median_seconds']} s vs {n['median_seconds']} s){why}",
                     "met": ratio >= 1.0})
    if replay := summary.get("replay"):
        rows.append({"target": f"keyed table: a replay of the whole range ({replay['offsets']:,} offsets) changes 0 "
                               f"rows ({_part_date(out, 'replay')})",
                     "measured": f"{replay['rows_changed']} rows changed, {replay['versions_added']} commit(s), "
                                 f"{replay['seconds']} s", "met": replay["rows_changed"] == 0})
    if g := summary.get("growth"):
        merge = f"; its MERGE {g['merge_ms_ratio']}x" if g.get("merge_ms_ratio") else ""
        rows.append({"target": f"keyed table: the same changes into {g['big_rows']:,} rows vs {g['small_rows']:,} "
                               f"(reported, no target) ({_part_date(out, 'growth')})",
                     "measured": f"{g['seconds_ratio']}x ({g['big_seconds']} s vs {g['small_seconds']} s){merge}",
                     "met": True})
    if snap := summary.get("snapshot"):
        rows.append({"target": f"keyed table: a first batch of {snap['rows']:,} inserts (each key once, the table "
                               f"created) vs a plain append of the same rows (reported, no target) "
                               f"({out['started_at'][:10]})",
                     "measured": f"{snap['seconds_ratio']}x the append's time ({snap['keyed_seconds']} s vs "
                                 f"{snap['append_seconds']} s)", "met": True})
    return rows


def _n(value) -> str:
    return "–" if value is None else f"{value:,}" if isinstance(value, int) else str(value)


def _commit(c: dict) -> str:
    m = c["metrics"]
    return (f"v{c['version']} {c['operation']} ({_n(m.get('numSourceRows'))} source rows, "
            f"{_n(m.get('numTargetRowsInserted'))} / {_n(m.get('numTargetRowsUpdated'))} / "
            f"{_n(m.get('numTargetRowsDeleted'))} rows inserted / updated / deleted, "
            f"{_n(m.get('numTargetFilesAdded'))} files added, executionTimeMs {_n(m.get('executionTimeMs'))})")


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def section(part: dict) -> str:
    """The part's section of docs/BENCHMARKS.md, from its results."""
    s, m, b = part["settings"], part["summary"], part["backlog"]
    parts = [TITLE, _setup(s, b)]
    if "speed_vs_available_now" in m:
        parts += _compared(part, m)
    if r := m.get("replay"):
        parts.append(_replayed(part, r))
    if g := m.get("growth"):
        parts += _grown(part, m, g)
    if snap := m.get("snapshot"):
        parts.append(_snapshot(snap))
    return "\n\n".join(parts)


def _snapshot(snap: dict) -> str:
    """The keyed table's first batch (inserts only) beside a plain append of the same rows."""
    def where(w: dict) -> str:
        return ", ".join(f"{k} {v} s" for k, v in w["by_function"].items()) if w else "–"

    return (f"A change set of inserts only, such as a Debezium snapshot into a new table: the first batch of the "
            f"{snap['rows']:,}-row keyed table (each key once, on two topics; the reduction to the newest change "
            f"per key, then an append that creates the table) took {snap['keyed_seconds']} s, a plain pipeline's "
            f"first batch over the same topics {snap['append_seconds']} s: **x{snap['seconds_ratio']}** the "
            f"append's time. Driver actions (Spark's event log): keyed {where(snap['keyed_where'])}; append "
            f"{where(snap['append_where'])}.")


def _setup(s: dict, b: dict) -> str:
    """What the part measured, and how."""
    mix = b["mix"]
    shares = mix["shares"]
    return (
        f"`make bench-keyed` (bench/keyed_changes.py): {s['changes']:,} changes over {mix['keys']:,} keys "
        f"({mix['keys_held_by_the_table']:,} of them rows of the table, {mix['new_keys']:,} new) into a keyed table "
        f"of {s['table_rows']:,} rows (`keyed: {{keys: [id], delete_field: op, delete_values: [delete]}}`, ordered "
        f"by the Kafka position), {s['partitions']} partitions, `{s['master']}`, driver memory {s['driver_memory']}. "
        f"The changes, as they fall: {shares.get('upserts_on_existing_keys', 0):.0%} upserts of rows the table held, "
        f"{(shares.get('delete', 0) + shares.get('delete_of_absent_key', 0)):.0%} deletes (half of them tombstones, "
        f"half `op: delete`), {shares.get('upserts_on_new_keys', 0):.0%} upserts of new keys; replayed in order, "
        f"{shares.get('update', 0):.0%} update a present row, {shares.get('insert', 0):.0%} insert one, "
        f"{shares.get('delete', 0):.0%} delete one. The starting tables are made by Tidemark's first batch and "
        f"copied; every contender starts from a copy. Tidemark: the plan call and the ingest job's spark-submit, "
        f"as `tidemark run`; AvailableNow: `bench/jobs/keyed_merge.py` by the same spark-submit base, a "
        f"`foreachBatch` that keeps the newest change per key and MERGEs it (delete, update every column, insert) "
        f"with `spark.databricks.delta.write.txnAppId` / `txnVersion` set per micro-batch, the batch id as the "
        f"version (Delta reads these SQL confs for DML, delta-io/delta#1555). Both with Spark's event log on.")


def _compared(part: dict, m: dict) -> list[str]:
    """The comparison: both contenders' times, MERGE metrics and where their time went."""
    parts = []
    rows = []
    for name in (TIDEMARK, NOW):
        c = m["contenders"][name]
        merge = c["merge"]
        rows.append([c["label"], f"{c['median_seconds']} ({c['min_seconds']}–{c['max_seconds']})",
                     f"{c['median_changes_per_second']:,}", _n(merge.get("executionTimeMs")),
                     f"{_n(merge.get('numTargetRowsInserted'))} / {_n(merge.get('numTargetRowsUpdated'))} / "
                     f"{_n(merge.get('numTargetRowsDeleted'))}", _n(c["median_tree_cpu_seconds"]),
                     f"{c['median_peak_tree_rss_mb']:,}"])
    t = m["contenders"][TIDEMARK]
    phases = ", ".join(f"{k} {v} s" for k, v in m["tidemark_phases"].items())
    text = (f"{_part_date(part, 'compare')}, {t['runs']} round(s), one after the other: Tidemark / "
            f"AvailableNow **x{m['speed_vs_available_now']}** the speed. Both tables end with the same rows "
            f"(count, and a hash of every row over every column but `ingest_batch_id` and `ingested_at`), equal "
            f"to a reference computed from the produced changes. Tidemark's plan call "
            f"{m['tidemark_plan_seconds']} s; its job's phases (its log lines): {phases}. Load average (1 min) "
            f"{_part_load(part, 'compare')}.")
    mine, theirs = m["where"][TIDEMARK], m["where"][NOW]
    if mine["actions"]:
        text += (f" In Spark's event log Tidemark's driver actions took {mine['actions']} s: "
                 + ", ".join(f"{k} {v} s" for k, v in mine["by_function"].items())
                 + f"; AvailableNow's {theirs['actions']} s, all of it the one micro-batch that reads Kafka and "
                   "MERGEs (so its MERGE's executionTimeMs includes the Kafka read; Tidemark's MERGE reads the "
                   "batch the tally cached).")
    parts += [text, _table(["contender", "seconds", "changes/s", "MERGE executionTimeMs",
                            "rows inserted / updated / deleted", "CPU seconds (process tree)", "peak RSS, MB"],
                           rows)]
    spark_rows = []
    for name in (TIDEMARK, NOW):
        if sp := [x for x in part["runs"] if x["contender"] == name][-1].get("spark"):
            spark_rows.append([LABELS[name], _n(sp["app_start_to_first_job_seconds"]),
                               "; ".join(f"{a['what']} {a['seconds']}" for a in sp["actions"]),
                               _n(sp["task_cpu_seconds"]), _n(sp["task_gc_seconds"])])
    if spark_rows:
        parts += ["Where the time goes (Spark's event log of the last round, seconds): the driver's actions in "
                  "order, each with every Spark job and Delta step it ran (root SQL executions, named by the "
                  "call site and the core's function there; `[MERGE]`: the MERGE ran inside).",
                  _table(["contender", "JVM start to the first Spark job", "actions", "tasks' CPU",
                          "tasks' GC"], spark_rows)]
    return parts


def _replayed(part: dict, r: dict) -> str:
    """The replay of the whole range: what changed (nothing, when it works)."""
    commits = "; ".join(_commit(c) for c in r["commits"]) or "none"
    where = ", ".join(f"{k} {v} s" for k, v in r["where"]["by_function"].items())
    return (f"The replay ({_part_date(part, 'replay')}, load {_part_load(part, 'replay')}): the pipeline "
                 f"reset to the earliest offsets (an audited reset), then one batch over the whole range "
                 f"({r['offsets']:,} offsets: the starting rows and the changes) in {r['seconds']} s: "
                 f"**{r['rows_changed']} rows changed** (every column of every row compared, the bookkeeping "
                 f"columns too), {r['versions_added']} new table version(s): {commits}. Its driver actions: "
                 f"{where or '–'}.")


def _grown(part: dict, m: dict, g: dict) -> list[str]:
    """How the MERGE grows with the table."""
    now = (f"; AvailableNow x{g['available_now_seconds_ratio']} ({g['available_now_big_seconds']} s, MERGE "
           f"{_n(g.get('available_now_big_merge_ms'))} ms)" if "available_now_big_seconds" in g else "")
    small_now = m["contenders"][NOW]
    growth_rows = [[f"{g['small_rows']:,}", str(g["small_seconds"]), _n(g["small_merge_ms"]),
                    _n(g["small_merge"].get("numTargetRowsCopied")),
                    ", ".join(f"{k} {v}" for k, v in g["small_where"]["by_function"].items()),
                    str(small_now["median_seconds"]), _n(small_now["merge"].get("executionTimeMs"))],
                   [f"{g['big_rows']:,}", str(g["big_seconds"]), _n(g["big_merge_ms"]),
                    _n(g["big_merge"].get("numTargetRowsCopied")),
                    ", ".join(f"{k} {v}" for k, v in g["big_where"]["by_function"].items()),
                    _n(g.get("available_now_big_seconds")), _n(g.get("available_now_big_merge_ms"))]]
    return [f"How the MERGE grows with the table ({_part_date(part, 'growth')}, load "
              f"{_part_load(part, 'growth')}): the same changes into a table of {g['big_rows']:,} rows, "
              f"Tidemark's batch **x{g['seconds_ratio']}** the time of the {g['small_rows']:,}-row table, its "
              f"MERGE (executionTimeMs) x{g['merge_ms_ratio']}{now}. *Rows copied*: Delta's "
              f"numTargetRowsCopied, the rows the MERGE rewrote unchanged because their files held a changed "
              f"key.",
              _table(["starting rows", "Tidemark batch, s", "its MERGE, executionTimeMs", "rows copied",
                      "its driver actions, s", "AvailableNow, s", "AvailableNow MERGE, executionTimeMs"],
                     growth_rows)]


def write_page(part: dict, doc: Path = DOC) -> None:
    """docs/BENCHMARKS.md with this part's section and Targets rows (bench/page.py)."""
    page.write_part(TITLE, section(part), TARGET_PREFIX, part["summary"]["targets"], doc)


def merged(new: dict, parts: tuple[str, ...]) -> dict:
    """``new`` over the results already in bench/results/keyed.json when those are of the same sizes: the parts
    not run this time keep theirs."""
    path = RESULTS / RESULT_FILE
    if set(parts) == set(PARTS) or not path.exists():
        return new
    old = json.loads(path.read_text())
    same = ("changes", "keys", "table_rows", "big_rows", "partitions", "master", "driver_memory")
    if any(old.get("settings", {}).get(k) != new["settings"].get(k) for k in same):
        log.warning("bench/results/keyed.json holds other sizes: the parts not run this time are left out")
        return new
    out = {**old, **{k: v for k, v in new.items() if k not in ("parts", "setup")}}
    keys = {"compare": ("runs", "reference"), "replay": ("replay",), "growth": ("growth",)}
    for part in PARTS:
        if part not in parts:
            for key in keys[part]:
                if key in old:
                    out[key] = old[key]
    out["parts"] = {**old.get("parts", {}), **new.get("parts", {})}
    out["setup"] = {**old.get("setup", {}), **new.get("setup", {})}
    out["settings"]["parts"] = sorted(set(old["settings"].get("parts", PARTS)) | set(parts))
    return out
