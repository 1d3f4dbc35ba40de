"""`make bench-transform`: what a SQL transform costs (issue 40). The JSON backlog of `make bench-json`
(bench/typed_json.py: BENCH_TRANSFORM_RECORDS, default 1,000,000, order events with 0.1 % poison on
BENCH_PARTITIONS partitions) ingested by two Tidemark pipelines taking turns, BENCH_REPEATS (3) rounds: the
JSON pipeline as it is, and the same pipeline with a typical derive-and-filter transform (``TRANSFORM``: two
derived columns, a rename, a filter that drops the orders in status ``new``, about a third). Both run as
`tidemark run` does (the plan call, then the ingest job by spark-submit), timed from the plan call to the
job's exit. Checked: the plain pipeline's output holds every good record and the dead letters every poison
record; the transformed one's output holds the orders not ``new``, its ledger counts the others as filtered,
and output + dead letters + filtered add up to the backlog. Results: bench/results/transform.json."""

from __future__ import annotations

import datetime as dt
import json
import logging
import statistics
import sys
import time
import uuid

from bench import contenders, machine, page, stack
from bench.knobs import BenchSettings, _int, save_result
from bench.typed_json import produce_json
from devkit import localstack
from tidemark import settings as tidemark_settings
from tidemark.ledger.store import Ledger

log = logging.getLogger("bench.transform")

TRANSFORM = ("SELECT kafka_topic, kafka_partition, kafka_offset, kafka_timestamp, order_id AS id, customer_id, "
             "amount, CAST(round(amount * 100) AS BIGINT) AS amount_cents, upper(currency) AS currency_code, status, "
             "created_at, to_date(created_at) AS created_day FROM records WHERE status <> 'new'")
PLAIN, SHAPED = "tidemark_json", "tidemark_json_transform"
TITLE = "## Transforms: a derive-and-filter SELECT against none"
TARGET_PREFIX = "| JSON pipeline with a derive-and-filter transform"
TARGET = 0.9
LABELS = {PLAIN: "Tidemark, JSON with dead letters (no transform)",
          SHAPED: "Tidemark, the same pipeline with a derive-and-filter transform"}


def run_one(settings: BenchSettings, backlog, name: str, rep: int) -> dict:
    extra = {"transform": TRANSFORM} if name == SHAPED else {}
    config = stack.add_pipeline(settings, f"bench_{name}_{rep}", backlog.facts["topic"], **backlog.pipeline, **extra)
    plan, plan_seconds = stack.plan_batch(settings, config, expect=backlog.records)
    began = time.time()
    measured = stack.run_ingest(settings, plan, f"the Tidemark ingest job ({name})")
    contenders.keep_log(settings, f"{name}-{rep}", measured)
    counts = localstack.query(config.table_uri, "SELECT COUNT(*) AS n, COUNT(DISTINCT kafka_offset * 64 + "
                                                "kafka_partition) AS coordinates FROM t")[0]
    dead = (localstack.query_or_none(config.dead_letter_uri) or [{"n": 0}])[0]["n"]
    ledger = [r for r in Ledger(tidemark_settings.ledger_uri()).rows(config.name) if r.batch_id == plan.batch_id]
    filtered = sum(r.filtered_count or 0 for r in ledger)
    good = backlog.records - backlog.poison
    expected_filtered = 0 if name == PLAIN else good - counts["coordinates"]
    recorded = sum(r.record_count for r in ledger)
    if (dead != backlog.poison or filtered != expected_filtered or recorded != backlog.records
            or counts["n"] != counts["coordinates"] or (name == PLAIN and counts["n"] != good)):
        raise RuntimeError(f"{name}: {counts} output rows, {dead} dead letters, {filtered} filtered for a backlog of "
                           f"{backlog.records} ({backlog.poison} poison)")
    if name == SHAPED:
        kept = localstack.query(config.table_uri, "SELECT COUNT(*) AS n FROM t WHERE status = 'new'")[0]["n"]
        if kept:
            raise RuntimeError(f"{name}: {kept} orders in status 'new' passed the filter")
    stack.remove_pipeline(settings, config)
    seconds = plan_seconds + measured.wall_seconds
    return {"contender": name, "repetition": rep, "records": backlog.records, "seconds": round(seconds, 3),
            "records_per_second": round(backlog.records / seconds, 1), "output_rows": counts["n"],
            "dead_letters": dead, "filtered": filtered, "plan_seconds": round(plan_seconds, 3),
            "phases": contenders.ingest_phases(measured.output, began, measured.wall_seconds, contenders.TYPED_PHASES),
            **measured.summary(), **machine.load()}


