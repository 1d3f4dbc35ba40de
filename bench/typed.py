"""The benchmark of typed values, one harness for every value format (`make bench-json`: bench/typed_json.py,
`make bench-avro`: bench/avro.py). A format module produces its backlog (with one poison record in 1,000,
so that Tidemark's dead-letter path runs) and names its Spark baselines; this module runs the contenders,
interleaved, BENCH_REPEATS times (default 3), each on BENCH_SPARK_MASTER (local[2]) with the same
spark-submit base:

- tidemark_<format>: the `tidemark run` path (the plan call, then the ingest job's spark-submit) of a
  pipeline with that ``value_format``; every bad record a dead letter, with its reason;
- the baselines: bench/jobs/typed_baselines.py, Structured Streaming AvailableNow or one plain Spark batch read,
  decoding the same schema into the same typed columns; the poison kept as rows of nulls.

BENCH_<FORMAT>_CONTENDERS (comma-separated) runs some of them only; BENCH_<FORMAT>_RECORDS sizes the
backlog; BENCH_<FORMAT>_WORK is the work folder (.cache/bench-<format>). Every output is counted back
(Tidemark: output rows + dead letters = the backlog; a baseline: every record) and fingerprinted (sums
over every decoded field of the good rows), so all of them must have decoded the same values.
Throughput counts every record of the topic, poison included.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from bench import contenders, machine, stack
from bench.knobs import ROOT, BenchSettings, _int, save_result
from bench.measure import Measurement, check, run_measured
from devkit import localstack

log = logging.getLogger("bench")
JOB = str(ROOT / "bench" / "jobs" / "typed_baselines.py")
POISON_EVERY = _int("BENCH_POISON_EVERY", 1000)
"""One record in BENCH_POISON_EVERY is poison (default 1,000); 0: none, the results go to <format>_clean.json."""


@dataclass(frozen=True)
class Baseline:
    """A Spark baseline: bench/jobs/typed_baselines.py with this decoder, as AvailableNow when ``streaming``."""

    name: str
    label: str
    decoder: str
    streaming: bool = False


def available_now(key: str, decoder: str) -> Baseline:
    return Baseline(f"available_now_{key}", f"Structured Streaming AvailableNow, {decoder} (PERMISSIVE)", decoder,
                    streaming=True)


def plain_batch(name: str, decoder: str, how: str = "") -> Baseline:
    return Baseline(name, f"Plain Spark batch read, {how or decoder + ' (PERMISSIVE)'}", decoder)


@dataclass
class Backlog:
    """What a format's ``produce`` made: the results' ``backlog``, the pipeline keys of the Tidemark
    contender, the baselines' schema arguments, and the results' description of the schema."""

    facts: dict
    pipeline: dict
    job_args: list[str]
    described: dict
    registry_url: str | None = None

    @property
    def records(self) -> int:
        return self.facts["records"]

    @property
    def poison(self) -> int:
        return self.facts["poison"]

    @property
    def megabytes(self) -> float:
        return self.facts.get("bytes", self.records * self.facts["record_bytes"]) / 2**20


@dataclass(frozen=True)
class ValueFormat:
    key: str
    """``json`` or ``avro``: the contender, pipeline, topic and knob names."""
    tidemark_label: str
    baselines: tuple[Baseline, ...]
    ratios: tuple[tuple[str, str], ...]
    fingerprint: str
    """SQL over the output (``t``): sums over every decoded field of the good rows."""
    produce: Callable[[BenchSettings, str], Backlog]
    result_file: str
    extra_settings: Callable[[BenchSettings, Backlog], dict] = field(default=lambda settings, backlog: {})

    @property
    def tidemark(self) -> str:
        return f"tidemark_{self.key}"

    @property
    def labels(self) -> dict[str, str]:
        return {self.tidemark: self.tidemark_label, **{b.name: b.label for b in self.baselines}}


# --- checks --------------------------------------------------------------------------------------

def _facts(uri: str, fmt: ValueFormat) -> dict:
    from deltalake import DeltaTable

    return {"fingerprint": localstack.query(uri, fmt.fingerprint)[0],
            "column_types": {f.name: str(f.type) for f in DeltaTable(uri).schema().fields}}


def _check_nulls(uri: str, backlog: Backlog, name: str) -> dict:
    """A baseline keeps every record: the poison as rows whose fields are all null."""
    found = localstack.query(uri, "SELECT COUNT(*) AS n, COUNT(order_id) AS good, COUNT(note) AS notes, "
                                  "COUNT(created_at) AS stamps FROM t")[0]
    good = backlog.records - backlog.poison
    expected = {"n": backlog.records, "good": good, "notes": good, "stamps": good}
    if found != expected:
        raise RuntimeError(f"{name}: the output table {uri} holds {found}, expected {expected}")
    return {"output_rows": found["n"], "null_rows": found["n"] - found["good"]}


def _reason(error: str) -> str:
    """A dead letter's reason with its numbers (schema id, size) as N: one key per kind."""
    return re.sub(r"\d+", "N", error)


