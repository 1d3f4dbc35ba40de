"""An example of a DAG scheduled on a Tidemark table: it runs after the ingest DAG of a pipeline
commits a batch (an event of the table's asset, ``tidemark/<pipeline>``) and logs what arrived: the
batch, its offset ranges, its record and dead-letter counts and the Delta version holding it.

Copy it for your own pipelines. Here the upstream pipeline is the demo's ``orders``, or the one named
by TIDEMARK_EXAMPLE_UPSTREAM; without such a pipeline file there is no example DAG. Parsing reads the
pipeline files and nothing else. The schedule names the asset itself (``table_asset``), not
``Asset.ref(name=...)``: Airflow 3.3's scheduler hands a run triggered through a name reference none
of the events that triggered it."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from airflow.sdk import DAG, task

from tidemark.config.pipeline import load_all
from tidemark_airflow.assets import table_asset
from tidemark_airflow.dag_files import dag_file_pipelines

UPSTREAM = os.environ.get("TIDEMARK_EXAMPLE_UPSTREAM", "orders")
upstream = load_all(dag_file_pipelines(Path(__file__).parent / "pipelines"))[0].get(UPSTREAM)

if upstream is not None:
    with DAG(dag_id=f"tidemark_example_downstream__{UPSTREAM}", schedule=[table_asset(upstream)], catchup=False,
             tags=["tidemark", "example"],
             doc_md=f"Runs when pipeline `{UPSTREAM}` commits a batch to its table and logs what arrived."):

        @task
        def what_arrived(triggering_asset_events=None) -> list[dict]:
            """One entry per batch committed since this DAG last ran (the scheduler may fold several
            asset events into one run)."""
            batches = []
            for asset, events in (triggering_asset_events or {}).items():
                for event in events:
                    batch = dict(event.extra or {})
                    logging.getLogger("tidemark").info(
                        "%s: batch %s of pipeline '%s' brought %s records and %s dead letters (Delta version %s): %s",
                        getattr(asset, "name", asset), batch.get("batch_id"), batch.get("pipeline"),
                        batch.get("records"), batch.get("dead_letters"), batch.get("delta_version"),
                        ", ".join(f"{r['topic']}:{r['partition']} [{r['start']}, {r['end']})"
                                  for r in batch.get("ranges", [])))
                    batches.append(batch)
            return batches

        what_arrived()
