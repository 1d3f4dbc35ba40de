"""The stream of DAG runs and the fault loop of `make chaos` (see bench/chaos/__init__.py)."""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections import Counter
from pathlib import Path

import yaml

from bench.chaos import chaos_stack, fault_kinds, phase
from bench.chaos.chaos_stack import log
from devkit import localstack

UI_BASE = int(os.environ.get("CHAOS_SPARK_UI_BASE", "32400"))
JSON_SCHEMA = {"order_id": "bigint", "amount": "double"}
# How long (uniform, seconds) a fault waits for a run in the phase it aims at before it lands on whatever runs:
# the pace of the soak.
GAP = tuple(float(x) for x in os.environ.get("CHAOS_GAP", "8,25").split(","))
# Faults that kill a run's task (its Celery worker, its Spark driver) per DAG run at most, so that runs get
# through their later phases between the kills instead of dying in their start-up over and over.
KILLS_PER_RUN = int(os.environ.get("CHAOS_KILLS_PER_RUN", "2"))
KILLS = ("celery_worker", "spark_driver")


class Pipeline:
    def __init__(self, index: int, name: str, partitions: int, json_values: bool) -> None:
        self.index, self.name, self.partitions, self.json_values = index, name, partitions, json_values
        self.ui_port = UI_BASE + 20 * index  # Spark tries the next ports if it is taken
        self.produced: Counter = Counter()
        self.sent = 0
        self.run_id: str | None = None
        self.runs: list[dict] = []

    def config(self) -> dict:
        spark_conf = {"spark.executor.memory": "512m", "spark.executor.cores": "1", "spark.cores.max": "1",
                      "spark.ui.port": str(self.ui_port)}
        config = {"name": self.name, "topics": [self.name], "table": self.name, "schedule": None,
                  "retries": 4, "retry_delay_seconds": 1, "spark_conf": spark_conf}
        if self.json_values:
            config.update(value_format="json", value_schema=JSON_SCHEMA)
        return config


def write_pipelines(folder: Path, count: int) -> list[Pipeline]:
    folder.mkdir(parents=True, exist_ok=True)
    pipelines = []
    for i in range(count):
        p = Pipeline(i, f"chaos_{i}", partitions=3 if i % 2 == 0 else 2, json_values=i % 2 == 0)
        localstack.create_topic(p.name, partitions=p.partitions)
        (folder / f"{p.name}.yaml").write_text(yaml.safe_dump(p.config()))
        pipelines.append(p)
    return pipelines


def produce(p: Pipeline) -> int:
    """Records between runs: 200-3000 order events; on the JSON pipeline about 2 % are not JSON (dead letters)."""
    from kafka import KafkaProducer

    count = random.randint(200, 3000)
    with fault_kinds.kafka_lock:
        producer = KafkaProducer(bootstrap_servers=localstack.bootstrap(), acks="all", retries=0)
        try:
            for i in range(p.sent, p.sent + count):
                value = json.dumps({"order_id": i, "amount": round(i * 1.5, 2)}).encode()
                if p.json_values and random.random() < 0.02:
                    value = b"not json " + str(i).encode()
                partition = i % p.partitions
                producer.send(p.name, key=f"k{i}".encode(), value=value, partition=partition)
                p.produced[partition] += 1
            producer.flush(timeout=120)
        finally:
            producer.close()
    p.sent += count
    return count


