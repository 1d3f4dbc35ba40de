"""The ``tidemark`` command line. Reads the same pipeline files and Airflow Connections as the DAGs.

    tidemark pipelines list
    tidemark offsets show PIPELINE [--json]
    tidemark offsets history PIPELINE [--json] [--limit N]
    tidemark offsets reset PIPELINE (--to-earliest | --to-latest | --to-offset N | --shift-by N |
                                     --to-datetime T | --by-duration D | --from-file CSV)
                           [--topic T[:P,...]]... [--execute --reason TEXT]
    tidemark lag PIPELINE
    tidemark run PIPELINE [--take-over --reason TEXT]
    tidemark ledger move PIPELINE --from OLD_LEDGER_URI
    tidemark audit PIPELINE [--json] [--verify-sample N]
    tidemark dead-letters reprocess PIPELINE (--batch N | --all) --reason TEXT
    tidemark maintain PIPELINE [--json]

Exit codes, the same for every command:
    0  done
    1  the ingest job of `tidemark run` failed (nothing is lost: the next run executes the same
       frozen batch again), or the Spark job of `audit --verify-sample` (a JSON, Avro or keyed pipeline)
    2  refused: bad arguments, a broken pipeline file, an unknown pipeline, Kafka unreachable or
       refusing the credentials, another run holding the pipeline... The message says which and
       what to do; nothing was changed
    3  `pipelines list` listed the valid pipelines, but some pipeline files are broken (named on
       stderr)
    4  `audit` found damage: duplicated offsets, committed ranges missing records, rows outside
       every committed range, offsets both in the output and the dead letters, or (with
       --verify-sample) sampled ranges (keyed tables: sampled keys) that differ from what Kafka
       still holds, keys held by more than one row (keyed tables), or keys held although their
       newest change still in Kafka is a delete (keyed tables) (listed in its output)
    70 an unexpected error (a bug, or a failure Tidemark has no message for yet): one line names it and
       the file that holds its trace; `--debug` (on any command) or TIDEMARK_DEBUG=1 prints the trace

Connections come from ``AIRFLOW_CONN_<ID>`` variables when set (no Airflow needed), else from
Airflow's secrets backends when it is installed, else from Airflow's metadata database (a connection
made in the UI), which outside Airflow's services its lookup does not read (``CliConnectionResolver``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import sys
from collections.abc import Sequence

from tidemark.errors import ConfigError, TidemarkError
from tidemark.observe.measurements import hold_warnings
from tidemark_cli import arguments, dead_letter_commands, maintenance_commands
from tidemark_cli.connection_commands import logs_to_stderr as _logs_to_stderr
from tidemark_cli.connection_commands import open_run
from tidemark_cli.exits import (
    DEBUG_VARIABLE,
    EXIT_DAMAGE,
    EXIT_JOB_FAILED,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_REFUSED,
    is_debug,
    report_unexpected,
)
from tidemark_cli.table_views import render_table, summary_line


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
    history.add_argument("--limit", type=arguments.row_count, default=50, help="rows to show (default 50)")
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
    how.add_argument("--to-datetime", type=arguments.date_time, metavar="T",
                     help="ISO-8601, e.g. 2026-11-01T08:00:00Z (UTC if no zone)")
    how.add_argument("--by-duration", type=arguments.duration, metavar="D",
                     help="ISO-8601 duration back from now, e.g. PT30M, PT2H, P1D")
    how.add_argument("--from-file", metavar="CSV", help="a CSV file of topic,partition,offset lines")
    reset.add_argument("--topic", action="append", metavar="T[:P,...]",
                       help="limit to a topic or some of its partitions (repeatable); default: all")
    reset.add_argument("--execute", action="store_true", help="apply the reset (writes an audited ledger row)")
    reset.add_argument("--reason", help="why; required with --execute")

    lag = commands.add_parser("lag", help="total and per-partition lag of a pipeline")
    lag.add_argument("pipeline")

    run = commands.add_parser("run", help="run one batch now without Airflow: plan, Spark ingest, report")
    run.add_argument("pipeline")
    run.add_argument("--take-over", action="store_true",
                     help="take the pending batch over from a run that is dead although its state says otherwise "
                          "(needs --reason, recorded in the ledger)")
    run.add_argument("--reason", help="why the batch is taken over; required with --take-over")

    _add_ledger_and_audit(commands)
    dead_letter_commands.add_parser(commands)
    maintenance_commands.add_parser(commands)
    _allow_debug(parser)
    return parser


def _allow_debug(parser: argparse.ArgumentParser, top: bool = True) -> None:
    """``--debug`` on every command, before or after its words (``tidemark --debug lag x``, ``tidemark lag x
    --debug``): a command's own default is SUPPRESS, so that it does not undo the flag given before it."""
    parser.add_argument("--debug", action="store_true", default=False if top else argparse.SUPPRESS,
                        help=f"on an unexpected error, print its whole trace (also {DEBUG_VARIABLE}=1)")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in dict.fromkeys(action.choices.values()):
                _allow_debug(command, top=False)


