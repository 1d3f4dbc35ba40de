"""Append with dedupe: re-reads (backfills, replays after a reset back in time) skip the records whose Kafka
coordinates the output or dead letters already hold; the rest is cached, counted per partition and checked
against the frozen ranges before anything is written, then the dead letters, then the output."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from tidemark import fault_injection
from tidemark.batch.modes.append import finalize_append
from tidemark.batch.modes.base import Counted, WriteMode
from tidemark.batch.plan import BatchPlan
from tidemark.batch.read_checks import cached_and_counted, nothing_left
from tidemark.batch.spark import batch_io
from tidemark.batch.tables import Tally
from tidemark.kafka.offsets import TopicPartition
from tidemark.storage import ObjectStore

log = logging.getLogger(__name__)


class DedupedAppend(WriteMode):
    name = "append with dedupe"

    def applies(self, plan: BatchPlan) -> bool:
        return plan.dedupe

    def write(self, spark, rows, plan: BatchPlan, properties: Mapping[str, str],
              store: ObjectStore | None) -> Counted:
        return Counted(tallies=write_counted_first(batch_io.drop_already_written(spark, rows, plan, store), plan))

    def finalize(self, plan: BatchPlan, counted: Counted, store: ObjectStore | None) -> bool:
        return finalize_append(plan, counted, store)


def write_counted_first(rows, plan: BatchPlan) -> dict[TopicPartition, Tally]:
    """Values that can be bad, and re-reads that are deduplicated (backfills, replays): cache the
    batch, count good and bad records per partition and check them against the frozen ranges before
    anything is written, then write the dead letters and the output (the commit point). A batch left
    with no record (everything already in the output) makes no commit at all, as an empty
    incremental run makes none. Returns the counts for the reconciliation."""
    rows, tallies, bad = cached_and_counted(rows, plan)
    try:
        if nothing_left(plan, tallies):
            return tallies
        if bad:
            batch_io.write_dead_letters(rows, plan)
            log.info("pipeline '%s': %d dead letters written to %s", plan.pipeline, bad, plan.dead_letter_uri)
        fault_injection.crash_point(fault_injection.AFTER_DEAD_LETTERS)
        batch_io.write_output(rows, plan)
        log.info("pipeline '%s': batch %d committed to %s", plan.pipeline, plan.batch_id, plan.table_uri)
        fault_injection.crash_point(fault_injection.AFTER_OUTPUT_COMMIT)
    finally:
        rows.unpersist()
    return tallies
