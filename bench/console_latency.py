"""`make bench-page`: how fast the Tidemark page (tidemark_airflow.console) answers as a pipeline's ledger
grows. For ledgers of BENCH_LEDGER_SIZES committed batches (default 10,1000,10000; 8 partitions, so
one row per partition and batch, written in a few big appends like bench/ledger_growth.py's synthetic
shape) and for BENCH_LEDGER_SMALL_COMMITS (default 1000) batches written as runs write them (two Delta
commits per batch), each JSON endpoint and the HTML page are called 7 times after a warm-up against a
live broker; medians go to bench/results/console.json.

The app is called in-process (FastAPI's TestClient, Airflow's login dependency replaced by a fixed
user), so the figures are the page's own work (ledger reads with delta-rs, Kafka's offsets), not the
api-server's HTTP stack or the JWT check, which tests/e2e/test_local_airflow.py exercises.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import time

from bench import ledger_growth, machine, stack
from bench.knobs import RESULTS, BenchSettings
from tidemark.ledger.store import Ledger, planned_rows

log = logging.getLogger("bench")
PIPELINE = ledger_growth.PIPELINE
ROUTES = {"overview": "/api/pipelines", "pipeline": f"/api/pipelines/{PIPELINE}",
          "offsets": f"/api/pipelines/{PIPELINE}/offsets", "history": f"/api/pipelines/{PIPELINE}/history",
          "page": f"/pipelines/{PIPELINE}"}


def client():
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.testclient import TestClient

    from tidemark_airflow.console import create_app

    app = create_app(failed=lambda dag_id: False)
    app.dependency_overrides[get_user] = lambda: "bench"
    return TestClient(app)


def time_routes(uri: str) -> dict:
    os.environ["TIDEMARK_LEDGER_URI"] = uri
    http = client()

    def call(path: str):
        def get() -> None:
            response = http.get(path)
            if response.status_code != 200:
                raise RuntimeError(f"{path}: {response.status_code} {response.text[:300]}")
        return get

    view = http.get(ROUTES["pipeline"]).json()
    if view.get("kafka_error") or not view.get("last_batch_id"):
        raise RuntimeError(f"the page did not see Kafka or the ledger: {json.dumps(view)[:500]}")
    return {name: ledger_growth.timed_ms(call(path)) for name, path in ROUTES.items()}


def protocol_ledger(uri: str, topic: str, topic_id: str, ends: dict[int, int], batches: int) -> None:
    ledger = Ledger(uri)
    for batch in range(1, batches + 1):
        ranges = ledger_growth.batch_ranges(topic, ends, batch, batches)
        ledger.append(planned_rows(PIPELINE, batch, ranges, f"bench-{batch}", topic_ids={topic: topic_id}),
                      expected=ledger.state(PIPELINE).fingerprint)
        ledger.mark_committed(PIPELINE, batch, {r.tp: (r.size, 0) for r in ranges})


def main() -> None:
    stack.log_as("bench", "httpx", "httpx2")
    settings = BenchSettings.from_env()
    stack.reset_work(settings)
    stack.configure_environment(settings)
    started = time.monotonic()
    topic, topic_id, ends = ledger_growth.prepare_topic(settings)
    stack.add_pipeline(settings, PIPELINE, topic)
    results = {"date": dt.date.today().isoformat(), "machine": machine.describe(), "partitions": len(ends),
               "ledgers": []}
    shapes = [("synthetic", n, ledger_growth.seed_synthetic) for n in settings.ledger_sizes]
    shapes.append(("protocol", settings.ledger_small_commits, protocol_ledger))
    for shape, batches, build in shapes:
        uri = str(stack.fresh_folder(settings.work / "ledgers" / f"console-{shape}-{batches}"))
        build(uri, topic, topic_id, ends, batches)
        timings = time_routes(uri)
        results["ledgers"].append({"shape": shape, "batches": batches, "routes": timings,
                                   **ledger_growth.log_facts(uri)})
        log.info("page, %s ledger of %d batches: %s", shape, batches,
                 ", ".join(f"{name} {t['median_ms']:.0f} ms" for name, t in timings.items()))
        stack.drop_table(uri)
    results["wall_minutes"] = round((time.monotonic() - started) / 60, 1)
    out = RESULTS / "console.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    log.info("results: %s", out)


if __name__ == "__main__":
    main()
