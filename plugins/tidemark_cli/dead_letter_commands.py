"""``tidemark dead-letters reprocess PIPELINE (--batch N | --all) --reason TEXT``: re-ingest dead letters
after a fix (the protocol: ``tidemark.operations.reprocessing``; the Spark job: ``tidemark_spark.reprocess``)."""

from __future__ import annotations

import argparse
import getpass
import socket
import sys

from tidemark_cli.connection_commands import open_run
from tidemark_cli.exits import EXIT_JOB_FAILED, EXIT_OK
from tidemark_cli.table_views import render_table


def add_parser(commands) -> None:
    dead = commands.add_parser("dead-letters", help="the pipeline's dead letters")
    dead_cmd = dead.add_subparsers(dest="action", required=True, metavar="ACTION")
    reprocess = dead_cmd.add_parser(
        "reprocess", help="decode dead letters again after a fix; those that decode now go to the output, once",
        description="Decode the kept raw bytes of a pipeline's dead letters again with the pipeline as configured "
                    "now (a schema registered again, schema_changes relaxed, a JSON schema widened). Those that "
                    "decode are written to the output exactly once (by their Kafka coordinates) and removed from "
                    "the dead-letter table; the others stay there with their new reason. Recorded in the ledger "
                    "(kind 'reprocess': who, when, why, how many); the committed offsets do not move. Safe to "
                    "run again, also after a crash: an unfinished entry is finished first. Uses Spark (the "
                    "pipeline's Spark connection).")
    reprocess.add_argument("pipeline")
    which = reprocess.add_mutually_exclusive_group(required=True)
    which.add_argument("--batch", type=int, metavar="N", help="only the dead letters of ledger batch N")
    which.add_argument("--all", action="store_true", help="every dead letter of the pipeline")
    reprocess.add_argument("--reason", required=True, help="why (a fix was deployed...); written to the ledger")


def cmd_reprocess(args: argparse.Namespace) -> int:
    from tidemark.errors import JobExit
    from tidemark.operations import reprocessing
    from tidemark_spark.reprocess import launch

    run = open_run(args.pipeline)
    owner = f"cli:{getpass.getuser()}@{socket.gethostname()}"
    plan = run.reserve_reprocess(batch_id=args.batch, reason=args.reason, owner=owner)
    if plan is None:
        which = f"batch {args.batch}" if args.batch is not None else "the pipeline"
        print(f"pipeline '{run.name}': {which} has no dead letters in {run.config.dead_letter_uri}; nothing to do")
        return EXIT_OK
    print(f"pipeline '{run.name}': reprocess entry {plan.entry_id}: {sum(plan.selected.values())} dead letters; "
          f"starting Spark", flush=True)
    code = launch(run, plan)
    if code != JobExit.OK:
        print(f"tidemark: error: pipeline '{run.name}': the reprocess job of entry {plan.entry_id} exited with {code}; "
              f"nothing is lost or doubled: run the same command again to finish the entry", file=sys.stderr)
        return EXIT_JOB_FAILED
    rows = reprocessing.outcome(run.ledger, run.name, plan.entry_id)
    print(render_table(rows, ["topic", "partition", "offsets", "reprocessed", "still_dead_letters"]))
    print(f"ledger entry {plan.entry_id} (kind 'reprocess'): {sum(r['reprocessed'] or 0 for r in rows)} records "
          f"written to {run.config.table_uri}, {sum(r['still_dead_letters'] or 0 for r in rows)} left as dead letters")
    return EXIT_OK
