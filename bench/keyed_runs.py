"""The contenders of `make bench-keyed` and one run of the benchmark's parts (compare, replay, growth): Tidemark's
keyed batch as `tidemark run` submits it, and AvailableNow with an idempotent `foreachBatch` MERGE."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import shutil
import subprocess
import time
from pathlib import Path

from bench import contenders, machine, stack
from bench.keyed_data import (
    JOB,
    KEYED,
    KEYED_PHASES,
    LABELS,
    NOW,
    TIDEMARK,
    VALUE_SCHEMA,
    Changes,
    Sizes,
    initial_rows,
    produce,
)
from bench.keyed_tables_check import (
    check_reference,
    commits_since,
    copy_table,
    event_log,
    fingerprint,
    row_hashes,
    rows_changed,
    table_version,
    with_event_log,
)
from bench.knobs import BenchSettings
from bench.measure import check, run_measured

log = logging.getLogger("bench")

# --- the contenders ------------------------------------------------------------------------------

def add_pipeline(settings: BenchSettings, name: str, topics: list[str]):
    return stack.add_pipeline(settings, name, topics[0], topics=topics, value_format="json",
                              value_schema=VALUE_SCHEMA, keyed=KEYED)


def run_tidemark(settings: BenchSettings, sizes: Sizes, config, expect: int | None, what: str) -> dict:
    """One batch of ``config`` as `tidemark run` runs it (the plan call, then the ingest job's spark-submit),
    measured, with the commits it made and the job's phases and Spark actions."""
    from tidemark.settings import spark_jars
    from tidemark_spark import class_data

    existed = Path(config.table_uri).exists()
    version = table_version(config.table_uri) if existed else -1
    load = machine.load()
    plan, plan_seconds = stack.plan_batch(settings, config, expect=expect)
    command, env = stack.ingest_command(settings, plan)
    events = settings.work / "events" / f"{config.name}-{plan.batch_id}-{int(time.time())}"
    if sizes.event_log:
        command = with_event_log(command, events)
    sharing = class_data.prepare(env, settings.master, {}, spark_jars())
    began = time.time()
    measured = run_measured(command, sharing.environment(env))
    sharing.finish(measured.returncode)
    check(measured, what)
    contenders.keep_log(settings, f"{config.name}-batch{plan.batch_id}", measured)
    return {"batch_id": plan.batch_id, "offsets": plan.total_offsets, "plan_seconds": round(plan_seconds, 3),
            "submit_seconds": round(measured.wall_seconds, 3),
            "seconds": round(plan_seconds + measured.wall_seconds, 3),
            "timed": "plan call + spark-submit wall time", **measured.summary(),
            "phases": contenders.ingest_phases(measured.output, began, measured.wall_seconds, KEYED_PHASES),
            "commits": commits_since(config.table_uri, version) if existed else [],
            "spark": event_log(events) if sizes.event_log else None, "load_before": load, **machine.load()}


def run_available_now(settings: BenchSettings, sizes: Sizes, topic: str, table: Path, starting: dict,
                      name: str) -> dict:
    """bench/jobs/keyed_merge.py on ``table`` (a copy of the starting table), from the offsets ``starting``."""
    from tidemark.formats.record_format import RecordFormat
    from tidemark.formats.records import parse_field_type

    ddl = RecordFormat("json", tuple(parse_field_type(n, t) for n, t in VALUE_SCHEMA.items())).spark_ddl()
    checkpoint = stack.fresh_folder(settings.work / "checkpoints" / name)
    version = table_version(str(table))
    load = machine.load()
    command = [*stack.spark_submit_base(settings, f"bench-{name.replace('_', '-')}"), JOB, "--topic", topic,
               "--table", str(table), "--checkpoint", str(checkpoint), "--schema", ddl, "--key", "id",
               "--delete-field", KEYED["delete_field"], "--delete-value", KEYED["delete_values"][0],
               "--starting-offsets", json.dumps({topic: {str(p): o for p, o in starting.items()}}),
               "--app-id", f"bench_{name}"]
    events = settings.work / "events" / f"{name}-{int(time.time())}"
    if sizes.event_log:
        command = with_event_log(command, events)
    measured = check(run_measured(command, stack.spark_env(settings)), f"the {name} job")
    contenders.keep_log(settings, name, measured)
    return {"seconds": round(measured.wall_seconds, 3), "timed": "spark-submit wall time", **measured.summary(),
            "commits": commits_since(str(table), version), "spark": event_log(events) if sizes.event_log else None,
            "load_before": load, **machine.load()}


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def _load() -> dict:
    return {**machine.load(), "uptime": _uptime()}


def compare(tidemark: dict, available_now: dict) -> None:
    if tidemark != available_now:
        raise RuntimeError(f"the tables differ: Tidemark's {tidemark}, AvailableNow's {available_now}")


class Run:
    """One run of the part, step by step, its state in the work folder (``partial.json``) after every step, so
    that BENCH_KEYED_RESUME=1 continues where a stopped run left off: a finished step is kept, the step it was
    in is done again from the copies of the starting tables and the ledger."""

    def __init__(self, settings: BenchSettings, sizes: Sizes, parts: tuple[str, ...], resume: bool) -> None:
        self.settings, self.sizes, self.parts = settings, sizes, parts
        self.path = settings.work / "partial.json"
        self.saved = settings.work / "saved"
        self.out: dict = json.loads(self.path.read_text()) if resume and self.path.exists() else {}
        if self.out and self.out.get("sizes") != dataclasses.asdict(sizes):
            raise SystemExit(f"BENCH_KEYED_RESUME: the stopped run in {settings.work} had other sizes "
                             f"({self.out.get('sizes')}); run without BENCH_KEYED_RESUME")
        if not self.out:
            self.out = {"sizes": dataclasses.asdict(sizes), "state": {"done": []}, "backlog": {}, "setup": {},
                        "parts": {}, "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                        "load_at_start": _load()}
        self.state = self.out["state"]
        self.changes = Changes(sizes)

    # -- bookkeeping

    def keep(self) -> None:
        self.path.write_text(json.dumps(self.out, indent=2, default=str) + "\n")

    def done(self, step: str) -> bool:
        return step in self.state["done"]

    def mark(self, step: str) -> None:
        self.state["done"].append(step)
        self.keep()

    def part_started(self, part: str) -> None:
        self.out["parts"].setdefault(part, {"load_at_start": _load(), "started": time.time()})
        self.keep()

    def part_done(self, part: str) -> None:
        meta = self.out["parts"][part]
        meta |= {"date": dt.date.today().isoformat(), "load_at_end": _load(),
                 "minutes": round((time.time() - meta["started"]) / 60, 1)}
        self.mark(f"part:{part}")

    def pipeline(self, name: str, topics: list[str]):
        return add_pipeline(self.settings, name, topics)

    def restore(self) -> None:
        """Every starting table and the ledger back to the copies (nothing else runs meanwhile)."""
        for name, uri in self.state["tables"].items():
            copy_table(self.saved / name, uri)
        copy_table(self.saved / "_tidemark", self.settings.lake / "_tidemark")
        self.state["tables_state"] = {name: "saved" for name in self.state["tables"]}
        self.keep()

    def table_state(self, name: str, value: str | None = None) -> str:
        if value is not None:
            self.state.setdefault("tables_state", {})[name] = value
            self.keep()
        return self.state.get("tables_state", {}).get(name, "unknown")

    # -- the steps

    def run(self) -> dict:
        sizes, st = self.sizes, self.state
        small = bool({"compare", "replay"} & set(self.parts))
        big = "growth" in self.parts and sizes.big_rows > 0
        if not self.done("topics"):
            self.topics(big)
        changes_topic, extra_topic = st["changes_topic"], st.get("extra_topic")
        p1 = self.pipeline("bench_keyed", [changes_topic]) if small else None
        p5 = self.pipeline("bench_keyed_big", [changes_topic, extra_topic]) if big else None
        if not self.done("setup"):
            self.setup(p1, p5)
        if not self.done("changes"):
            self.produce_changes(changes_topic)
        else:
            for _ in self.changes.records():  # the reference again, from the same seed
                pass
        if "compare" in self.parts and not self.done("part:compare"):
            self.compare(p1, changes_topic)
        if "replay" in self.parts and not self.done("part:replay"):
            self.replay(p1)
        if p5 is not None and not self.done("part:growth"):
            self.growth(p5, changes_topic)
        return self.result()

    def topics(self, big: bool) -> None:
        from bench import data

        s, sizes, st = self.settings, self.sizes, self.state
        suffix = f"{int(time.time()) % 10**6}"
        st["changes_topic"] = changes_topic = f"keyed_changes_{suffix}"
        backlog = self.out["backlog"] = {"partitions": s.partitions, "topics": {"changes": changes_topic}}
        data.create_topic(s, changes_topic, s.partitions)
        log.info("producing %d starting rows ...", sizes.table_rows)
        backlog["starting_rows"] = produce(s, changes_topic, initial_rows(range(sizes.table_rows)))
        st["starting_offsets"] = backlog["starting_rows"]["end_offsets"]
        if big:
            st["extra_topic"] = extra_topic = f"keyed_extra_{suffix}"
            backlog["topics"]["extra"] = extra_topic
            data.create_topic(s, extra_topic, s.partitions)
            log.info("producing %d more rows for the big table ...", sizes.big_rows - sizes.table_rows)
            backlog["extra_rows"] = produce(s, extra_topic, initial_rows(range(sizes.table_rows, sizes.big_rows)))
        self.mark("topics")

    def setup(self, p1, p5) -> None:
        """The pipelines' first batches create the starting tables; then the tables and the ledger are copied."""
        tables = {}
        for key, config, rows in (("small", p1, self.sizes.table_rows), ("big", p5, self.sizes.big_rows)):
            if config is None:
                continue
            if f"{key}_table" not in self.out["setup"]:
                log.info("the first batch of %s creates the %d-row table ...", config.name, rows)
                self.out["setup"][f"{key}_table"] = run_tidemark(self.settings, self.sizes, config, rows,
                                                                  f"the first batch ({rows:,} rows)")
                self.keep()
            if (found := stack.table_count(config.table_uri)) != rows:
                raise RuntimeError(f"the {key} starting table holds {found:,} rows, expected {rows:,}")
            tables[key] = config.table_uri
        if p5 is not None and "big_append" not in self.out["setup"]:
            self.out["setup"]["big_append"] = self.append_of(p5)
            self.keep()
        shutil.rmtree(self.saved, ignore_errors=True)
        self.saved.mkdir(parents=True)
        for name, uri in tables.items():
            copy_table(uri, self.saved / name)
        copy_table(self.settings.lake / "_tidemark", self.saved / "_tidemark")
        self.state["tables"] = tables
        self.state["tables_state"] = {name: "saved" for name in tables}
        self.mark("setup")

    def append_of(self, p5) -> dict:
        """The big table's rows (inserts only: each key once) written by a plain pipeline's first batch over the same
        topics, before the changes are produced: what the keyed table's first batch (``setup.big_table``, its
        reduction to the newest change per key, then an append) is compared with. Its table is dropped after."""
        config = stack.add_pipeline(self.settings, "bench_keyed_append", p5.topics[0], topics=list(p5.topics),
                                    value_format="json", value_schema=VALUE_SCHEMA)
        log.info("an append of the same %d rows by a plain pipeline ...", self.sizes.big_rows)
        row = run_tidemark(self.settings, self.sizes, config, self.sizes.big_rows,
                           f"the append of the same {self.sizes.big_rows:,} rows")
        if (found := stack.table_count(config.table_uri)) != self.sizes.big_rows:
            raise RuntimeError(f"the plain pipeline's table holds {found:,} rows, expected {self.sizes.big_rows:,}")
        stack.remove_pipeline(self.settings, config)
        return row

    def produce_changes(self, topic: str) -> None:
        from bench import data

        held = data.end_offsets(self.settings, topic)
        if held != {int(p): o for p, o in self.state["starting_offsets"].items()}:
            raise SystemExit(f"topic {topic} holds part of the changes from a stopped run: run again without "
                             f"BENCH_KEYED_RESUME")
        log.info("producing %d changes over %d keys ...", self.sizes.changes, self.sizes.keys)
        self.out["backlog"]["changes"] = produce(self.settings, topic, self.changes.records())
        self.out["backlog"]["mix"] = self.changes.described()
        log.info("changes: %s", self.out["backlog"]["mix"]["counts"])
        self.mark("changes")

    def apply_changes(self, p1) -> dict:
        """The small table from its copy, then Tidemark's batch of the changes (``compare``'s contender)."""
        if self.table_state("small") != "saved":
            self.restore()
        self.table_state("small", "unknown")
        row = run_tidemark(self.settings, self.sizes, p1, self.sizes.changes, "the Tidemark keyed batch")
        self.table_state("small", "changed")
        return row

    def compare(self, p1, topic: str) -> None:
        self.part_started("compare")
        runs = self.out.setdefault("runs", [])
        names = (TIDEMARK, NOW)
        for rep in range(1, self.sizes.repeats + 1):
            if self.done(f"compare:{rep}"):
                continue
            runs[:] = [r for r in runs if r["round"] != rep]
            for name in names if rep % 2 else names[::-1]:
                log.info("round %d/%d: %s ...", rep, self.sizes.repeats, LABELS[name])
                if name == TIDEMARK:
                    row = self.apply_changes(p1)
                    uri = p1.table_uri
                else:
                    table = self.settings.lake / f"available_now_{rep}"
                    copy_table(self.saved / "small", table)
                    row = run_available_now(self.settings, self.sizes, topic, table, self.state["starting_offsets"],
                                            f"available_now_merge_{rep}")
                    uri = str(table)
                row |= {"contender": name, "round": rep, "fingerprint": fingerprint(uri),
                        "changes_per_second": round(self.sizes.changes / row["seconds"])}
                runs.append(row)
                self.keep()
                log.info("round %d: %s: %.1f s (load %.2f)", rep, name, row["seconds"], row["load_1m"])
            mine = {r["contender"]: r for r in runs if r["round"] == rep}
            compare(mine[TIDEMARK]["fingerprint"], mine[NOW]["fingerprint"])
            self.out["reference"] = check_reference(p1.table_uri, self.changes, self.sizes.table_rows,
                                                    self.sizes.table_rows)
            shutil.rmtree(self.settings.lake / f"available_now_{rep}", ignore_errors=True)
            self.mark(f"compare:{rep}")
        self.part_done("compare")

    def replay(self, p1) -> None:
        """The pipeline back to the earliest offsets (an audited reset), then one batch over the whole range."""
        from tidemark.batch.reset import ResetRequest
        from tidemark.connections import EnvironmentResolver
        from tidemark.run import PipelineRun

        self.part_started("replay")
        first = None
        if self.table_state("small") != "changed":
            log.info("the changes, once, before the replay ...")
            first = self.apply_changes(p1)
            self.out["reference"] = check_reference(p1.table_uri, self.changes, self.sizes.table_rows,
                                                    self.sizes.table_rows)
        before, version = row_hashes(p1.table_uri, with_bookkeeping=True), table_version(p1.table_uri)
        self.table_state("small", "unknown")
        PipelineRun.open(p1, EnvironmentResolver()).reset(ResetRequest(
            "to-earliest", execute=True, reason="bench/keyed_changes.py: a replay of the whole range", owner="bench"))
        offsets = self.sizes.table_rows + self.sizes.changes
        log.info("the replay of the whole range (%d offsets) ...", offsets)
        replay = run_tidemark(self.settings, self.sizes, p1, offsets, "the replay")
        after = row_hashes(p1.table_uri, with_bookkeeping=True)
        self.out["replay"] = replay | {"rows_changed": rows_changed(before, after),
                                       "versions_added": table_version(p1.table_uri) - version,
                                       **({"changes_applied_first": first} if first else {})}
        self.table_state("small", "replayed")
        self.part_done("replay")

    def growth(self, p5, topic: str) -> None:
        self.part_started("growth")
        growth = self.out.setdefault("growth", {})
        if not self.done("growth:tidemark"):
            if self.table_state("big") != "saved":
                self.restore()
            self.table_state("big", "unknown")
            log.info("the same changes into the %d-row table ...", self.sizes.big_rows)
            row = run_tidemark(self.settings, self.sizes, p5, self.sizes.changes,
                               "the Tidemark keyed batch (big table)")
            self.table_state("big", "changed")
            row["fingerprint"] = fingerprint(p5.table_uri)
            row["reference"] = check_reference(p5.table_uri, self.changes, self.sizes.big_rows, self.sizes.big_rows)
            growth["tidemark"] = row
            self.mark("growth:tidemark")
        if self.sizes.big_baseline and not self.done("growth:available_now"):
            table = self.settings.lake / "available_now_big"
            copy_table(self.saved / "big", table)
            row = run_available_now(self.settings, self.sizes, topic, table, self.state["starting_offsets"],
                                    "available_now_merge_big")
            row["fingerprint"] = fingerprint(str(table))
            compare(growth["tidemark"]["fingerprint"], row["fingerprint"])
            growth["available_now"] = row
            shutil.rmtree(table, ignore_errors=True)
            self.mark("growth:available_now")
        self.part_done("growth")

    def result(self) -> dict:
        s = self.settings
        out = {k: v for k, v in self.out.items() if k not in ("state", "sizes")}
        return out | {"date": dt.date.today().isoformat(), "machine": machine.describe(), "load_at_end": _load(),
                      "settings": {**dataclasses.asdict(self.sizes), "partitions": s.partitions, "master": s.master,
                                   "driver_memory": s.driver_memory, "value_schema": VALUE_SCHEMA, "keyed": KEYED,
                                   "parts": list(self.parts)}}
