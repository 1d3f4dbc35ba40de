"""Append, raw values (``value_format: raw``): they cannot be bad, so one pass over Kafka writes the output (the
commit point) while Spark counts what it read. ``finalize_append`` is the finalize of every append mode: the
output's rows number its records, one row per record."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from tidemark import fault_injection
from tidemark.batch.modes.base import Counted, WriteMode
from tidemark.batch.plan import BatchPlan
from tidemark.batch.read_checks import check_read, kafka_errors, stored
from tidemark.batch.spark import batch_io
from tidemark.batch.tables import Tally, batch_tallies
from tidemark.errors import ReconciliationError
from tidemark.kafka.offsets import describe_ranges
from tidemark.ledger.store import Ledger
from tidemark.storage import ObjectStore

log = logging.getLogger(__name__)


class Append(WriteMode):
    name = "append"

    def applies(self, plan: BatchPlan) -> bool:
        return True  # the last registered: what no other mode takes (values that cannot be bad)

    def write(self, spark, rows, plan: BatchPlan, properties: Mapping[str, str],
              store: ObjectStore | None) -> Counted:
        return Counted(records_read=write_in_one_pass(rows, plan))

    def finalize(self, plan: BatchPlan, counted: Counted, store: ObjectStore | None) -> bool:
        return finalize_append(plan, counted, store)

    def complete(self, spark, plan: BatchPlan, properties: Mapping[str, str], store: ObjectStore | None) -> None:
        """Raw values have no dead letters: nothing to complete."""


def finalize_append(plan: BatchPlan, counted: Counted, store: ObjectStore | None) -> bool:
    """Count the batch's records in the output and the dead-letter table, check they lie within the frozen
    ranges and match what Spark ``counted``, and flip its ledger rows to committed with those counts; a mismatch
    raises ReconciliationError and leaves the ledger untouched."""
    tallies, records_read, bad_read = counted.tallies, counted.records_read, counted.bad_read
    output = batch_tallies(plan.table_uri, plan.batch_id, store)
    dead_letters = batch_tallies(plan.dead_letter_uri, plan.batch_id, store)
    written = {tp: t.records for tp, t in output.items()}
    dead = {tp: t.records for tp, t in dead_letters.items()}
    held = stored(output, dead_letters)
    check_read(plan, held, source="the output and dead-letter tables hold",
               outcome="the ledger was not committed. Investigate before re-running")
    if records_read is not None and records_read != sum(t.records for t in held.values()):
        raise ReconciliationError(
            f"batch {plan.batch_id}: Spark read {records_read} records from Kafka for "
            f"{describe_ranges(plan.ranges)} but the output and dead-letter "
            f"tables hold {sum(t.records for t in held.values())}; the ledger was not committed. Investigate "
            f"before re-running.", pipeline=plan.pipeline)
    if bad_read is not None and bad_read != sum(dead.values()):
        raise ReconciliationError(
            f"batch {plan.batch_id}: Spark found {bad_read} bad records in {describe_ranges(plan.ranges)} but the "
            f"dead-letter table holds {sum(dead.values())}; the ledger was not committed. Investigate before "
            f"re-running.", pipeline=plan.pipeline)
    if tallies is not None:
        for r in plan.ranges:
            t = tallies.get(r.tp, Tally(0, 0, None, None))
            if (written.get(r.tp, 0), dead.get(r.tp, 0)) != (t.records - t.bad, t.bad):
                raise ReconciliationError(
                    f"{r.tp}: Kafka returned {t.records} records for [{r.start}, {r.end}) ({t.bad} bad) but the output "
                    f"holds {written.get(r.tp, 0)} and the dead-letter table {dead.get(r.tp, 0)} for batch "
                    f"{plan.batch_id}; the ledger was not committed. Investigate before re-running.",
                    pipeline=plan.pipeline)
    counts = {r.tp: (written.get(r.tp, 0) + dead.get(r.tp, 0), dead.get(r.tp, 0)) for r in plan.ranges}
    fault_injection.crash_soon(fault_injection.DURING_LEDGER_COMMIT)
    changed = Ledger(plan.ledger_uri, store).mark_committed(plan.pipeline, plan.batch_id, counts)
    log.info("pipeline '%s': batch %d %s in the ledger (%d records, %d dead letters)", plan.pipeline, plan.batch_id,
             "committed" if changed else "was already committed", sum(c for c, _ in counts.values()),
             sum(d for _, d in counts.values()))
    return changed


def write_in_one_pass(rows, plan: BatchPlan) -> int | None:
    """Raw values cannot be bad: one pass over Kafka writes the output (the commit point) while
    Spark counts what it read. The tables are then checked against the frozen ranges and that count
    before the ledger commit (finalize_batch). Returns the count (None if Delta skipped the write:
    the output already held the batch)."""
    # no dead letters in this format; the point stays reachable
    fault_injection.crash_point(fault_injection.AFTER_DEAD_LETTERS)
    with kafka_errors(plan):
        records_read = batch_io.write_output_counting(rows, plan)
    if records_read is None:
        log.warning("pipeline '%s': batch %d was already in %s (Delta skipped the write by its marker)",
                    plan.pipeline, plan.batch_id, plan.table_uri)
    else:
        log.info("pipeline '%s': batch %d committed to %s (%d records read from %d offsets)", plan.pipeline,
                 plan.batch_id, plan.table_uri, records_read, plan.total_offsets)
    fault_injection.crash_point(fault_injection.AFTER_OUTPUT_COMMIT)
    return records_read