def _add_ledger_and_audit(commands) -> None:
    ledger = commands.add_parser("ledger", help="the pipeline's ledger rows as a whole")
    ledger_cmd = ledger.add_subparsers(dest="action", required=True, metavar="ACTION")
    move = _pipeline_command(
        ledger_cmd, "move", "copy a pipeline's rows from the ledger of its old lake root into its current ledger",
        "After the lake root moved (TIDEMARK_LAKE_ROOT, e.g. from the local disk to S3), copy the pipeline's "
        "ledger rows from the old location into the ledger at the new one. The old ledger is left as it was.")
    move.add_argument("--from", dest="source", required=True, metavar="URI",
                      help="the old ledger's location: the old lake root followed by /_tidemark/offsets")
    audit = _pipeline_command(
        commands, "audit", "check the output table against the ledger: every committed offset there exactly once",
        "Check the live output table against the ledger for every kind of damage: duplicated offsets, committed "
        "ranges missing records (counted against the ledger's record counts, dead letters included), rows outside "
        "every committed range, offsets both in the output and the dead letters, and, with --verify-sample, "
        "sampled ranges (keyed tables: sampled keys) that differ from what Kafka still holds, keys held by more "
        "than one row (keyed tables), and keys held although their newest change still in Kafka is a delete "
        "(keyed tables) (a Spark job reads every committed offset Kafka still holds, with or without --verify-sample), "
        "whose ranges are not counted. Exits 0 when none, 4 when damage is found.")
    audit.add_argument("--json", action="store_true", help="one JSON object with the lists and 'ok'")
    audit.add_argument("--verify-sample", type=arguments.sample_size, default=0, metavar="N",
                       help="also read N (a whole number; 0, the default: none) committed ranges still retained in "
                            "Kafka again and compare them "
                            "(raw: checksums of the bytes; JSON/Avro: decoded in Spark, value by value); on a "
                            "keyed table, compare N keys, picked at random among those with a change Kafka still "
                            "holds, with their newest change (decoded in Spark): one equal row for an upsert, no "
                            "row for a delete; refused on a pipeline with a transform (its output is not Kafka's)")


def _pipeline_command(parent, name: str, summary: str, details: str) -> argparse.ArgumentParser:
    """A sub-command that takes a pipeline's name first."""
    command = parent.add_parser(name, help=summary, description=details)
    command.add_argument("pipeline")
    return command


def cmd_pipelines_list(args: argparse.Namespace) -> int:
    from tidemark.config.pipeline import load_all
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
        print(render_table(rows, ["name", "topics", "table", "dag"]) if rows else "no pipelines configured")
        for error in bad.values():
            print(f"broken: {error}", file=sys.stderr)
    return EXIT_PARTIAL if bad else EXIT_OK


STATUS_COLUMNS = ["topic", "partition", "committed_offset", "latest_offset", "lag", "last_batch_id",
                  "held_by_open_transactions"]


def cmd_offsets_show(args: argparse.Namespace) -> int:
    rows = open_run(args.pipeline).status()
    print(json.dumps(rows, indent=2) if args.json else render_table(rows, STATUS_COLUMNS))
    return EXIT_OK