def section(out: dict) -> str:
    """The part's section of docs/BENCHMARKS.md, from its results."""
    m, c = out["summary"], out["summary"]["contenders"]
    loads = [r["load_1m"] for r in out["runs"]]
    return (f"{TITLE}\n\n`make bench-transform` ({out['date']}; bench/results/transform.json): "
            f"{out['settings']['records']:,} JSON order events with 0.1 % poison on {out['settings']['partitions']} "
            f"partitions, ingested by the same JSON pipeline with and without a transform, taking turns, "
            f"{out['settings']['repeats']} rounds (plan call + spark-submit, medians). The transform derives two "
            f"columns, renames one and drops the orders in status `new` (about a third):\n\n"
            f"```sql\n{TRANSFORM}\n```\n\n"
            f"| pipeline | median s | range s |\n|---|---|---|\n"
            + "".join(f"| {c[n]['label']} | {c[n]['median_seconds']} | {c[n]['min_seconds']}-{c[n]['max_seconds']} |\n"
                      for n in LABELS)
            + f"\nThe transform cost {m['cost_percent']} % ({m['ratio']}x the pipeline without it). A "
              f"transformed batch is counted before it is written (the decoded batch cached and tallied, as re-reads "
              f"are, so that the output commit can carry the good records per partition), where the plain JSON "
              f"pipeline writes and counts in one pass. Median phases (s): without {m['phases'][PLAIN]}, with "
              f"{m['phases'][SHAPED]}. The 1-minute load during the runs was {min(loads):.2f}-{max(loads):.2f} on "
              f"{out['machine'].get('cores', 2)} cores.\n")


def targets(out: dict) -> list[dict]:
    m = out["summary"]
    return [{"target": f"{TARGET_PREFIX[2:]}: >= {TARGET}x the same pipeline without it ({out['date']})",
             "measured": f"{m['ratio']}x ({m['cost_percent']} % slower)", "met": m["ratio"] >= TARGET}]


def main() -> None:
    if "--page" in sys.argv[1:]:
        page.write_stored("transform.json", "transform", TITLE, section, TARGET_PREFIX, targets)
        return
    stack.log_as("bench-transform")
    settings = stack.own_settings("transform", records=_int("BENCH_TRANSFORM_RECORDS", 1_000_000))
    stack.reset_work(settings)
    stack.configure_environment(settings)
    stack.train_class_data(settings)
    backlog = produce_json(settings, f"bench_transform_{uuid.uuid4().hex[:6]}")
    runs = []
    for rep in range(1, settings.repeats + 1):
        for name in ((PLAIN, SHAPED) if rep % 2 else (SHAPED, PLAIN)):
            runs.append(row := run_one(settings, backlog, name, rep))
            log.info("repetition %d/%d: %s: %.1f s, %.0f records/s, load %.2f", rep, settings.repeats, name,
                     row["seconds"], row["records_per_second"], row["load_1m"])
    medians = {n: statistics.median(r["seconds"] for r in runs if r["contender"] == n) for n in LABELS}
    summary = {"contenders": {n: {"label": LABELS[n], "median_seconds": round(s, 2),
                                  "min_seconds": min(r["seconds"] for r in runs if r["contender"] == n),
                                  "max_seconds": max(r["seconds"] for r in runs if r["contender"] == n)}
                              for n, s in medians.items()},
               "ratio": round(medians[PLAIN] / medians[SHAPED], 3),
               "cost_percent": round(100 * (medians[SHAPED] / medians[PLAIN] - 1), 1),
               "phases": {n: {p: round(statistics.median(r["phases"][p] for r in runs if r["contender"] == n
                                                         and p in r["phases"]), 2)
                              for p in ("startup", "write_output_and_tally", "dead_letters", "ledger_commit")
                              if any(p in r["phases"] for r in runs if r["contender"] == n)} for n in LABELS}}
    out = {"date": dt.date.today().isoformat(), "machine": machine.describe(), "load_at_end": machine.load(),
           "settings": {"records": backlog.records, "partitions": settings.partitions, "repeats": settings.repeats,
                        "master": settings.master, "driver_memory": settings.driver_memory},
           "transform": TRANSFORM, "backlog": backlog.facts, "runs": runs, "summary": summary}
    save_result("transform.json", out)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
