"""Keyed tables (``tidemark.config.keyed_tables``): the batch reduced to the newest change per key and applied with one
MERGE under the batch's marker; a transform feeding a keyed table is a step of this mode
(``tidemark.batch.modes.keyed_transform``), not a mode of its own. Its rows are one per key, so the good records it
applied are counted before the MERGE and kept in the MERGE commit's metadata, which finalize reads back after a
crash."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from tidemark import fault_injection, storage
from tidemark.batch.modes import keyed_transform
from tidemark.batch.modes.base import Counted, WriteMode
from tidemark.batch.plan import BatchPlan
from tidemark.batch.read_checks import cached_and_counted, checked, kafka_errors
from tidemark.batch.spark import batch_io, tally
from tidemark.batch.tables import Tally, batch_tallies, keyed_commit
from tidemark.errors import ReconciliationError
from tidemark.kafka.offsets import TopicPartition
from tidemark.ledger.store import Ledger
from tidemark.storage import ObjectStore

log = logging.getLogger(__name__)


class Keyed(WriteMode):
    """The newest change per key, one MERGE. Its steps (``reduced``, ``materialize``, ``remember``, ``commit``) are
    the strategy a history table (``tidemark.batch.modes.history``) replaces; the skeleton (``write_keyed``: one pass,
    the tallies checked before anything is written, the widening, the dead letters after the commit) is shared."""

    name = "keyed"

    def applies(self, plan: BatchPlan) -> bool:
        return bool(plan.format.keyed) and not plan.format.keyed.keeps_history

    def write(self, spark, rows, plan: BatchPlan, properties: Mapping[str, str],
              store: ObjectStore | None) -> Counted:
        return Counted(tallies=self.write_keyed(spark, rows, plan, store))

    def finalize(self, plan: BatchPlan, counted: Counted, store: ObjectStore | None) -> bool:
        return finalize_keyed(plan, counted.tallies, store)

    def reduced(self, spark, changes, plan: BatchPlan, applied: Mapping[TopicPartition, int], columns: list[str],
                store: ObjectStore | None):
        """The batch's changes as its commit applies them: the newest per key (then made harmless where older than
        the table's delete markers), before the cache."""
        from tidemark.batch.spark import delete_markers, merge

        spec = plan.format.keyed
        newest = merge.newest_changes(changes, spec, applied)
        if not spec.by_kafka_position:  # an upsert older than a delete the table remembers changes nothing
            newest = delete_markers.against_markers(spark, newest, spec, plan.table_uri, store)
        return newest

    def materialize(self, reduced, plan: BatchPlan) -> dict | None:
        """Compute the cached changes in one Spark job (the batch's one pass over Kafka); a key found on two
        partitions under the Kafka position's ordering, refused once the tallies are checked."""
        from tidemark.batch.spark import merge

        return merge.materialize(reduced, plan.format.keyed)

    def remember(self, spark, reduced, plan: BatchPlan, store: ObjectStore | None) -> None:
        """What the table must remember beyond its rows, before the commit point: the delete markers."""
        from tidemark.batch.spark import delete_markers

        if not plan.format.keyed.by_kafka_position:  # a retry of the frozen batch writes them again
            delete_markers.remember(spark, reduced, plan.format.keyed, plan.table_uri, plan.batch_id, store)

    def commit(self, spark, plan: BatchPlan, reduced, columns: list[str], metadata: str, *, add_columns: bool,
               exists: bool) -> None:
        """The one commit of a keyed batch, with its marker: a MERGE of the newest changes, or, for the batch that
        creates the table, an append of its newest upserts (as a MERGE into nothing would)."""
        from tidemark.batch.spark import merge

        with kafka_errors(plan):
            if exists:
                merge.merge(spark, reduced, plan.format.keyed, plan.table_uri, columns, app_id=plan.pipeline,
                            version=plan.batch_id, metadata=metadata, add_columns=add_columns)
            else:
                create_table(plan, reduced.where(f"{merge.OP} = 'u'").select(*columns), metadata)

    def write_keyed(self, spark, rows, plan: BatchPlan, store: ObjectStore | None = None
                    ) -> dict[TopicPartition, Tally]:
        """One pass over Kafka reduces the batch (``reduced``: cached, in the same job that checks each key stays on
        one partition; the commit reads it) while it counts good and bad records per partition, which are checked
        before anything is written; changes at offsets the table already applied (below the ledger's high water)
        are skipped, so a re-read changes nothing. Then ``remember``, the one commit, then the dead letters, read
        again from Kafka (recovery completes them after a kill, as for values written in one pass). The commit
        carries the marker and the counts, which finalize reads back after a crash. A transformed batch, or one of
        more than ``tidemark.batch.spark.tally.OBSERVED_PARTITIONS`` partitions, is cached and counted first
        instead, as for re-reads."""
        from tidemark.batch.spark import merge
        from tidemark.formats.record_format import output_columns

        spec, fmt = plan.format.keyed, plan.format
        columns, add_columns, widen = output_columns(fmt, plan.partition_by), fmt.add_columns, fmt.widen
        if fmt.transform:  # checked before the read
            columns, add_columns, widen = keyed_transform.check(spark, rows, plan, spec, store)
        # One pass: the read tallied while it is reduced, nothing of it cached but that. A transform counts what it
        # filters from the cached batch, and many partitions would cost too many aggregates per record: the batch
        # is then cached and tallied first.
        one_pass = not fmt.transform and len(plan.ranges) <= tally.OBSERVED_PARTITIONS
        tallies, bad, filtered, reduced = {}, 0, None, None
        if not one_pass:
            rows, tallies, bad = cached_and_counted(rows, plan)
        try:
            applied = Ledger(plan.ledger_uri, store).state(plan.pipeline).high_water
            if one_pass:
                changes, observed = tally.observe_by_partition(rows, plan)
            else:
                changes, filtered = (keyed_transform.changes(spark, rows, plan, spec) if fmt.transform
                                     else (rows, None))
            reduced = merge.cached(spark, self.reduced(spark, changes, plan, applied, columns, store))
            with kafka_errors(plan):  # one job: the read (tallied on the way, in one pass), reduced and cached
                moved = self.materialize(reduced, plan)
            if one_pass:
                tallies, bad = _tallied(plan, rows, observed)
            exists = storage.open_table(plan.table_uri, store) is not None
            if widen and exists:
                _widen_keyed(spark, plan, widen)
            merge.refuse_key_on_two_partitions(moved, plan.pipeline)
            metadata = plan.commit_metadata({tp: t.records - t.bad for tp, t in tallies.items()}, filtered)
            with kafka_errors(plan):
                self.remember(spark, reduced, plan, store)
            self.commit(spark, plan, reduced, columns, metadata, add_columns=add_columns, exists=exists)
            log.info("pipeline '%s': batch %d merged into %s (%d records read, %d bad)", plan.pipeline,
                     plan.batch_id, plan.table_uri, sum(t.records for t in tallies.values()), bad)
            fault_injection.crash_point(fault_injection.AFTER_OUTPUT_COMMIT)
            if bad:  # after the commit, as for a transform: a MERGE that refuses the batch leaves nothing written
                with kafka_errors(plan):  # from the cached batch, or (one pass) a second read of Kafka
                    batch_io.write_dead_letters(rows, plan)
            fault_injection.crash_point(fault_injection.AFTER_DEAD_LETTERS)
        finally:
            if not one_pass:
                rows.unpersist()
            if reduced is not None:
                reduced.unpersist()
        return tallies