def cmd_lag(args: argparse.Namespace) -> int:
    run = open_run(args.pipeline)
    rows = run.status()
    print(render_table(rows, ["topic", "partition", "lag", "held_by_open_transactions"]))
    print(f"total lag of '{run.name}': {sum(r['lag'] or 0 for r in rows)}")
    print(f"held by open transactions: {sum(r['held_by_open_transactions'] or 0 for r in rows)}")
    for warning in hold_warnings(run.name, rows, run.config.lag.hold_warning_after, dt.datetime.now(dt.UTC)):
        print(f"WARNING: {warning}")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from tidemark.errors import JobExit
    from tidemark_spark.submit import launch

    if args.take_over and not (args.reason or "").strip():
        raise ConfigError("--take-over needs --reason '...': it is recorded in the ledger with the batch")
    run = open_run(args.pipeline)
    plan = run.prepare(run_state=_airflow_run_state(run.name), take_over=args.reason if args.take_over else None)
    if plan.is_empty:
        print(f"pipeline '{run.name}': nothing new; no Spark job started")
        run.report()
        return EXIT_OK
    print(f"pipeline '{run.name}': batch {plan.batch_id} frozen, {plan.total_offsets} offsets over "
          f"{len(plan.ranges)} partition(s){' (recovered)' if plan.recovered else ''}; starting Spark", flush=True)
    code = launch(run, plan)
    if code != JobExit.OK:
        cause = (" on an error that a retry cannot fix (its log above says which and how to fix it)"
                 if code == JobExit.TERMINAL else "")
        print(f"tidemark: error: pipeline '{run.name}': the ingest job for batch {plan.batch_id} exited with "
              f"{code}{cause}; nothing is lost: the next run executes the same frozen ranges again", file=sys.stderr)
        return EXIT_JOB_FAILED
    rows = run.report()
    print(render_table(rows, STATUS_COLUMNS))
    print(summary_line(run.batch_summary(plan)))
    return EXIT_OK


def _airflow_run_state(pipeline: str):
    """A lookup of an ingest DAG run's state in Airflow's metadata DB, made only when a pending batch's
    owner is an Airflow run. Whatever cannot be known here (no Airflow, no DB, no such run in this DB)
    is ``unknown``, which counts as alive: ``--take-over --reason`` is then the way past it."""
    def state(run_id: str) -> str:
        try:
            from airflow.models.dagrun import DagRun
            from airflow.utils.session import create_session
            from sqlalchemy import select

            from tidemark_airflow.naming import ingest_dag_id

            with create_session() as session:
                found = session.scalar(select(DagRun.state).where(DagRun.dag_id == ingest_dag_id(pipeline),
                                                                  DagRun.run_id == run_id))
        except Exception:
            return "unknown"
        finally:
            _logs_to_stderr()
        return "unknown" if found is None else str(getattr(found, "value", found))
    return state


def cmd_ledger_move(args: argparse.Namespace) -> int:
    run = open_run(args.pipeline)
    copied = run.move_ledger(args.source)
    print(f"pipeline '{run.name}': {copied} ledger rows copied from {args.source} to {run.ledger_uri}; the next run "
          f"continues from them (the old ledger is unchanged: delete it once you no longer need it)")
    return EXIT_OK