class Soak:
    def __init__(self, airflow: chaos_stack.Airflow, pipelines: list[Pipeline], faults_wanted: int, deadline: float,
                 kinds: tuple[str, ...], end: float) -> None:
        """Faults until ``deadline`` (monotonic); runs and the drain until ``end``, then the audit, whatever
        is still running (the result then says it was not drained)."""
        self.airflow, self.pipelines, self.wanted, self.deadline, self.kinds, self.end = (
            airflow, pipelines, faults_wanted, deadline, kinds, end)
        self.drained = False
        self.kills: Counter = Counter()  # run id -> faults of KILLS that hit it
        self.events: list[dict] = []
        self.lock = threading.Lock()
        self.stop_faults = threading.Event()
        self.started = time.monotonic()

    # --- the stream of runs ----------------------------------------------------------------------------
    def step_stream(self, produce_more: bool) -> None:
        for p in self.pipelines:
            if p.run_id is None:
                if produce_more:
                    produce(p)
                    with self.lock:
                        p.run_id = self.airflow.trigger(p.name)
                continue
            run = self.airflow.run(p.name, p.run_id)
            if run["state"] in ("success", "failed"):
                tries = {k: v["try_number"] for k, v in self.airflow.tasks(p.name, p.run_id).items()}
                p.runs.append({"run_id": p.run_id, "state": run["state"], "tries": tries})
                log(f"{p.name} {p.run_id}: {run['state']} (tries {tries}); {p.sent} records produced so far")
                with self.lock:
                    p.run_id = None

    def stream(self) -> None:
        """Runs back to back on every pipeline, records produced before each, until the faults are done."""
        while (not self.stop_faults.is_set() or any(p.run_id for p in self.pipelines)) and \
                time.monotonic() < self.end:
            self.step_stream(produce_more=not self.stop_faults.is_set())
            time.sleep(2)

    def drain(self, rounds: int = 4) -> None:
        """Without faults: a run per pipeline until its committed offsets reach Kafka's end offsets."""
        for _ in range(rounds):
            if time.monotonic() > self.end:
                return
            behind = [p for p in self.pipelines if self._lag(p)]
            if not behind:
                self.drained = True
                return
            log(f"drain: a clean run of {', '.join(p.name for p in behind)}")
            for p in behind:
                if p.run_id is None:
                    p.run_id = self.airflow.trigger(p.name)
            while any(p.run_id for p in behind) and time.monotonic() < self.end:
                self.step_stream(produce_more=False)
                time.sleep(2)

    def _lag(self, p: Pipeline) -> int:
        import subprocess

        home = os.environ["AIRFLOW_LOCAL_HOME"]
        shown = subprocess.run(["bash", "-c", f"source {home}/env.sh && tidemark offsets show {p.name} --json"],
                               capture_output=True, text=True, timeout=300)
        committed = {o["partition"]: o["committed_offset"] for o in json.loads(shown.stdout or "[]")}
        return sum(n - (committed.get(q) or 0) for q, n in localstack.end_offsets(p.name).items())

    # --- the faults ------------------------------------------------------------------------------------
    def targets(self, kind: str) -> list[dict]:
        """Runs in flight, each with its phase now; for a kind that needs a task (a worker, a driver), only
        runs with that task running."""
        found = []
        with self.lock:
            inflight = [(p, p.run_id) for p in self.pipelines if p.run_id]
        for p, run_id in inflight:
            try:
                where = phase.run_phase(self.airflow, p.name, run_id, p.ui_port)
            except Exception:
                continue
            if kind in fault_kinds.NEEDS_TASK and where["task"] not in fault_kinds.NEEDS_TASK[kind]:
                continue
            if kind in KILLS and self.kills[run_id] >= KILLS_PER_RUN:
                continue
            found.append({"pipeline": p.name, "run_id": run_id, "ui_port": p.ui_port, **where})
        return found

    def one_fault(self) -> dict | None:
        """A kind and a phase to aim at, drawn at random; the fault lands as soon as a run is in that phase,
        or, after a random patience (CHAOS_GAP seconds), on whatever a run is doing then."""
        kind = random.choice(self.kinds)
        aim = random.choice(fault_kinds.AIMS.get(kind, phase.PHASES[:6]))
        patience = time.monotonic() + random.uniform(*GAP)
        target = None
        while target is None and not self.stop_faults.is_set() and time.monotonic() < patience + 60:
            candidates = self.targets(kind)
            if hits := [c for c in candidates if c["phase"] == aim]:
                target = random.choice(hits)
            elif candidates and time.monotonic() > patience:
                target = random.choice(candidates)
            elif time.monotonic() > patience and kind in KILLS:
                return None  # every run has had its kills: draw another kind
            else:
                time.sleep(0.5)
        if target is None:
            return None
        at = time.monotonic() - self.started
        others = [c["phase"] for c in candidates if c["pipeline"] != target["pipeline"]]
        detail = fault_kinds.INJECT[kind](target)
        if detail is None:
            return None
        if kind in KILLS:
            self.kills[target["run_id"]] += 1
        return {"n": len(self.events) + 1, "kind": kind, "aimed_at": aim, "phase": target["phase"],
                "step": target["step"], "pipeline": target["pipeline"], "run_id": target["run_id"],
                "task": target["task"], "try": target["try"], "at_s": round(at, 1), "other_runs_phases": others,
                "detail": detail}

    def fault_loop(self) -> None:
        try:
            while len(self.events) < self.wanted and time.monotonic() < self.deadline:
                time.sleep(random.uniform(2, 5))
                try:
                    event = self.one_fault()
                except Exception as exc:  # a fault that could not be injected is not counted
                    log(f"a fault failed to inject: {exc!r}")
                    continue
                if event:
                    self.events.append(event)
                    log(f"fault {event['n']}/{self.wanted}: {event['kind']} in {event['phase']} ({event['step']}) "
                        f"of {event['pipeline']}: {event['detail']}")
        finally:
            self.stop_faults.set()
