"""Finalize: check what the tables hold for a batch against its frozen ranges, then commit the
ledger (flip the batch's planned rows to committed, with their counts). Idempotent.

The output table's Delta commit (marker ``txnAppId = <pipeline>``, ``txnVersion = <batch id>``)
is the commit point; this step only records it in the ledger, so it may run again after any
crash, from the job that wrote the batch or from a later run's recovery (docs/DESIGN.md).
"""

from __future__ import annotations

import logging

from tidemark import crash
from tidemark.batch.plan import BatchPlan
from tidemark.batch.tables import Tally, batch_tallies, keyed_commit
from tidemark.errors import ReconciliationError
from tidemark.ledger import Ledger
from tidemark.offsets import TopicPartition, describe_ranges
from tidemark.storage import ObjectStore

log = logging.getLogger(__name__)


def _stored(written: dict[TopicPartition, Tally], dead: dict[TopicPartition, Tally]) -> dict[TopicPartition, Tally]:
    """Output and dead letters together, per partition (``bad`` = dead letters)."""
    stored = {}
    for tp in written.keys() | dead.keys():
        parts = [t for t in (written.get(tp), dead.get(tp)) if t is not None]
        stored[tp] = Tally(sum(t.records for t in parts), dead[tp].records if tp in dead else 0,
                           min(t.min_offset for t in parts), max(t.max_offset for t in parts))
    return stored


def check_read(plan: BatchPlan, tallies: dict[TopicPartition, Tally], *, source: str = "Spark returned",
               outcome: str = "nothing was written", records: int | None = None) -> None:
    """Records of the frozen ranges only: every offset inside its range, no more records than
    offsets, no partition outside the plan. ``tallies`` are what Spark read (before writing) or what
    the tables hold for the batch (before the ledger commit); ``records``, when Spark counted them all, is
    more than the tallies' sum if some came from partitions outside the plan. Raises ReconciliationError."""
    outside = (records or 0) - sum(t.records for t in tallies.values())
    if outside > 0:
        raise ReconciliationError(f"{source} {outside} record(s) of partitions batch {plan.batch_id} does not read; "
                                  f"{outcome}", pipeline=plan.pipeline)
    ranges = {r.tp: r for r in plan.ranges}
    for tp, tally in tallies.items():
        r = ranges.get(tp)
        if r is None:
            raise ReconciliationError(f"{source} records of {tp}, which batch {plan.batch_id} does not read; "
                                      f"{outcome}", pipeline=plan.pipeline)
        if tally.records > r.size or (tally.records and not (r.start <= tally.min_offset and tally.max_offset < r.end)):
            raise ReconciliationError(
                f"{tp}: {source} {tally.records} records with offsets {tally.min_offset}..{tally.max_offset} "
                f"for the frozen range [{r.start}, {r.end}) of batch {plan.batch_id}; {outcome}",
                pipeline=plan.pipeline)


def finalize_batch(plan: BatchPlan, tallies: dict[TopicPartition, Tally] | None = None,
                   records_read: int | None = None, *, bad_read: int | None = None,
                   store: ObjectStore | None = None) -> bool:
    """Count the batch's records in the output and the dead-letter table, check they lie within
    the frozen ranges, and flip its ledger rows to committed with those counts. With the ``tallies``
    Spark counted before writing, or the ``records_read`` (and ``bad_read``: the bad records among
    them) it counted while writing, a mismatch raises ReconciliationError and leaves the ledger
    untouched. ``store``: the object store of tables on S3. Idempotent; returns False when the ledger
    already had the batch committed."""
    if plan.format.keyed:
        return _finalize_keyed(plan, tallies, store)
    if plan.format.transform:
        return _finalize_transformed(plan, tallies, store)
    output = batch_tallies(plan.table_uri, plan.batch_id, store)
    dead_letters = batch_tallies(plan.dead_letter_uri, plan.batch_id, store)
    written = {tp: t.records for tp, t in output.items()}
    dead = {tp: t.records for tp, t in dead_letters.items()}
    held = _stored(output, dead_letters)
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
    crash.crash_soon(crash.DURING_LEDGER_COMMIT)
    changed = Ledger(plan.ledger_uri, store).mark_committed(plan.pipeline, plan.batch_id, counts)
    log.info("pipeline '%s': batch %d %s in the ledger (%d records, %d dead letters)", plan.pipeline, plan.batch_id,
             "committed" if changed else "was already committed", sum(c for c, _ in counts.values()),
             sum(d for _, d in counts.values()))
    return changed


