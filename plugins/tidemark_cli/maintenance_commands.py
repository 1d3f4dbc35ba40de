"""``tidemark maintain PIPELINE [--json]``: the maintenance DAG's task
(``tidemark.operations.table_maintenance.maintain``: OPTIMIZE, VACUUM when ``vacuum_retain`` is set, checkpoints) run
once from a shell, for pipelines maintained outside Airflow (cron, another scheduler) or between two runs of the DAG.
The same steps, idempotent, safe while batches commit and while the DAG runs too."""

from __future__ import annotations

import argparse
import json

from tidemark_cli.connection_commands import open_run
from tidemark_cli.exits import EXIT_OK
from tidemark_cli.table_views import render_table

COLUMNS = ["table", "location", "files_before", "files_after", "vacuumed_files", "checkpoint_version"]


def add_parser(commands) -> None:
    maintain = commands.add_parser(
        "maintain", help="OPTIMIZE, VACUUM and checkpoint the pipeline's tables once (what its maintenance DAG does)",
        description="Run the pipeline's table maintenance once, as its maintenance DAG (tidemark_maintenance__<name>) "
                    "does: OPTIMIZE of the output (Z-ordered by maintenance.zorder_by when given) and of the dead "
                    "letters, VACUUM of both and of the ledger when maintenance.vacuum_retain is set, then log "
                    "checkpoints of the three. Needs 'maintenance:' in the pipeline file (optimize_every is only the "
                    "DAG's schedule). Safe while batches commit and while the DAG runs; no Spark, no Kafka.")
    maintain.add_argument("pipeline")
    maintain.add_argument("--json", action="store_true", help="what was done, per table, as JSON")


def rows(report: dict) -> list[dict]:
    """The report of ``maintain``, one row per table, for people."""
    listed = []
    for name in ("output", "dead_letters", "ledger"):
        done = report.get(name) or {}
        optimized = done.get("optimize") or {}
        listed.append({"table": name, "location": done.get("table"), "files_before": optimized.get("files_before"),
                       "files_after": optimized.get("files_after"), "vacuumed_files": done.get("vacuumed_files"),
                       "checkpoint_version": done.get("checkpoint_version")})
    return listed


def cmd_maintain(args: argparse.Namespace) -> int:
    run = open_run(args.pipeline)
    report = run.maintain()
    if args.json:
        print(json.dumps(report, indent=2, default=str))
        return EXIT_OK
    print(render_table(rows(report), COLUMNS))
    print(f"pipeline '{run.name}': maintained ('-': a table that does not exist yet, or a step its maintenance: "
          f"block leaves out)")
    return EXIT_OK