# --- the contenders ------------------------------------------------------------------------------

def run_tidemark(settings: BenchSettings, fmt: ValueFormat, backlog: Backlog,
                 rep: int) -> tuple[float, Measurement, dict]:
    config = stack.add_pipeline(settings, f"bench_{fmt.key}_{rep}", backlog.facts["topic"], **backlog.pipeline)
    plan, plan_seconds = stack.plan_batch(settings, config, expect=backlog.records, registry_url=backlog.registry_url)
    began = time.time()
    measured = stack.run_ingest(settings, plan, f"the Tidemark ingest job ({fmt.key})")
    contenders.keep_log(settings, f"{fmt.tidemark}-{rep}", measured)
    good = stack.table_count(config.table_uri)
    reasons = localstack.query_or_none(config.dead_letter_uri,
                                       "SELECT error, COUNT(*) AS n FROM t GROUP BY error") or []
    dead = sum(r["n"] for r in reasons)
    if good != backlog.records - backlog.poison or dead != backlog.poison:
        raise RuntimeError(f"pipeline '{config.name}': {good} output rows and {dead} dead letters, expected "
                           f"{backlog.records - backlog.poison} and {backlog.poison}")
    partitions = localstack.query_or_none(config.dead_letter_uri,
                                          "SELECT COUNT(DISTINCT kafka_partition) AS n FROM t") or [{"n": 0}]
    extra = {"plan_seconds": round(plan_seconds, 3), "submit_seconds": round(measured.wall_seconds, 3),
             "output_rows": good, "dead_letters": dead, "dead_letter_partitions": partitions[0]["n"],
             "dead_letter_reasons": {_reason(r["error"]): r["n"] for r in reasons},
             "phases": contenders.ingest_phases(measured.output, began, measured.wall_seconds,
                                                contenders.TYPED_PHASES),
             **_facts(config.table_uri, fmt)}
    stack.remove_pipeline(settings, config)
    return plan_seconds + measured.wall_seconds, measured, extra


def run_baseline(settings: BenchSettings, fmt: ValueFormat, backlog: Backlog, baseline: Baseline,
                 rep: int) -> tuple[float, Measurement, dict]:
    table = stack.fresh_folder(settings.lake / f"bench_{baseline.name}_{rep}")
    command = [*stack.spark_submit_base(settings, f"bench-{baseline.name.replace('_', '-')}-{rep}"), JOB,
               "--topic", backlog.facts["topic"], "--table", str(table), "--decoder", baseline.decoder,
               *backlog.job_args]
    checkpoint = settings.work / "checkpoints" / f"{baseline.name}_{rep}"
    if baseline.streaming:
        command += ["--checkpoint", str(stack.fresh_folder(checkpoint))]
    measured = check(run_measured(command, stack.spark_env(settings)), f"the {baseline.name} job")
    contenders.keep_log(settings, f"{baseline.name}-{rep}", measured)
    extra = {**_check_nulls(str(table), backlog, baseline.name), **_facts(str(table), fmt)}
    stack.drop_table(str(table))
    stack.drop_table(str(checkpoint))
    return measured.wall_seconds, measured, extra


def run_one(settings: BenchSettings, fmt: ValueFormat, backlog: Backlog, name: str, rep: int) -> dict:
    if name == fmt.tidemark:
        seconds, measured, extra = run_tidemark(settings, fmt, backlog, rep)
    else:
        baseline = next(b for b in fmt.baselines if b.name == name)
        seconds, measured, extra = run_baseline(settings, fmt, backlog, baseline, rep)
    timed = "plan call + spark-submit wall time" if name == fmt.tidemark else "spark-submit wall time"
    return {"contender": name, "repetition": rep, "records": backlog.records, "seconds": round(seconds, 3),
            "timed": timed, "records_per_second": round(backlog.records / seconds, 1),
            "mb_per_second": round(backlog.megabytes / seconds, 2), **measured.summary(), **extra, **machine.load()}


# --- summary -------------------------------------------------------------------------------------

def chosen(variable: str, names: tuple[str, ...]) -> tuple[str, ...]:
    """The contenders named in the environment variable (comma-separated), default all, in their order."""
    wanted = [n.strip() for n in os.environ.get(variable, "").split(",") if n.strip()]
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        raise SystemExit(f"{variable}: unknown contender(s) {', '.join(unknown)}; choose from {', '.join(names)}")
    return tuple(n for n in names if not wanted or n in wanted)


