"""Recovery, at the start of every run: finish the pipeline's unfinished batch before planning a
new one.

* The batch's marker is in the output table (its commit point was reached): *roll forward*, i.e.
  commit the ledger from what the tables hold.
* It is not: *re-execute* the same frozen ranges, taking the batch over from its owner if that
  run is gone; a live owner makes this run fail with PipelineBusyError, having written nothing.
"""

from __future__ import annotations

import logging
from typing import Literal

from tidemark import storage
from tidemark.batch.finalize import finalize_batch
from tidemark.batch.ownership import RunStateLookup, is_owner_alive
from tidemark.batch.plan import BatchPlan
from tidemark.config import PipelineConfig
from tidemark.errors import PipelineBusyError
from tidemark.ledger import Ledger, LedgerState
from tidemark.schemas import BatchSchemas, batch_format

log = logging.getLogger(__name__)

Recovery = Literal["none", "roll_forward", "re_execute"]


def decide_recovery(pending_batch_id: int | None, output_txn_version: int | None,
                    dead_letters_done: bool = True) -> Recovery:
    """What to do with an unfinished batch, from the ledger's pending batch, the output table's
    idempotency marker for the pipeline, and whether its dead letters are known to be written (values
    that can be bad are written output first, then dead letters: a batch in the output whose dead
    letters may be missing is executed again, and the job only completes the dead letters)."""
    if pending_batch_id is None:
        return "none"
    if output_txn_version is not None and output_txn_version >= pending_batch_id and dead_letters_done:
        return "roll_forward"
    return "re_execute"


def output_txn_version(table_uri: str, pipeline: str) -> int | None:
    """The highest batch id the output table has committed for this pipeline (None if none)."""
    table = storage.open_table(table_uri)
    return None if table is None else table.transaction_version(pipeline)


def plan_for(config: PipelineConfig, ledger: Ledger, batch_id: int, ranges, *, frozen: BatchSchemas | None = None,
             **extra) -> BatchPlan:
    """A BatchPlan with everything the ingest job needs from the pipeline config, and for a batch
    with offsets to read, the record format checked against the output table (``schemas``)."""
    ranges = list(ranges)
    fmt = batch_format(config, frozen) if any(r.size for r in ranges) else config.record_format
    return BatchPlan(config.name, batch_id, config.table_uri, ledger.uri, ranges,
                     dead_letter_uri=config.dead_letter_uri, record_format=fmt.to_dict(),
                     partition_by=list(config.partition_by), kafka_timeout_seconds=config.kafka_timeout_seconds,
                     max_offsets_per_task=config.max_offsets_per_spark_task, **extra)


def describe_ranges(plan: BatchPlan) -> str:
    return ", ".join(f"{r.tp} [{r.start}, {r.end})" for r in plan.ranges)


def recover(config: PipelineConfig, ledger: Ledger, state: LedgerState, owner: str,
            run_state: RunStateLookup | None = None) -> BatchPlan | None:
    """Finish an unfinished batch first. Returns the batch to execute again (same frozen ranges,
    now owned by ``owner``), or None when nothing is pending (after rolling a committed batch
    forward). Raises PipelineBusyError when a live run owns the pending batch."""
    if state.pending_batch_id is None:
        return None
    marker = output_txn_version(config.table_uri, config.name)
    dedupe = any(r.start < state.high_water.get(r.tp, 0) for r in state.pending_ranges)
    frozen = BatchSchemas.from_json(state.pending_schemas) if state.pending_schemas else None
    plan = plan_for(config, ledger, state.pending_batch_id, state.pending_ranges, recovered=True,
                    run_id=state.pending_owner, dedupe=dedupe, frozen=frozen)
    dead_letters_done = not plan.format.can_reject or (
        (output_txn_version(config.dead_letter_uri, config.name) or 0) >= state.pending_batch_id)
    if decide_recovery(state.pending_batch_id, marker, dead_letters_done) == "roll_forward":
        log.warning("pipeline '%s': batch %d is in the output table but not yet committed in the ledger; "
                    "rolling it forward", config.name, plan.batch_id)
        finalize_batch(plan)
        return None
    holder = state.pending_owner or ""
    if holder != owner:
        if holder and is_owner_alive(holder, run_state):
            raise PipelineBusyError.held_by(
                config.name, f"run '{holder}' froze batch {plan.batch_id} ({describe_ranges(plan)}) and is still "
                             f"active", "recovering")
        log.warning("pipeline '%s': run '%s' froze batch %d and is gone; this run takes it over", config.name,
                    holder, plan.batch_id)
        ledger.take_over(config.name, plan.batch_id, owner, expected=state.fingerprint)
    plan.run_id = owner
    log.warning("pipeline '%s': batch %d was planned but never committed; executing it again with the same "
                "frozen ranges: %s", config.name, plan.batch_id, describe_ranges(plan))
    return plan
