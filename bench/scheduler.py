"""The whole DAG under a running Airflow, as users run it: `scripts/airflow.sh up` (api-server, scheduler
with the LocalExecutor, dag-processor and triggerer on a private PostgreSQL) against the benchmark's
broker and backlog, each batch by spark-submit (`local[2]`, 1g, as `make bench`'s job; `make airflow`'s
default since 2026-11-28 is the warm path, which the fleet's part measures).

Each repetition triggers one pipeline's DAG through the REST API (one pipeline per repetition, all on
the backlog's topic, written before Airflow starts so the dag-processor has parsed them) and waits for
it: the run's wall time as Airflow records it (start to end), the time from the trigger to the end,
and every task's time. In the same repetition, before or after it (alternating), the job alone (the
`tidemark run` path: plan, then the ingest job's spark-submit) reads the same backlog on a pipeline of
its own, with the same Airflow running beside it: the ratio compares the two under the same load.
Then each DAG again with nothing new (an empty run): its task times and the JVMs started under the
scheduler's process tree (sampled every 0.1 s), which must be none.
"""

from __future__ import annotations

import logging

from bench import contenders, stack
from bench.airflow_services import Airflow
from bench.knobs import BenchSettings
from bench.measure import TreeSampler

log = logging.getLogger("bench")


def run(settings: BenchSettings, topic: str, records: int) -> dict:
    """The DAG under a running scheduler, ``settings.repeats`` times on the backlog, then empty runs."""
    configs = [stack.add_pipeline(settings, f"bench_sched_{rep}", topic) for rep in range(1, settings.repeats + 1)]
    dag_ids = [stack.dag_id(c.name) for c in configs]
    runs, empty, jobs = [], [], []
    with Airflow(settings) as airflow:
        airflow.wait_for_dags(dag_ids)
        for rep, (config, dag_id) in enumerate(zip(configs, dag_ids, strict=True), start=1):
            if rep % 2 == 0:
                jobs.append(_job_alone(settings, topic, records, rep))
            log.info("repetition %d/%d: the DAG under the scheduler ...", rep, settings.repeats)
            result = airflow.run_dag(dag_id)
            found = stack.table_count(config.table_uri)
            if found != records:
                raise RuntimeError(f"{dag_id}: the output holds {found} rows, expected {records}")
            result.update(repetition=rep, records=records,
                          records_per_second=round(records / result["run_seconds"], 1),
                          # the scheduler's hand-overs: the run's time in none of its tasks
                          between_tasks_seconds=round(result["run_seconds"] - sum(
                              t["seconds"] or 0 for t in result["tasks"].values()), 3))
            runs.append(result)
            log.info("repetition %d/%d: DAG run %.1f s (trigger to end %.1f s), tasks %s, between them %.1f s", rep,
                     settings.repeats, result["run_seconds"], result["trigger_to_end_seconds"],
                     {k: v["seconds"] for k, v in result["tasks"].items()}, result["between_tasks_seconds"])
            sampler = TreeSampler(airflow.scheduler_pid())  # the LocalExecutor's workers and their task processes
            sampler.start()
            try:
                nothing = airflow.run_dag(dag_id)
            finally:
                sampler.stop()
            if nothing["tasks"].get("ingest", {}).get("state") != "skipped":
                raise RuntimeError(f"{dag_id}: the empty run's ingest task was {nothing['tasks'].get('ingest')}")
            nothing.update(repetition=rep, jvms_started=len(sampler.jvm_pids),
                           task_seconds=round(sum(t["seconds"] or 0 for t in nothing["tasks"].values()), 3))
            empty.append(nothing)
            log.info("repetition %d/%d: empty run %.1f s, task time %.1f s, %d JVM(s)", rep, settings.repeats,
                     nothing["run_seconds"], nothing["task_seconds"], nothing["jvms_started"])
            stack.remove_pipeline(settings, config)
            if rep % 2:
                jobs.append(_job_alone(settings, topic, records, rep))
        up_seconds = airflow.up_seconds
    return {"executor": "LocalExecutor", "database": "PostgreSQL", "airflow_up_seconds": up_seconds,
            "launcher": f"spark-submit, {settings.master}, driver memory {settings.driver_memory}",
            "runs": runs, "empty_runs": empty, "job_alone": jobs}


def _job_alone(settings: BenchSettings, topic: str, records: int, rep: int) -> dict:
    log.info("repetition %d/%d: the job alone, Airflow running beside it ...", rep, settings.repeats)
    result = contenders.tidemark_job(settings, topic, records, rep, name="bench_sched_job")
    log.info("repetition %d/%d: the job alone: %.1f s", rep, settings.repeats, result.seconds)
    return {"repetition": rep, "seconds": round(result.seconds, 3), "plan_seconds": result.extra["plan_seconds"],
            **result.measurement.summary()}
