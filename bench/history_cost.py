"""`make bench-history` (scripts/bench_history.sh): what a history table (``keyed.history: scd2``) costs against a
plain keyed table on the same changes (issue 59 part 5: reported, no target).

One topic of BENCH_PARTITIONS (8) partitions, every record keyed ``{"id": N}``:

* the starting rows, ids 0 .. BENCH_HISTORY_KEYS-1 (200,000), one upsert each, ``updated_at`` on the first day;
* then BENCH_HISTORY_CHANGES (1,000,000) changes over those keys and as many new ones, drawn at random: one in ten
  an ordered delete (``op: delete`` with its ``updated_at``), the rest upserts; one in twenty (of either kind)
  late, its ``updated_at`` older than its key's newest change so far by up to an hour, the others a millisecond
  apart in production order.

Two pipelines read it with the same ``keyed`` block (``order_by: [updated_at]``, ``delete_field: op``), one with
``history: scd2``. Each pipeline's first batch (the starting rows) creates its table; then the changes are produced,
and each pipeline's second batch is timed as `tidemark run` runs it (the plan call, then the ingest job's
spark-submit), the plain keyed table first, then the history table. Checked afterwards: the history table's current
versions are the keyed table's rows (every column but the bookkeeping ones and the history's own), and it holds
one version per upsert that no delete at its ordering replaced. Results: bench/results/history.json; the section
in docs/BENCHMARKS.md is written from them by hand (its figures name the file's date).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from bench import data, machine, stack
from bench.keyed_data import produce
from bench.keyed_runs import run_tidemark
from bench.knobs import save_result

log = logging.getLogger("bench")

RESULT_FILE = "history.json"
VALUE_SCHEMA = {"id": "bigint", "name": "string?", "qty": "int?", "updated_at": "timestamp", "op": "string?"}
KEYED = {"keys": ["id"], "order_by": ["updated_at"], "delete_field": "op", "delete_values": ["delete"]}
EPOCH_MS = 1_714_521_600_000  # 2024-05-01T00:00:00Z
DELETE_SHARE, LATE_SHARE, LATE_MS = 0.10, 0.05, 3_600_000


@dataclass(frozen=True)
class Sizes:
    keys: int
    changes: int
    event_log: bool = False  # run_tidemark's knob: no event log here

    @classmethod
    def from_env(cls) -> Sizes:
        return cls(int(os.environ.get("BENCH_HISTORY_KEYS", "200000")),
                   int(os.environ.get("BENCH_HISTORY_CHANGES", "1000000")))


def _when(ms: int) -> str:
    seconds, millis = divmod(ms, 1000)
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{millis:03d}Z"


def _record(k: int, name: str | None, qty: int | None, ms: int, op: str) -> tuple[bytes, bytes]:
    return (b'{"id":%d}' % k, json.dumps({"id": k, "name": name, "qty": qty, "updated_at": _when(ms),
                                           "op": op}, separators=(",", ":")).encode())


def starting_rows(keys: int) -> Iterator[tuple[bytes, bytes]]:
    for k in range(keys):
        yield _record(k, f"init-{k}", k % 1000, EPOCH_MS + k, "upsert")


def changes(sizes: Sizes, mix: dict) -> Iterator[tuple[bytes, bytes]]:
    """The changes, in a fixed order from a seed; ``mix`` counts each kind as it falls."""
    rng, newest = random.Random(59), {}
    start = EPOCH_MS + 86_400_000
    for i in range(sizes.changes):
        k = rng.randrange(2 * sizes.keys)
        ms = start + i
        if rng.random() < LATE_SHARE and k in newest:
            ms = max(newest[k] - rng.randrange(1, LATE_MS), EPOCH_MS)
            mix["late"] = mix.get("late", 0) + 1
        newest[k] = max(newest.get(k, 0), ms)
        if rng.random() < DELETE_SHARE:
            mix["deletes"] = mix.get("deletes", 0) + 1
            yield _record(k, None, None, ms, "delete")
        else:
            mix["upserts"] = mix.get("upserts", 0) + 1
            yield _record(k, f"c{i}", rng.randrange(10_000), ms, "upsert")


def current_versions_match(keyed_uri: str, history_uri: str) -> dict:
    """The history table's current versions against the keyed table's rows (delta-rs, every column but the
    bookkeeping ones and the history's own)."""
    from deltalake import DeltaTable

    compared = ["id", "name", "qty", "updated_at", "op", "kafka_topic", "kafka_partition", "kafka_offset"]
    keyed = DeltaTable(keyed_uri).to_pyarrow_table(columns=compared).sort_by("id")
    history = DeltaTable(history_uri).to_pyarrow_table(columns=[*compared, "is_current"])
    current = history.filter(history["is_current"]).select(compared).sort_by("id")
    return {"keyed_rows": keyed.num_rows, "history_versions": history.num_rows,
            "history_current": current.num_rows, "equal": keyed.equals(current)}


TITLE = "## History tables against keyed tables"


def section(out: dict) -> str:
    """The part's section of docs/BENCHMARKS.md, from its stored result."""
    s, sizes, mix = out["summary"], out["sizes"], out["summary"]["mix"]
    keyed, history = (out["batch"][n] for n in ("bench_keyed_ordered", "bench_history"))
    def changed(run: dict) -> str:
        metrics = (run.get("commits") or [{}])[-1].get("metrics", {})
        return " / ".join(f"{metrics[f'numTargetRows{n}']:,}" if f"numTargetRows{n}" in metrics else "–"
                          for n in ("Inserted", "Updated", "Deleted"))

    rows = "\n".join(
        f"| {label} | {run['seconds']} | {run.get('tree_cpu_seconds', '–')} | {changed(run)} |"
        for label, run in (("keyed (`order_by`, `delete_field`)", keyed), ("the same with `history: scd2`", history)))
    return (f"{TITLE}\n\n`make bench-history` (bench/history_cost.py), {out['date']}, "
            f"{out['machine'].get('cpu_model', '?')}: {sizes['changes']:,} changes ({mix.get('upserts', 0):,} "
            f"upserts, {mix.get('deletes', 0):,} ordered deletes, {mix.get('late', 0):,} of them late) over "
            f"{2 * sizes['keys']:,} keys into tables that start with {sizes['keys']:,} rows, the same topic read by a "
            f"keyed pipeline and by the same pipeline with `history: scd2`, one batch each, timed as `tidemark run` "
            f"runs it (plan call and spark-submit). Reported, no target (issue 59 part 5). The history table took "
            f"**x{s['history_over_keyed']}** the keyed table's time ({s['history_seconds']} s against "
            f"{s['keyed_seconds']} s). It then held {s['check']['history_versions']:,} versions, "
            f"{s['check']['history_current']:,} of them current: the keyed table's rows, every column compared "
            f"(checked by the run).\n\n| table | seconds | CPU seconds | rows inserted / updated / deleted |\n"
            f"|---|---|---|---|\n{rows}\n\nWhere the difference goes: the phase that reads, reduces and MERGEs took "
            f"{phase(history)} s against {phase(keyed)} s, and of it the MERGE (its executionTimeMs) "
            f"{merge_seconds(history)} s against {merge_seconds(keyed)} s. The rest is the rebuild: a keyed batch "
            f"reduces the changes to the newest per key ({source_rows(keyed):,} rows into its MERGE), a history batch "
            f"keeps every change as a version ({source_rows(history):,} rows into its MERGE), and it reads the "
            f"table's versions of the keys it touches and their kept deletes, ranks every event per key and ordering "
            f"and orders each key's events to give each version its interval (docs/DESIGN.md, *History tables*).\n")


def phase(run: dict) -> object:
    return (run.get("phases") or {}).get("read_tally_check_merge", "–")


def merge_seconds(run: dict) -> object:
    metrics = (run.get("commits") or [{}])[-1].get("metrics", {})
    return round(metrics["executionTimeMs"] / 1000, 1) if "executionTimeMs" in metrics else "–"


def source_rows(run: dict) -> int:
    return (run.get("commits") or [{}])[-1].get("metrics", {}).get("numSourceRows", 0)


def main() -> None:
    if "--page" in sys.argv[1:]:
        from bench.page import write_stored

        write_stored(RESULT_FILE, "history-table", TITLE, section, "| (no target rows)", lambda out: [])
        return
    stack.log_as("bench-history")
    settings = stack.own_settings("history")
    sizes = Sizes.from_env()
    stack.reset_work(settings)
    stack.configure_environment(settings)
    stack.train_class_data(settings)
    topic = f"history_changes_{os.getpid()}"
    data.create_topic(settings, topic, settings.partitions)
    out: dict = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "machine": machine.describe(),
                 "load_at_start": machine.load(), "sizes": {"keys": sizes.keys, "changes": sizes.changes}}
    log.info("producing %d starting rows ...", sizes.keys)
    out["starting_rows"] = produce(settings, topic, starting_rows(sizes.keys))
    configs = {name: stack.add_pipeline(settings, name, topic, value_format="json", value_schema=VALUE_SCHEMA,
                                        keyed=keyed)
               for name, keyed in (("bench_keyed_ordered", KEYED), ("bench_history", {**KEYED, "history": "scd2"}))}
    out["first_batch"] = {name: run_tidemark(settings, sizes, config, sizes.keys, f"{name}'s first batch")
                          for name, config in configs.items()}
    mix: dict = {}
    log.info("producing %d changes ...", sizes.changes)
    out["changes"] = {**produce(settings, topic, changes(sizes, mix)), "mix": mix}
    out["batch"] = {name: run_tidemark(settings, sizes, config, sizes.changes, f"{name}'s batch of changes")
                    for name, config in configs.items()}
    out["check"] = current_versions_match(configs["bench_keyed_ordered"].table_uri,
                                          configs["bench_history"].table_uri)
    if not out["check"]["equal"]:
        raise SystemExit(f"the history table's current versions differ from the keyed table: {out['check']}")
    keyed, history = (out["batch"][n]["seconds"] for n in ("bench_keyed_ordered", "bench_history"))
    out["summary"] = {"keyed_seconds": keyed, "history_seconds": history, "history_over_keyed": round(
        history / keyed, 3), "first_batch": {n: r["seconds"] for n, r in out["first_batch"].items()},
        "check": out["check"], "mix": mix}
    out["load_at_end"] = machine.load()
    save_result(RESULT_FILE, out)
    json.dump(out["summary"], sys.stdout, indent=2, default=str)
    print()


if __name__ == "__main__":
    main()