def _finalize_keyed(plan: BatchPlan, tallies: dict[TopicPartition, Tally] | None, store: ObjectStore | None) -> bool:
    """A keyed table's rows are one per key, not one per record: the good records the batch applied come from
    what Spark counted before the MERGE (``tallies``) or, after a crash, from the MERGE commit's metadata; the
    dead letters from their table, checked against the counts as for an append. The rows the MERGE inserted,
    updated and deleted come from its commit's operation metrics, found by the same one history scan (left
    null in the ledger when the commit has none)."""
    dead = {tp: t.records for tp, t in batch_tallies(plan.dead_letter_uri, plan.batch_id, store).items()}
    commit = keyed_commit(plan.table_uri, plan.pipeline, plan.batch_id, store)
    if tallies is not None:
        good = {tp: t.records - t.bad for tp, t in tallies.items()}
    elif commit is None or commit.records is None:
        raise ReconciliationError(
            f"batch {plan.batch_id}: the keyed table {plan.table_uri} holds the batch's marker but no commit of "
            f"the batch with its counts among its last 100; the ledger was not committed. Investigate before "
            f"re-running.", pipeline=plan.pipeline)
    else:
        good = commit.records
    for r in plan.ranges:
        expected = tallies.get(r.tp).bad if tallies is not None and r.tp in tallies else dead.get(r.tp, 0)
        if dead.get(r.tp, 0) != expected or good.get(r.tp, 0) + dead.get(r.tp, 0) > r.size:
            raise ReconciliationError(
                f"{r.tp}: batch {plan.batch_id} applied {good.get(r.tp, 0)} changes and the dead-letter table holds "
                f"{dead.get(r.tp, 0)} for [{r.start}, {r.end}); the ledger was not committed. Investigate before "
                f"re-running.", pipeline=plan.pipeline)
    counts = {r.tp: (good.get(r.tp, 0) + dead.get(r.tp, 0), dead.get(r.tp, 0)) for r in plan.ranges}
    changes = commit.changes if commit is not None else None
    filtered = None if commit is None or commit.filtered is None else {
        r.tp: commit.filtered.get(r.tp, 0) for r in plan.ranges}  # a transform's (none without one)
    crash.crash_soon(crash.DURING_LEDGER_COMMIT)
    changed = Ledger(plan.ledger_uri, store).mark_committed(plan.pipeline, plan.batch_id, counts, changes,
                                                            filtered=filtered)
    log.info("pipeline '%s': keyed batch %d %s in the ledger (%d records, %d dead letters; rows %s)", plan.pipeline,
             plan.batch_id, "committed" if changed else "was already committed", sum(c for c, _ in counts.values()),
             sum(d for _, d in counts.values()),
             "unknown" if changes is None else "{} inserted, {} updated, {} deleted".format(*changes))
    return changed


def _finalize_transformed(plan: BatchPlan, tallies: dict[TopicPartition, Tally] | None,
                          store: ObjectStore | None) -> bool:
    """A transform's batch: one record gives 0, 1 or several rows, so the output is counted by distinct
    coordinate. The good records come from what Spark counted before the write (``tallies``) or, after a
    crash, from the output commit's metadata; the filtered ones are the good records without a row. The
    output's coordinates and the dead letters are checked against the frozen ranges, as for an append."""
    output = batch_tallies(plan.table_uri, plan.batch_id, store, distinct=True)
    dead = batch_tallies(plan.dead_letter_uri, plan.batch_id, store)
    check_read(plan, _stored(output, dead), source="the output and dead-letter tables hold",
               outcome="the ledger was not committed. Investigate before re-running")
    commit = keyed_commit(plan.table_uri, plan.pipeline, plan.batch_id, store) if tallies is None else None
    if tallies is not None:
        good = {tp: t.records - t.bad for tp, t in tallies.items()}
    elif commit is None or commit.records is None:
        raise ReconciliationError(
            f"batch {plan.batch_id}: the output {plan.table_uri} holds the batch's marker but no commit of the batch "
            f"with its counts among its last 100; the ledger was not committed. Investigate before re-running.",
            pipeline=plan.pipeline)
    else:
        good = commit.records
    filtered = {}
    for r in plan.ranges:
        kept, bad = (output[r.tp].records if r.tp in output else 0), (dead[r.tp].records if r.tp in dead else 0)
        expected_bad = tallies[r.tp].bad if tallies is not None and r.tp in tallies else bad
        filtered[r.tp] = good.get(r.tp, 0) - kept
        if filtered[r.tp] < 0 or bad != expected_bad or good.get(r.tp, 0) + bad > r.size:
            raise ReconciliationError(
                f"{r.tp}: batch {plan.batch_id} read {good.get(r.tp, 0)} good records of [{r.start}, {r.end}) but the "
                f"output holds {kept} distinct offsets of them and the dead-letter table {bad}; the ledger was not "
                f"committed. Investigate before re-running.", pipeline=plan.pipeline)
    counts = {r.tp: (good.get(r.tp, 0) + (dead[r.tp].records if r.tp in dead else 0),
                     dead[r.tp].records if r.tp in dead else 0) for r in plan.ranges}
    crash.crash_soon(crash.DURING_LEDGER_COMMIT)
    changed = Ledger(plan.ledger_uri, store).mark_committed(plan.pipeline, plan.batch_id, counts, filtered=filtered)
    log.info("pipeline '%s': batch %d %s in the ledger (%d records, %d dead letters, %d filtered by the transform)",
             plan.pipeline, plan.batch_id, "committed" if changed else "was already committed",
             sum(c for c, _ in counts.values()), sum(d for _, d in counts.values()), sum(filtered.values()))
    return changed
