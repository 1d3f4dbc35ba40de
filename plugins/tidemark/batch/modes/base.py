"""What every write mode shares (``tidemark.batch.modes``): the interface, what Spark counted for the
reconciliation, the read of a batch's frozen ranges, and the dead letters an attempt may have left unwritten
after its output commit."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from tidemark import fault_injection
from tidemark.batch.plan import BatchPlan
from tidemark.batch.read_checks import kafka_errors
from tidemark.batch.spark import batch_io, shaping
from tidemark.batch.tables import Tally, dead_letters_settled
from tidemark.errors import PipelineBusyError, PlanMismatchError
from tidemark.kafka.offsets import TopicPartition
from tidemark.ledger.store import Ledger
from tidemark.storage import ObjectStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Counted:
    """What Spark counted while a mode wrote the batch, for the reconciliation before the ledger commit: per
    partition before writing (``tallies``), or while writing (``records_read``, ``bad_read``: the bad records among
    them). All None when nothing was counted (a recovery, an output another attempt committed): finalize then
    counts the tables alone."""

    tallies: dict[TopicPartition, Tally] | None = None
    records_read: int | None = None
    bad_read: int | None = None


class WriteMode:
    """How a batch is written under its marker and recorded in the ledger; one module per mode, registered in
    ``tidemark.batch.modes.MODES``, chosen once per batch by ``mode_for``. ``execute_batch`` calls ``write`` (or,
    when the output already holds the batch, ``complete``) and ``finalize_batch`` calls ``finalize``; neither
    looks at the format."""

    name = "mode"

    def applies(self, plan: BatchPlan) -> bool:
        """Whether this mode writes ``plan``'s batch (the first registered mode that applies does)."""
        raise NotImplementedError

    def write(self, spark, rows, plan: BatchPlan, properties: Mapping[str, str],
              store: ObjectStore | None) -> Counted:
        """Write the batch's ``rows`` (its frozen ranges, decoded) under its marker: the output commit is the
        commit point; dead letters before or after it, as the mode says. Returns what Spark counted."""
        raise NotImplementedError

    def finalize(self, plan: BatchPlan, counted: Counted, store: ObjectStore | None) -> bool:
        """Check what the tables hold for the batch against its frozen ranges and ``counted``, then commit its
        ledger rows with their counts (how the mode's commit is recognised after a crash: its marker, and for
        modes whose rows do not number their records, the counts in its commit's metadata). Idempotent; False
        when the ledger already had the batch committed."""
        raise NotImplementedError

    def complete(self, spark, plan: BatchPlan, properties: Mapping[str, str], store: ObjectStore | None) -> None:
        """The output already holds the batch (an earlier attempt's commit): write what the attempt may not have
        written after it, the dead letters of a format that has them."""
        if plan.format.can_reject:
            complete_dead_letters(spark, plan, properties, store)


def check_plan_is_frozen(plan: BatchPlan, store: ObjectStore | None = None) -> None:
    """The job only executes what the ledger froze, for the run that owns it: the same batch id,
    exactly its ranges, the same owner."""
    state = Ledger(plan.ledger_uri, store).state(plan.pipeline)
    if state.pending_batch_id != plan.batch_id or state.pending_ranges != sorted(plan.ranges):
        raise PlanMismatchError(
            f"batch {plan.batch_id} handed to the ingest job is not the ledger's pending batch "
            f"({state.pending_batch_id}); refusing to read a range the ledger did not freeze. "
            f"Re-run the plan task.", pipeline=plan.pipeline)
    if state.pending_owner != plan.owner:
        raise PipelineBusyError.held_by(
            plan.pipeline, f"batch {plan.batch_id} now belongs to run '{state.pending_owner}', not to this run "
                           f"('{plan.owner}')", "the ingest job checks ownership before reading")


def read_rows(spark, plan: BatchPlan, properties: Mapping[str, str]):
    """The batch's frozen ranges read from Kafka with its isolation level, decoded with its format."""
    raw = batch_io.read_ranges(spark, batch_io.kafka_source_options(plan, properties, plan.isolation_level))
    return shaping.to_rows(raw, plan.format, plan.batch_id, dt.datetime.now(dt.UTC))


def complete_dead_letters(spark, plan: BatchPlan, properties: Mapping[str, str],
                          store: ObjectStore | None = None) -> None:
    """The output holds the batch; its dead letters may not (an attempt died between the two commits).
    Unless the dead-letter table's marker shows them written, or the output holds a good record for
    every offset of the batch's ranges (so none can be bad), read the batch again (only this batch's
    owner may) and write its bad records, if any. Idempotent: Delta skips a second write by the marker."""
    if dead_letters_settled(plan.table_uri, plan.dead_letter_uri, plan.pipeline, plan.batch_id, plan.total_offsets,
                            store):
        return
    check_plan_is_frozen(plan, store)
    rows = read_rows(spark, plan, properties)
    if plan.dedupe:
        rows = batch_io.drop_already_written(spark, rows, plan, store)
    with kafka_errors(plan):
        if batch_io.has_bad_rows(rows):
            batch_io.write_dead_letters(rows, plan)
            log.warning("pipeline '%s': batch %d: the dead letters an earlier attempt did not write are written to "
                        "%s", plan.pipeline, plan.batch_id, plan.dead_letter_uri)
    fault_injection.crash_point(fault_injection.AFTER_DEAD_LETTERS)
