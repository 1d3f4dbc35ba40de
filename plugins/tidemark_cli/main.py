"""The ``tidemark`` command line. Reads the same pipeline files and Airflow Connections as the DAGs.

    tidemark pipelines list
    tidemark offsets show PIPELINE [--json]
    tidemark offsets history PIPELINE [--json] [--limit N]
    tidemark offsets reset PIPELINE (--to-earliest | --to-latest | --to-offset N | --shift-by N |
                                     --to-datetime T | --by-duration D | --from-file CSV)
                           [--topic T[:P,...]]... [--execute --reason TEXT]
    tidemark lag PIPELINE
    tidemark run PIPELINE

Exit codes, the same for every command:
    0  done
    1  the ingest job of `tidemark run` failed (nothing is lost: the next run executes the same
       frozen batch again)
    2  refused: bad arguments, a broken pipeline file, an unknown pipeline, Kafka unreachable or
       refusing the credentials, another run holding the pipeline... The message says which and
       what to do; nothing was changed
    3  `pipelines list` listed the valid pipelines, but some pipeline files are broken (named on
       stderr)

Connections come from ``AIRFLOW_CONN_<ID>`` variables when set (no Airflow needed), else from
Airflow itself (its secrets backends and metadata DB) when it is installed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence

from tidemark import connections
from tidemark.connections import Connection, EnvironmentResolver
from tidemark.errors import ConfigError, TidemarkError


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

    history = offsets_cmd.add_parser("history", help="the ledger's rows, newest first (batches, resets, ...)")
    history.add_argument("pipeline")
    history.add_argument("--limit", type=int, default=50, help="rows to show (default 50)")
    history.add_argument("--json", action="store_true", help="machine-readable output")

    reset = offsets_cmd.add_parser(
        "reset", help="move the committed position (dry run unless --execute)",
        description="Reset a pipeline's offsets like kafka-consumer-groups --reset-offsets. Dry run by default: "
                    "prints topic, partition, current, new and change and changes nothing.")
    reset.add_argument("pipeline")
    how = reset.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", dest="scenario", action="store_const", const="to-earliest")
    how.add_argument("--to-latest", dest="scenario", action="store_const", const="to-latest")
    how.add_argument("--to-offset", type=int, metavar="N", help="an absolute offset")
    how.add_argument("--shift-by", type=int, metavar="N", help="move by N (negative: back)")
    how.add_argument("--to-datetime", metavar="T", help="ISO-8601, e.g. 2026-11-01T08:00:00Z (UTC if no zone)")
    how.add_argument("--by-duration", metavar="D", help="ISO-8601 duration back from now, e.g. PT30M, P1D")
    how.add_argument("--from-file", metavar="CSV", help="a CSV file of topic,partition,offset lines")
    reset.add_argument("--topic", action="append", metavar="T[:P,...]",
                       help="limit to a topic or some of its partitions (repeatable); default: all")
    reset.add_argument("--execute", action="store_true", help="apply the reset (writes an audited ledger row)")
    reset.add_argument("--reason", help="why; required with --execute")

    lag = commands.add_parser("lag", help="total and per-partition lag of a pipeline")
    lag.add_argument("pipeline")

    run = commands.add_parser("run", help="run one batch now without Airflow: plan, Spark ingest, report")
    run.add_argument("pipeline")
    return parser


EXIT_OK, EXIT_JOB_FAILED, EXIT_REFUSED, EXIT_PARTIAL = 0, 1, 2, 3


class CliConnectionResolver:
    """``AIRFLOW_CONN_<ID>`` from the environment first (fast, no Airflow import); otherwise
    Airflow's own lookup, when Airflow is installed."""

    def __init__(self) -> None:
        self.environment = EnvironmentResolver()

    def get(self, conn_id: str, pipeline: str | None = None) -> Connection:
        if f"AIRFLOW_CONN_{conn_id.upper()}" in os.environ:
            return self.environment.get(conn_id, pipeline)
        try:
            from tidemark_airflow.connections import AirflowConnectionResolver
        except ImportError:
            return self.environment.get(conn_id, pipeline)  # no Airflow here: says how to define it
        connection = AirflowConnectionResolver().get(conn_id, pipeline)
        _logs_to_stderr()  # reading the connection set up Airflow's logging
        return connection

    def mask(self, secrets) -> None:
        """The CLI prints no connection values."""


