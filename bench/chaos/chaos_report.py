"""bench/results/chaos.json and its chart (docs/chaos.png): faults by phase and kind, runs, the exactly-once
figures and the wall time."""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

from bench.chaos import fault_kinds, phase


def build(run, checks: dict, audits: dict, wanted: int, soak_seconds: float, wall_seconds: float) -> dict:
    events = run.events
    by_phase = Counter(e["phase"] for e in events)
    by_kind = Counter(e["kind"] for e in events)
    runs = [r for p in run.pipelines for r in p.runs]
    totals = {k: sum(c[k] for c in checks.values()) for k in
              ("produced", "in_kafka", "output_rows", "dead_letter_rows", "duplicates", "lost", "unexpected",
               "ledger_ranges", "ledger_ranges_unmatched_count", "offsets_not_in_ledger", "batches_left_pending")}
    exactly_once = (totals["duplicates"] == 0 and totals["lost"] == 0 and totals["unexpected"] == 0
                    and totals["ledger_ranges_unmatched_count"] == 0 and totals["offsets_not_in_ledger"] == 0
                    and totals["produced"] == totals["in_kafka"] and all(a["exit_code"] == 0 for a in audits.values()))
    return {
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join([*(f"{k}={v}" for k, v in sorted(os.environ.items())
                               if k.startswith("CHAOS_") and k not in ("CHAOS_HOME", "CHAOS_SPARK_UI_BASE")),
                             "make chaos"]),
        "partial": len(events) < wanted or not run.drained,
        "drained": run.drained,
        "settings": {
            "faults_wanted": wanted, "kinds": list(run.kinds), "pipelines": [p.config() for p in run.pipelines],
            "executor": "CeleryExecutor, 2 workers (concurrency " + os.environ.get("CELERY_WORKER_CONCURRENCY", "1")
                        + " each), Redis broker, PostgreSQL metadata DB",
            "spark": "standalone: a master and 2 workers (" + os.environ.get("SPARK_WORKER_CORES", "1")
                     + " cores, " + os.environ.get("SPARK_WORKER_MEMORY", "1g") + " each); client-mode drivers",
            "lake": "local S3 server (moto) behind a TCP proxy: " + os.environ["TIDEMARK_LAKE_ROOT"],
            "kafka": "single broker (KRaft), killed -9 and started again",
            "heartbeat_timeout_s": int(os.environ.get("AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT", "300")),
        },
        "faults": {"injected": len(events), "by_phase": {p: by_phase.get(p, 0) for p in phase.PHASES},
                   "by_kind": {k: by_kind.get(k, 0) for k in fault_kinds.KINDS},
                   "by_kind_and_phase": {k: dict(Counter(e["phase"] for e in events if e["kind"] == k))
                                         for k in fault_kinds.KINDS},
                   "events": events},
        "runs": {"total": len(runs), "succeeded": sum(r["state"] == "success" for r in runs),
                 "failed": sum(r["state"] == "failed" for r in runs),
                 "ingest_tries": dict(Counter(str(r["tries"].get("ingest")) for r in runs))},
        "exactly_once": {"totals": totals, "pipelines": checks,
                         "tidemark_audit": {k: {"exit_code": v["exit_code"], "ok": v["ok"]}
                                            for k, v in audits.items()}},
        "verdict": {"exactly_once": exactly_once, "duplicates": totals["duplicates"], "lost": totals["lost"],
                    "faults": len(events)},
        "soak_seconds": round(soak_seconds), "wall_seconds": round(wall_seconds),
    }


def summary(results: dict) -> str:
    f, t, r = results["faults"], results["exactly_once"]["totals"], results["runs"]
    lines = [f"faults: {f['injected']} (" + ", ".join(f"{k} {v}" for k, v in f["by_kind"].items()) + ")",
             "by phase: " + ", ".join(f"{k} {v}" for k, v in f["by_phase"].items()),
             f"runs: {r['total']} ({r['succeeded']} succeeded, {r['failed']} failed)",
             f"records: {t['produced']} produced, {t['output_rows']} in the outputs + {t['dead_letter_rows']} dead "
             f"letters; duplicates {t['duplicates']}, lost {t['lost']}, ledger ranges {t['ledger_ranges']} "
             f"({t['ledger_ranges_unmatched_count']} unmatched)",
             f"wall time: {results['wall_seconds'] / 60:.1f} min (soak {results['soak_seconds'] / 60:.1f} min)",
             f"exactly once: {results['verdict']['exactly_once']}"]
    return "\n".join(lines)


def chart(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    f = results["faults"]
    phases = [p for p in phase.PHASES if f["by_phase"].get(p)] or list(phase.PHASES)
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5.5))
    bottom = [0] * len(phases)
    for kind in fault_kinds.KINDS:
        heights = [f["by_kind_and_phase"].get(kind, {}).get(p, 0) for p in phases]
        if any(heights):
            left.bar(phases, heights, bottom=bottom, label=kind.replace("_", " "))
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    left.set_ylabel("faults")
    left.set_title(f"{f['injected']} faults by phase of the run they hit (stacked by kind)")
    left.legend(fontsize=8)
    left.tick_params(axis="x", labelrotation=20)
    kinds = [k for k in fault_kinds.KINDS]
    right.barh([k.replace("_", " ") for k in kinds], [f["by_kind"][k] for k in kinds], color="#1f77b4")
    right.invert_yaxis()
    t, r = results["exactly_once"]["totals"], results["runs"]
    right.set_xlabel("faults")
    right.set_title(f"by kind: {r['total']} DAG runs, {t['produced']:,} records, duplicates {t['duplicates']}, "
                    f"lost {t['lost']}, {results['wall_seconds'] / 60:.0f} min", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
