"""Recovery, at the start of every run: finish the pipeline's unfinished batch before planning a
new one.

* The batch's marker is in the output table (its commit point was reached): *roll forward*, i.e.
  commit the ledger from what the tables hold.
* It is not: *re-execute* the same frozen ranges, taking the batch over from its owner if that
  run is gone; a live owner makes this run fail with PipelineBusyError, having written nothing.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Literal

from tidemark.batch.finalize import finalize_batch
from tidemark.batch.ownership import RunStateLookup, is_owner_alive
from tidemark.batch.plan import BatchPlan, build_plan
from tidemark.batch.schemas import BatchSchemas
from tidemark.batch.tables import dead_letters_settled, output_txn_version
from tidemark.config.pipeline import PipelineConfig
from tidemark.errors import PipelineBusyError
from tidemark.kafka.offsets import describe_ranges
from tidemark.ledger.store import Ledger, LedgerState

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


def pending_plan(config: PipelineConfig, ledger: Ledger, state: LedgerState, *, written: bool = True) -> BatchPlan:
    """The ledger's pending batch as a plan: its frozen ranges, its current owner, and what shapes its output.

    A batch of which something was ``written`` (its output commit, or its dead letters, which a re-read writes
    first) is finished exactly as it was planned (``frozen_plan``: format with its schemas, keys, ordering,
    transform, partition columns, isolation level), whatever the pipeline file says now: one batch is never
    written under two settings. A batch of which nothing was written is planned again over the same frozen ranges
    and schemas with the pipeline file as it is now (``recover`` replaces its rows' ``frozen_plan`` when that
    changed it): the file's fix of a setting that failed the batch (a transform that does not run, say) takes
    effect, as the error said it would. A batch planned before the ledger kept ``frozen_plan`` (schema version 6)
    is always built from the file, as before."""
    dedupe = any(r.start < state.high_water.get(r.tp, 0) for r in state.pending_ranges)
    if state.pending_plan and written:
        plan = build_plan(config, ledger.uri, state.pending_batch_id, [], recovered=True, owner=state.pending_owner,
                          dedupe=dedupe)
        return dataclasses.replace(plan.with_frozen(state.pending_plan), ranges=list(state.pending_ranges))
    frozen = BatchSchemas.from_json(state.pending_schemas) if state.pending_schemas else None
    return build_plan(config, ledger.uri, state.pending_batch_id, state.pending_ranges, recovered=True,
                      owner=state.pending_owner, dedupe=dedupe, frozen=frozen, store=ledger.store)


def changed_settings(before: str, after: str) -> list[str]:
    """The names of the ``BatchPlan.FROZEN`` settings (and of a record format's fields) two frozen plans differ
    in, for the log."""
    import json

    old, new = json.loads(before), json.loads(after)
    names = []
    for name in sorted(old.keys() | new.keys()):
        if old.get(name) == new.get(name):
            continue
        if isinstance(old.get(name), dict) and isinstance(new.get(name), dict):
            names += [f"{name}.{k}" for k in sorted(old[name].keys() | new[name].keys())
                      if old[name].get(k) != new[name].get(k)]
        else:
            names.append(name)
    return names


def recover(config: PipelineConfig, ledger: Ledger, state: LedgerState, owner: str,
            run_state: RunStateLookup | None = None, take_over: str | None = None) -> BatchPlan | None:
    """Finish an unfinished batch first. Returns the batch to execute again (same frozen ranges,
    now owned by ``owner``), or None when nothing is pending (after rolling a committed batch
    forward). Raises PipelineBusyError when a live run owns the pending batch, unless ``take_over``
    (the operator's reason, recorded in the ledger) says that run is dead although its state says
    otherwise. The output tables are read with the ledger's object store (one store per pipeline)."""
    if state.pending_batch_id is None:
        return None
    store = ledger.store
    marker = output_txn_version(config.table_uri, config.name, store)
    in_output = marker is not None and marker >= state.pending_batch_id
    dead_marker = output_txn_version(config.dead_letter_uri, config.name, store) if config.dead_letter_uri else None
    written = in_output or (dead_marker is not None and dead_marker >= state.pending_batch_id)
    plan = pending_plan(config, ledger, state, written=written)
    dead_letters_done = not plan.format.can_reject or (in_output and dead_letters_settled(
        config.table_uri, config.dead_letter_uri, config.name, plan.batch_id, plan.total_offsets, store))
    if decide_recovery(state.pending_batch_id, marker, dead_letters_done) == "roll_forward":
        log.warning("pipeline '%s': batch %d is in the output table but not yet committed in the ledger; "
                    "rolling it forward", config.name, plan.batch_id)
        finalize_batch(plan, store=store)
        return None
    current = state.pending_owner or ""
    if current != owner:
        if current and take_over is None and is_owner_alive(current, run_state):
            raise PipelineBusyError.held_by(
                config.name, f"run '{current}' froze batch {plan.batch_id} ({describe_ranges(plan.ranges)}) and is "
                             f"still active (or its state cannot be known here)",
                "recovering. If that run is dead (its process was killed, its Airflow run left 'running'), mark it "
                f"failed in Airflow, or take the batch over: tidemark run {config.name} --take-over --reason '...'")
    if state.pending_plan and plan.frozen() != state.pending_plan:  # written: False (else the plan is the frozen one)
        log.warning("pipeline '%s': the pipeline file changed what batch %d writes since it was planned (%s); nothing "
                    "of it was written, so its frozen ranges are executed with the file as it is now", config.name,
                    plan.batch_id, ", ".join(changed_settings(state.pending_plan, plan.frozen())))
        ledger.refreeze(config.name, plan.batch_id, plan.frozen(), expected=state.fingerprint)
    if current != owner:
        why = f"taken over from '{current}' by '{owner}'" + (f": {take_over}" if take_over else " (it is gone)")
        log.warning("pipeline '%s': batch %d %s", config.name, plan.batch_id, why)
        ledger.take_over(config.name, plan.batch_id, owner, expected=state.fingerprint,
                         reason=why if take_over else None)
    plan.owner = owner
    log.warning("pipeline '%s': batch %d was planned but never committed; executing it again with the same "
                "frozen ranges: %s", config.name, plan.batch_id, describe_ranges(plan.ranges))
    return plan