RESOLVER = CliConnectionResolver()


def _kafka_properties(config) -> dict[str, str]:
    return connections.kafka_properties(RESOLVER, config.kafka_conn_id, config.name)


def _schema_registry(config):
    """The Schema Registry client of an Avro pipeline (None for other formats)."""
    from tidemark.schema_registry import client_for

    avro = "avro" in (config.value_format, config.key_format)
    return client_for(RESOLVER, config.schema_registry_conn_id, config.name) if avro else None


def _pipeline(name: str):
    """A pipeline's configuration, with this process set up for its object store (if any)."""
    from tidemark import storage
    from tidemark.config import find_pipeline

    config = find_pipeline(name)
    storage.configure_for(config.locations, RESOLVER, config.storage_conn_id, config.name)
    return config


def _logs_to_stderr() -> None:
    """Airflow's logging set-up writes log records to stdout, but the CLI's stdout is its output
    (scripts parse ``--json``): warnings, such as kafka-python's notes on SASL, go to stderr."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
            handler.setStream(sys.stderr)
    # kafka-python logs every failed connection attempt (dozens while it retries a bad address or a
    # refused password); the CLI's own error sums them up. TIDEMARK_KAFKA_DEBUG=1 shows them.
    if not os.environ.get("TIDEMARK_KAFKA_DEBUG"):
        logging.getLogger("kafka").propagate = False


def _table(rows: list[dict], columns: Sequence[str]) -> str:
    cells = [[("-" if r[c] is None else str(r[c])) for c in columns] for r in rows]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def cmd_pipelines_list(args: argparse.Namespace) -> int:
    from tidemark.config import load_all
    from tidemark_airflow.naming import ingest_dag_id

    good, bad = load_all()
    if args.json:
        print(json.dumps({"pipelines": [{"name": c.name, "topics": c.topics, "topic_pattern": c.topic_pattern,
                                         "table": c.table_uri, "dag_id": ingest_dag_id(c.name)}
                                        for c in good.values()],
                          "errors": {path: str(e) for path, e in bad.items()}}, indent=2))
    else:
        rows = [{"name": c.name, "topics": c.topics_label, "table": c.table_uri, "dag": ingest_dag_id(c.name)}
                for c in good.values()]
        print(_table(rows, ["name", "topics", "table", "dag"]) if rows else "no pipelines configured")
        for error in bad.values():
            print(f"broken: {error}", file=sys.stderr)
    return EXIT_PARTIAL if bad else EXIT_OK


def cmd_offsets_show(args: argparse.Namespace) -> int:
    from tidemark.batch import partition_status

    config = _pipeline(args.pipeline)
    rows = partition_status(config, _kafka_properties(config))
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(_table(rows, ["topic", "partition", "committed_offset", "latest_offset", "lag", "last_batch_id"]))
    return 0


def cmd_lag(args: argparse.Namespace) -> int:
    from tidemark.batch import partition_status

    config = _pipeline(args.pipeline)
    rows = partition_status(config, _kafka_properties(config))
    print(_table(rows, ["topic", "partition", "lag"]))
    print(f"total lag of '{config.name}': {sum(r['lag'] or 0 for r in rows)}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from tidemark.batch import mirror_to_consumer_group, partition_status, prepare_batch
    from tidemark_spark.ingest import TERMINAL_EXIT_CODE
    from tidemark_spark.submit import run_ingest_job

    config = _pipeline(args.pipeline)
    properties = _kafka_properties(config)
    plan = prepare_batch(config, properties, schemas=_schema_registry(config))
    if plan.is_empty:
        print(f"pipeline '{config.name}': nothing new; no Spark job started")
        mirror_to_consumer_group(config, properties)
        return 0
    print(f"pipeline '{config.name}': batch {plan.batch_id} frozen, {plan.total_offsets} offsets over "
          f"{len(plan.ranges)} partition(s){' (recovered)' if plan.recovered else ''}; starting Spark", flush=True)
    from tidemark import storage

    store = storage.configured()
    code = run_ingest_job(plan, properties, connections.spark_master(RESOLVER, config.spark_conn_id, config.name),
                          config.isolation_level, config.spark_conf,
                          extra_env={storage.ENV_VAR: store.to_json()} if store is not None else None)
    if code != 0:
        cause = (" on an error that a retry cannot fix (its log above says which and how to fix it)"
                 if code == TERMINAL_EXIT_CODE else "")
        print(f"tidemark: error: pipeline '{config.name}': the ingest job for batch {plan.batch_id} exited with "
              f"{code}{cause}; nothing is lost: the next run executes the same frozen ranges again", file=sys.stderr)
        return EXIT_JOB_FAILED
    mirror_to_consumer_group(config, properties)
    rows = partition_status(config, properties)
    print(_table(rows, ["topic", "partition", "committed_offset", "latest_offset", "lag", "last_batch_id"]))
    return 0


def reset_request(args: argparse.Namespace, actor: str):
    from tidemark.batch import ResetRequest

    scenario = args.scenario
    for flag, name in (("to_offset", "to-offset"), ("shift_by", "shift-by"), ("to_datetime", "to-datetime"),
                       ("by_duration", "by-duration"), ("from_file", "from-file")):
        if getattr(args, flag) is not None:
            scenario = name
    file_text = None
    if args.from_file is not None:
        try:
            with open(args.from_file) as handle:
                file_text = handle.read()
        except OSError as exc:
            raise ConfigError(f"cannot read the offsets file {args.from_file}: {exc.strerror}") from None
    return ResetRequest(scenario, tuple(args.topic or ()), offset=args.to_offset, shift=args.shift_by,
                        datetime=args.to_datetime, duration=args.by_duration, offsets_file=file_text,
                        execute=args.execute, reason=args.reason, actor=actor)


def cmd_offsets_reset(args: argparse.Namespace) -> int:
    import getpass
    import socket

    from tidemark.batch import reset_offsets

    config = _pipeline(args.pipeline)
    request = reset_request(args, f"cli:{getpass.getuser()}@{socket.gethostname()}")
    outcome = reset_offsets(config, _kafka_properties(config), request)
    print(_table(outcome.plan.as_table(), ["topic", "partition", "current", "new", "change"]))
    for warning in outcome.plan.warnings:
        print(f"warning: {warning}")
    if outcome.executed:
        print(f"applied: ledger entry {outcome.batch_id} (kind 'reset'); the next run starts from the new offsets")
    else:
        print("DRY RUN: nothing changed. Add --execute --reason '...' to apply.")
    return 0


def cmd_offsets_history(args: argparse.Namespace) -> int:
    from tidemark.batch import history

    listing = history(_pipeline(args.pipeline).name, args.limit)
    if args.json:
        print(json.dumps(listing, indent=2))
    else:
        print(_table(listing, ["batch_id", "kind", "status", "topic", "partition", "start_offset", "end_offset",
                               "record_count", "dag_run_id", "reason", "committed_at"]))
    return 0


HANDLERS = {
    ("pipelines", "list"): cmd_pipelines_list,
    ("offsets", "show"): cmd_offsets_show,
    ("offsets", "history"): cmd_offsets_history,
    ("offsets", "reset"): cmd_offsets_reset,
    ("lag", None): cmd_lag,
    ("run", None): cmd_run,
}


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    handler = HANDLERS[(args.command, getattr(args, "action", None))]
    try:
        return handler(args)
    except TidemarkError as exc:
        print(f"tidemark: error: {exc}", file=sys.stderr)
        return EXIT_REFUSED


if __name__ == "__main__":
    sys.exit(main())