def check_same_values(runs: list[dict]) -> None:
    """Every run decoded the same values (``fingerprint``) into the same column types (where both have them)."""
    first = runs[0]
    for run in runs[1:]:
        for key in ("fingerprint", "column_types"):
            mine = {k: v for k, v in run[key].items() if key != "column_types" or k in first[key]}
            theirs = {k: v for k, v in first[key].items() if key != "column_types" or k in run[key]}
            if mine != theirs:
                raise RuntimeError(f"{run['contender']} (repetition {run['repetition']}) {key} {mine} differs from "
                                   f"{first['contender']}'s {theirs}")


def summarize(runs: list[dict], fmt: ValueFormat, backlog: Backlog) -> dict:
    """Per contender the median, range, throughput and peak RSS of its runs; the throughput ratios of the
    format's pairs; Tidemark's plan call and phases (medians)."""
    summary: dict = {"contenders": {}}
    for name, label in fmt.labels.items():
        mine = [r for r in runs if r["contender"] == name]
        if mine:
            median = statistics.median(r["seconds"] for r in mine)
            summary["contenders"][name] = {
                "label": label, "runs": len(mine), "median_seconds": round(median, 2),
                "min_seconds": round(min(r["seconds"] for r in mine), 2),
                "max_seconds": round(max(r["seconds"] for r in mine), 2),
                "median_records_per_second": round(backlog.records / median),
                "median_mb_per_second": round(backlog.megabytes / median, 2),
                "median_peak_tree_rss_mb": round(statistics.median(r["peak_tree_rss_mb"] for r in mine))}
    rps = {n: c["median_records_per_second"] for n, c in summary["contenders"].items()}
    summary["ratios"] = {f"{a}/{b}": round(rps[a] / rps[b], 3) for a, b in fmt.ratios if a in rps and b in rps}
    if tidemark := [r for r in runs if r["contender"] == fmt.tidemark]:
        summary["tidemark_plan_seconds"] = round(statistics.median(r["plan_seconds"] for r in tidemark), 3)
        names = [p for p, _ in contenders.TYPED_PHASES] + ["shutdown"]
        summary["tidemark_phases"] = {
            p: round(statistics.median(r["phases"][p] for r in tidemark if p in r["phases"]), 2)
            for p in names if any(p in r["phases"] for r in tidemark)}
    return summary


def main(fmt: ValueFormat, default_records: int = 1_000_000) -> None:
    stack.log_as(f"bench-{fmt.key}")
    knob = f"BENCH_{fmt.key.upper()}"
    settings = stack.own_settings(fmt.key, records=_int(f"{knob}_RECORDS", default_records))
    names = chosen(f"{knob}_CONTENDERS", tuple(fmt.labels))
    stack.reset_work(settings)
    stack.configure_environment(settings)
    stack.train_class_data(settings)  # every Spark contender maps the archive, as `tidemark run` would
    backlog = fmt.produce(settings, f"bench_{fmt.key}_{uuid.uuid4().hex[:6]}")
    log.info("backlog ready in %.1f s: %d records, %d of them poison %s", backlog.facts["produce_seconds"],
             backlog.records, backlog.poison, backlog.facts["poison_kinds"])
    runs = []
    for rep in range(1, settings.repeats + 1):
        shift = (rep - 1) % len(names)
        for name in names[shift:] + names[:shift]:
            log.info("repetition %d/%d: %s ...", rep, settings.repeats, fmt.labels[name])
            runs.append(row := run_one(settings, fmt, backlog, name, rep))
            log.info("repetition %d/%d: %s: %.1f s, %.0f records/s, peak RSS %.0f MB, load %.2f", rep,
                     settings.repeats, name, row["seconds"], row["records_per_second"], row["peak_tree_rss_mb"],
                     row["load_1m"])
    check_same_values(runs)
    out = {"date": dt.date.today().isoformat(), "machine": machine.describe(), "load_at_end": machine.load(),
           "settings": {"records": backlog.records, **fmt.extra_settings(settings, backlog),
                        "record_bytes": settings.record_bytes, "partitions": settings.partitions,
                        "repeats": settings.repeats, "master": settings.master,
                        "driver_memory": settings.driver_memory, "megabytes": round(backlog.megabytes, 1),
                        "contenders": list(names)},
           **backlog.described, "backlog": backlog.facts, "runs": runs, "summary": summarize(runs, fmt, backlog)}
    save_result(fmt.result_file if POISON_EVERY else fmt.result_file.replace(".json", "_clean.json"), out)
    print(json.dumps(out["summary"], indent=2))
