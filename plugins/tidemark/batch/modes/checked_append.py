"""Append, values that can be bad (JSON, Avro, Protobuf, size limits): one pass over Kafka writes the good
records (the commit point) while Spark counts every record and the bad ones, and notes where they lie; under
``on_bad_record: fail`` the first bad record fails that job, so Delta commits nothing. Then the dead letters: the
bad records the pass carried, or the spans that hold them read again. A crash between the two leaves the dead
letters to the next attempt (``WriteMode.complete``)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping

from tidemark import fault_injection, storage
from tidemark.batch import carried
from tidemark.batch.modes.append import finalize_append
from tidemark.batch.modes.base import Counted, WriteMode, complete_dead_letters, read_rows
from tidemark.batch.plan import BatchPlan
from tidemark.batch.read_checks import bad_records_error, kafka_errors
from tidemark.batch.spark import batch_io, tally
from tidemark.kafka.offsets import OffsetRange, TopicPartition, describe_ranges
from tidemark.storage import ObjectStore

log = logging.getLogger(__name__)


class CheckedAppend(WriteMode):
    name = "checked append"

    def applies(self, plan: BatchPlan) -> bool:
        return plan.format.can_reject

    def write(self, spark, rows, plan: BatchPlan, properties: Mapping[str, str],
              store: ObjectStore | None) -> Counted:
        counted = write_checked_in_one_pass(spark, rows, plan, properties, store)
        if counted is None:  # another attempt committed the output meanwhile
            complete_dead_letters(spark, plan, properties, store)
            return Counted()
        return Counted(records_read=counted.records_read, bad_read=counted.bad_records)

    def finalize(self, plan: BatchPlan, counted: Counted, store: ObjectStore | None) -> bool:
        return finalize_append(plan, counted, store)


def write_checked_in_one_pass(spark, rows, plan: BatchPlan, properties: Mapping[str, str],
                              store: ObjectStore | None = None) -> tally.OnePass | None:
    """Values that can be bad: one pass over Kafka writes the good records (the commit point) while
    Spark counts every record and the bad ones, and notes where they lie; under ``on_bad_record:
    fail`` a bad record fails the job before Delta commits. Then the dead letters: from the bad records
    the pass carried when it could carry them all (``tidemark.batch.carried``: no Spark job), else only
    the offsets of each partition that hold them are read again. Returns what Spark counted, for the
    reconciliation (None when the output already held the batch, so no job ran to count)."""
    good = batch_io.fail_on_bad_records(rows) if plan.format.on_bad_record == "fail" else rows
    try:
        with kafka_errors(plan):
            written = tally.write_output_tallying(good, plan)
    except Exception as exc:
        failure = batch_io.jvm_failure(exc)
        if failure is None or failure.kind != "bad_record":
            raise
        raise bad_records_error(plan, rows) from None
    if written is None:
        log.warning("pipeline '%s': batch %d was already in %s (Delta skipped the write by its marker)",
                    plan.pipeline, plan.batch_id, plan.table_uri)
        return None
    log.info("pipeline '%s': batch %d committed to %s (%d records read, %d bad, from %d offsets)", plan.pipeline,
             plan.batch_id, plan.table_uri, written.records_read, written.bad_records, plan.total_offsets)
    fault_injection.crash_point(fault_injection.AFTER_OUTPUT_COMMIT)
    # No spans although Spark counted bad records: finalize_batch refuses the batch
    spans = bad_spans(plan, written.bad_spans) if written.bad_records else []
    if spans and not (written.carried is not None and _write_carried(spark, plan, written, store)):
        only = dataclasses.replace(plan, ranges=spans)
        again = read_rows(spark, only, properties)
        buckets = written.bad_buckets
        sifted = len(buckets) <= tally.BAD_BUCKETS // 4  # else most records would pass: decode them all
        if sifted:
            again = again.where(tally.in_buckets(buckets))  # Spark filters before it decodes
        with kafka_errors(plan):
            batch_io.write_dead_letters(again, plan)
        log.info("pipeline '%s': %d dead letters written to %s (read again: %s; decoded again: %s)", plan.pipeline,
                 written.bad_records, plan.dead_letter_uri, describe_ranges(only.ranges),
                 f"the records of {len(buckets)} of {tally.BAD_BUCKETS} buckets" if sifted else "every record")
    fault_injection.crash_point(fault_injection.AFTER_DEAD_LETTERS)
    return written


def _write_carried(spark, plan: BatchPlan, written: tally.OnePass, store: ObjectStore | None) -> bool:
    """The dead letters from the bad records the pass carried; False when they must be read again instead
    (nothing committed): the table cannot take them as carried, or Spark commits to it on object storage with a
    log store delta-rs does not share (``carried.beside_spark``)."""
    scheme = storage.spark_uri(plan.dead_letter_uri).split(":", 1)[0].lower()
    log_store = (spark.conf.get(f"spark.delta.logStore.{scheme}.impl", None)
                 if storage.is_object_store(plan.dead_letter_uri) else None)
    if not carried.beside_spark(plan.dead_letter_uri, log_store):
        log.info("pipeline '%s': batch %d: Spark commits to %s with %s, which delta-rs does not share; the dead "
                 "letters are read again and written by Spark", plan.pipeline, plan.batch_id, plan.dead_letter_uri,
                 log_store or "Delta's default log store")
        return False
    try:
        wrote = carried.write(plan, written.carried or [], store)
    except carried.UnfitTableError as exc:
        log.warning("pipeline '%s': batch %d: the dead-letter table cannot take the carried bad records (%s); they "
                    "are read again from Kafka", plan.pipeline, plan.batch_id, exc)
        return False
    if wrote:
        log.info("pipeline '%s': %d dead letters written to %s (carried by the pass: Kafka not read again)",
                 plan.pipeline, written.bad_records, plan.dead_letter_uri)
    else:
        log.warning("pipeline '%s': batch %d: the dead letters were already in %s (another attempt wrote them)",
                    plan.pipeline, plan.batch_id, plan.dead_letter_uri)
    return True


def bad_spans(plan: BatchPlan, spans: Mapping[TopicPartition, tuple[int, int]]) -> list[OffsetRange]:
    """What to read again for the dead letters: per partition with bad records, the offsets that
    hold them all (``OnePass.bad_spans``), within its range. A burst of bad records (a broken deploy of
    a producer) costs a read of the pages it spans, not of the batch."""
    again = []
    for r in plan.ranges:
        if r.tp in spans:
            start, end = max(r.start, spans[r.tp][0]), min(r.end, spans[r.tp][1])
            if start < end:
                again.append(OffsetRange(r.topic, r.partition, start, end))
    return again