def cmd_audit(args: argparse.Namespace) -> int:
    from tidemark.audit.live_table import summary
    from tidemark_spark.audit_decode import SampleJobError, launch

    run = open_run(args.pipeline)
    try:
        report = run.audit(verify_sample=args.verify_sample, values=lambda check: launch(run, check))
    except SampleJobError as exc:  # the Spark job of a typed or keyed pipeline's sample: its log is above
        print(f"tidemark: error: {exc}", file=sys.stderr)
        return EXIT_JOB_FAILED
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        for title, rows, columns in (
                ("duplicated offsets", report.duplicates, ["topic", "partition", "offset", "count"]),
                ("committed ranges missing records", report.to_dict()["missing"],
                 ["topic", "partition", "start", "end", "expected", "found", "batch_id"]),
                ("rows outside every committed range", report.outside, ["topic", "partition", "offset", "batch_id"]),
                ("offsets both in the output and the dead letters", report.in_both, ["topic", "partition", "offset"]),
                ("keys held by more than one row", report.duplicate_keys, [*(report.keys or []), "rows"]),
                ("keys held although their newest change in Kafka is a delete",
                 [{**d, "key": json.dumps(d["key"])} for d in report.deleted_keys], ["key", "topic", "partition",
                                                                                      "offset"]),
                ("sampled ranges that differ from Kafka", [] if report.keys else report.sample_mismatches,
                 ["topic", "partition", "start", "end", "batch_id", "kafka_records", "table_records"]),
                ("sampled keys that differ from their newest change in Kafka",
                 [{**m, "key": json.dumps(m["key"])} for m in report.sample_mismatches] if report.keys else [],
                 ["key", "topic", "partition", "offset", "change", "table_rows", "reason"])):
            if rows:
                print(f"{title}:\n{render_table(rows, columns)}\n")
        for row in (report.sample or {}).get("mismatches", []):
            for found in row.get("differences", []):
                print(f"  {row['topic']}:{row['partition']}@{found['offset']}: {found['reason']}")
        print(summary(report))
    return EXIT_OK if report.ok else EXIT_DAMAGE


def reset_request(args: argparse.Namespace, owner: str):
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
                        execute=args.execute, reason=args.reason, owner=owner)


def cmd_offsets_reset(args: argparse.Namespace) -> int:
    import getpass
    import socket

    request = reset_request(args, f"cli:{getpass.getuser()}@{socket.gethostname()}")
    outcome = open_run(args.pipeline).reset(request)
    print(render_table(outcome.preview.as_table(), ["topic", "partition", "current", "new", "change"]))
    for warning in outcome.preview.warnings:
        print(f"warning: {warning}")
    if outcome.executed:
        print(f"applied: ledger entry {outcome.batch_id} (kind 'reset'); the next run starts from the new offsets")
    else:
        print("DRY RUN: nothing changed. Add --execute --reason '...' to apply.")
    return 0


HISTORY_COLUMNS = ["batch_id", "kind", "status", "topic", "partition", "start_offset", "end_offset", "record_count",
                   "dead_letter_count", "dag_run_id", "reason", "committed_at"]
CHANGE_COLUMNS = ["rows_inserted", "rows_updated", "rows_deleted"]


def history_columns(listing: list[dict]) -> list[str]:
    """The history table's columns, named as the ledger's columns and the ``--json`` keys: a keyed batch's rows
    inserted, updated and deleted after ``dead_letter_count`` when the rows shown hold any (on the batch's first
    row), and ``filtered_count`` (the records a transform filtered out) when any row shown holds it."""
    at = HISTORY_COLUMNS.index("dead_letter_count") + 1
    extra = [*(CHANGE_COLUMNS if any(r.get("rows_inserted") is not None for r in listing) else []),
             *(["filtered_count"] if any(r.get("filtered_count") is not None for r in listing) else [])]
    return [*HISTORY_COLUMNS[:at], *extra, *HISTORY_COLUMNS[at:]]


def cmd_offsets_history(args: argparse.Namespace) -> int:
    listing = open_run(args.pipeline).history(args.limit)
    if args.json:
        print(json.dumps(listing, indent=2))
    else:
        print(render_table(listing, history_columns(listing)))
    return 0


HANDLERS = {
    ("pipelines", "list"): cmd_pipelines_list,
    ("offsets", "show"): cmd_offsets_show,
    ("offsets", "history"): cmd_offsets_history,
    ("offsets", "reset"): cmd_offsets_reset,
    ("lag", None): cmd_lag,
    ("run", None): cmd_run,
    ("ledger", "move"): cmd_ledger_move,
    ("audit", None): cmd_audit,
    ("dead-letters", "reprocess"): dead_letter_commands.cmd_reprocess,
    ("maintain", None): maintenance_commands.cmd_maintain,
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
    except Exception as exc:  # not one Tidemark knows: a bug, or a failure no message of its own describes yet
        return report_unexpected(exc, is_debug(args.debug))


if __name__ == "__main__":
    sys.exit(main())
