"""The ``tidemark`` command line. Reads the same pipeline files and Airflow Connections as the DAGs.

    tidemark pipelines list
    tidemark offsets show PIPELINE [--json]
    tidemark lag PIPELINE
    tidemark run PIPELINE
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence

from tidemark.errors import TidemarkError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tidemark", description="Exactly-once Kafka -> Delta ingestion.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    pipelines = commands.add_parser("pipelines", help="the configured pipelines")
    pipelines_cmd = pipelines.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = pipelines_cmd.add_parser("list", help="list pipelines and any broken pipeline files")
    listing.add_argument("--json", action="store_true", help="machine-readable output")

    offsets = commands.add_parser("offsets", help="committed offsets of a pipeline")
    offsets_cmd = offsets.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = offsets_cmd.add_parser("show", help="committed offset, latest offset and lag per partition")
    show.add_argument("pipeline")
    show.add_argument("--json", action="store_true", help="a JSON list, one object per partition")

    lag = commands.add_parser("lag", help="total and per-partition lag of a pipeline")
    lag.add_argument("pipeline")

    run = commands.add_parser("run", help="run one batch now without Airflow: plan, Spark ingest, report")
    run.add_argument("pipeline")
    return parser


def _kafka_properties(config) -> dict[str, str]:
    from tidemark_airflow.connections import kafka_properties

    return kafka_properties(config.kafka_conn_id, config.name)


def _table(rows: list[dict], columns: Sequence[str]) -> str:
    cells = [[("-" if r[c] is None else str(r[c])) for c in columns] for r in rows]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def cmd_pipelines_list(args: argparse.Namespace) -> int:
    from tidemark.config import load_all

    good, bad = load_all()
    if args.json:
        print(json.dumps({"pipelines": [{"name": c.name, "topics": c.topics, "table": c.table_uri,
                                         "dag_id": c.dag_id} for c in good.values()],
                          "errors": {path: str(e) for path, e in bad.items()}}, indent=2))
    else:
        rows = [{"name": c.name, "topics": ",".join(c.topics), "table": c.table_uri, "dag": c.dag_id}
                for c in good.values()]
        print(_table(rows, ["name", "topics", "table", "dag"]) if rows else "no pipelines configured")
        for error in bad.values():
            print(f"broken: {error}", file=sys.stderr)
    return 1 if bad else 0


def cmd_offsets_show(args: argparse.Namespace) -> int:
    from tidemark.config import find_pipeline
    from tidemark.runs import partition_status

    config = find_pipeline(args.pipeline)
    rows = partition_status(config, _kafka_properties(config))
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(_table(rows, ["topic", "partition", "committed_offset", "latest_offset", "lag", "last_batch_id"]))
    return 0


def cmd_lag(args: argparse.Namespace) -> int:
    from tidemark.config import find_pipeline
    from tidemark.runs import partition_status

    config = find_pipeline(args.pipeline)
    rows = partition_status(config, _kafka_properties(config))
    print(_table(rows, ["topic", "partition", "lag"]))
    print(f"total lag of '{config.name}': {sum(r['lag'] or 0 for r in rows)}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from tidemark.config import find_pipeline
    from tidemark.runs import mirror_to_consumer_group, partition_status, prepare_batch
    from tidemark.submit import run_ingest_job
    from tidemark_airflow.connections import spark_master

    config = find_pipeline(args.pipeline)
    properties = _kafka_properties(config)
    plan = prepare_batch(config, properties)
    if plan.is_empty:
        print(f"pipeline '{config.name}': nothing new; no Spark job started")
        mirror_to_consumer_group(config, properties)
        return 0
    print(f"pipeline '{config.name}': batch {plan.batch_id} frozen, {plan.total_offsets} offsets over "
          f"{len(plan.ranges)} partition(s){' (recovered)' if plan.recovered else ''}; starting Spark", flush=True)
    code = run_ingest_job(plan, properties, spark_master(config.spark_conn_id, config.name), config.isolation_level,
                          config.spark_conf)
    if code != 0:
        print(f"tidemark: error: pipeline '{config.name}': the ingest job for batch {plan.batch_id} exited with "
              f"{code}; nothing is lost: the next run executes the same frozen ranges again", file=sys.stderr)
        return 1
    mirror_to_consumer_group(config, properties)
    rows = partition_status(config, properties)
    print(_table(rows, ["topic", "partition", "committed_offset", "latest_offset", "lag", "last_batch_id"]))
    return 0


HANDLERS = {("run", None): cmd_run, ("pipelines", "list"): cmd_pipelines_list, ("offsets", "show"): cmd_offsets_show,
            ("lag", None): cmd_lag}


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    handler = HANDLERS[(args.command, getattr(args, "action", None))]
    try:
        return handler(args)
    except TidemarkError as exc:
        print(f"tidemark: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