def create_table(plan: BatchPlan, rows, metadata: str) -> None:
    """The commit of the batch that creates a keyed table: an append of ``rows`` with the batch's marker."""
    batch_io.append_marked(rows, plan.table_uri, app_id=plan.pipeline, version=plan.batch_id, metadata=metadata,
                           pipeline=plan.pipeline, partition_by=plan.partition_by,
                           refused=f"batch {plan.batch_id}: another writer created {plan.table_uri} at the same "
                                   f"moment; the next run finds the batch or reads it again")


def _tallied(plan: BatchPlan, rows, observed) -> tuple[dict[TopicPartition, Tally], int]:
    """The tallies per partition of the one pass over Kafka that computed the newest changes
    (``tidemark.batch.spark.tally.observe_by_partition``), checked as ``cached_and_counted`` checks them, before
    anything is written. Returns them and the number of bad records."""
    with kafka_errors(plan):
        counted = observed()
        if counted is None:  # the counts came back empty (seen when every change was already applied: a replay)
            log.info("pipeline '%s': batch %d: Spark returned no counts with the pass; the batch is counted by "
                     "reading it again", plan.pipeline, plan.batch_id)
            tallies, records = batch_io.tally(rows), None
        else:
            records, parts = counted
            tallies = {tp: Tally(*part) for tp, part in parts.items()}
    return tallies, checked(plan, rows, tallies, records)


def _widen_keyed(spark, plan: BatchPlan, widen: dict[str, str]) -> None:
    """A keyed table's widened columns (``schema_changes``: a widening the plan found) are widened before its
    MERGE, which cannot change a column's type: one overwrite commit of the table with those columns cast,
    without the batch's marker, changing no value. A crash after it leaves a widened table and the batch not
    applied; the retry finds the columns widened and only MERGEs."""
    import json

    metadata = json.dumps({"tidemark_widening": {"pipeline": plan.pipeline, "before_batch": plan.batch_id,
                                                 "columns": widen}})
    with kafka_errors(plan):
        widened = batch_io.widen_in_place(spark, plan.table_uri, widen, plan.partition_by, metadata)
    if widened:
        log.info("pipeline '%s': batch %d widened %s of %s before its MERGE", plan.pipeline, plan.batch_id,
                 ", ".join(f"{c} to {widen[c]}" for c in widened), plan.table_uri)


def finalize_keyed(plan: BatchPlan, tallies: dict[TopicPartition, Tally] | None, store: ObjectStore | None) -> bool:
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
    fault_injection.crash_soon(fault_injection.DURING_LEDGER_COMMIT)
    changed = Ledger(plan.ledger_uri, store).mark_committed(plan.pipeline, plan.batch_id, counts, changes,
                                                            filtered=filtered)
    log.info("pipeline '%s': keyed batch %d %s in the ledger (%d records, %d dead letters; rows %s)", plan.pipeline,
             plan.batch_id, "committed" if changed else "was already committed", sum(c for c, _ in counts.values()),
             sum(d for _, d in counts.values()),
             "unknown" if changes is None else "{} inserted, {} updated, {} deleted".format(*changes))
    return changed
