"""`make chaos` (scripts/chaos.sh runs `python -m bench.chaos` inside its cleanup trap): set the stack up,
run the soak, check exactly-once, write bench/results/chaos.json and docs/chaos.png."""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from bench.chaos import audit, chaos_report, chaos_stack, fault_kinds, fault_loop
from bench.chaos.chaos_stack import log

RESULT = chaos_stack.ROOT / "bench" / "results" / os.environ.get("CHAOS_RESULT", "chaos.json")
CHART = chaos_stack.ROOT / "docs" / os.environ.get("CHAOS_CHART", "chaos.png")


def setup(pipelines_dir) -> list[fault_loop.Pipeline]:
    started = time.monotonic()
    chaos_stack.script("storage.sh", "up", S3_PORT=os.environ["S3_BACKEND_PORT"])
    chaos_stack.start_proxy()
    chaos_stack.script("kafka.sh", "up")
    chaos_stack.script("spark_cluster.sh", "up")
    pipelines = fault_loop.write_pipelines(pipelines_dir, int(os.environ.get("CHAOS_PIPELINES", "3")))
    log(chaos_stack.script("airflow.sh", "up", timeout=900))
    airflow = chaos_stack.Airflow()
    for p in pipelines:
        airflow.wait_parsed(p.name)
    log(f"stack up in {time.monotonic() - started:.0f} s")
    return pipelines


def main() -> None:
    wanted = int(os.environ.get("CHAOS_FAULTS", "100"))
    timeout = float(os.environ.get("CHAOS_TIMEOUT", "4500"))
    drain_budget = float(os.environ.get("CHAOS_DRAIN_SECONDS", "1200"))
    kinds = tuple(k for k in os.environ.get("CHAOS_KINDS", ",".join(fault_kinds.KINDS)).split(",") if k)
    unknown = set(kinds) - set(fault_kinds.KINDS)
    if unknown:
        sys.exit(f"chaos: CHAOS_KINDS names {sorted(unknown)}, not fault kinds ({', '.join(fault_kinds.KINDS)})")
    began = time.monotonic()
    pipelines = setup(chaos_stack.HOME / "pipelines")
    airflow = chaos_stack.Airflow()
    # Faults stop at the deadline (CHAOS_TIMEOUT minus the time the drain and the audit may take).
    run = fault_loop.Soak(airflow, pipelines, wanted, began + timeout - drain_budget, kinds, began + timeout)
    injector = threading.Thread(target=run.fault_loop, daemon=True)
    injector.start()
    run.stream()
    injector.join()
    soak_seconds = time.monotonic() - run.started
    log(f"{len(run.events)} faults in {soak_seconds / 60:.1f} min; draining (no more faults)")
    run.drain()
    lake = os.environ["TIDEMARK_LAKE_ROOT"]
    checks = {p.name: audit.check_pipeline(lake, p.name, p.name, p.produced, p.json_values) for p in pipelines}
    audits = {p.name: audit.tidemark_audit(p.name) for p in pipelines}
    results = chaos_report.build(run, checks, audits, wanted, soak_seconds, time.monotonic() - began)
    RESULT.write_text(json.dumps(results, indent=2) + "\n")
    chaos_report.chart(results, CHART)
    print(chaos_report.summary(results))
    if not results["verdict"]["exactly_once"] or results["partial"]:
        sys.exit(f"chaos: {results['verdict']}; see {RESULT}")


if __name__ == "__main__":
    main()
