"""The guards of a batch's Spark work, shared by its write modes (``tidemark.batch.modes``): Spark's
Kafka and storage failures turned into errors that name the batch and say what happens next, and the
batch cached and counted against its frozen ranges before anything is written, and the same check of what the
tables hold before the ledger commit."""

from __future__ import annotations

import contextlib
import logging

from tidemark.batch.plan import BatchPlan
from tidemark.batch.spark import batch_io
from tidemark.batch.tables import Tally
from tidemark.errors import (
    BadRecordsError,
    KafkaAuthenticationError,
    KafkaUnavailableError,
    ReconciliationError,
    StorageLocationError,
    TidemarkError,
)
from tidemark.kafka.offsets import TopicPartition, describe_ranges

log = logging.getLogger(__name__)


@contextlib.contextmanager
def kafka_errors(plan: BatchPlan):
    """Spark contacts Kafka lazily (when the read is planned and run) and writes to the tables at the
    end of the same job: a Kafka or storage failure there (``tidemark.batch.spark.batch_io.jvm_failure``) becomes an
    error that names the batch and says what happens next."""
    try:
        yield
    except TidemarkError:
        raise
    except Exception as exc:
        failure = batch_io.jvm_failure(exc)
        fields = {"pipeline": plan.pipeline, "batch_id": plan.batch_id}
        if failure is None or failure.kind in ("bad_record", "concurrent_write", "concurrent_rewrite"):
            raise
        if failure.kind == "kafka_auth":
            raise KafkaAuthenticationError(
                f"batch {plan.batch_id}: Kafka refused the credentials of the Kafka connection ({failure.cause}). "
                f"Nothing was written or committed; the batch stays planned and is read again once the connection's "
                f"credentials (sasl.jaas.config, or its TLS certificates and key) are fixed.", **fields) from None
        if failure.kind == "missing_bucket":
            raise StorageLocationError(
                f"batch {plan.batch_id}: a table's bucket does not exist ({failure.cause}). Nothing was committed; "
                f"fix the table's location or create the bucket, then run again.", **fields) from None
        raise KafkaUnavailableError(
            f"batch {plan.batch_id}: Spark could not read {describe_ranges(plan.ranges)} from Kafka within about "
            f"{plan.kafka_timeout_seconds} s ({failure.cause}). Nothing was written or committed; the batch stays "
            f"planned and the next attempt (an Airflow retry or the next run) reads the same frozen ranges. Check "
            f"the Kafka connection and that the brokers are up.", **fields) from None


def cached_and_counted(rows, plan: BatchPlan) -> tuple[object, dict[TopicPartition, Tally], int]:
    """The batch cached, its good and bad records counted per partition and checked against the frozen ranges
    (before anything is written); under ``on_bad_record: fail`` a bad record fails it here. Returns the cached
    rows (the caller unpersists them), the counts and the number of bad records."""
    with kafka_errors(plan):
        rows = rows.persist()
    try:
        with kafka_errors(plan):
            tallies = batch_io.tally(rows)
        bad = checked(plan, rows, tallies)
    except BaseException:
        rows.unpersist()
        raise
    return rows, tallies, bad


def nothing_left(plan: BatchPlan, tallies: dict[TopicPartition, Tally]) -> bool:
    """Whether a re-read batch found every record of its ranges already written (then no table is written: a
    batch with nothing new makes no commit, as an empty incremental run makes none); logged when so."""
    if any(t.records for t in tallies.values()):
        return False
    log.info("pipeline '%s': batch %d: every record of its ranges is already in the output or the dead letters; "
             "no table is written", plan.pipeline, plan.batch_id)
    return True


def checked(plan: BatchPlan, rows, tallies: dict[TopicPartition, Tally], records: int | None = None) -> int:
    """What Spark read of the batch (``tallies`` per partition, ``records`` in all when it counted them) checked
    against the frozen ranges (``check_read``) and logged; under ``on_bad_record: fail`` a bad record fails the
    batch here. Returns the number of bad records."""
    check_read(plan, tallies, records=records)
    bad = sum(t.bad for t in tallies.values())
    log.info("pipeline '%s': batch %d read %d records (%d bad) from %d offsets", plan.pipeline, plan.batch_id,
             sum(t.records for t in tallies.values()), bad, plan.total_offsets)
    if bad and plan.format.on_bad_record == "fail":
        raise bad_records_error(plan, rows)
    return bad


def bad_records_error(plan: BatchPlan, rows) -> BadRecordsError:
    """The error of ``on_bad_record: fail``: how many bad records and the first ones (a second read
    of the batch, made only once the batch has failed)."""
    bad = rows.where("error IS NOT NULL").count()
    return BadRecordsError(
        f"batch {plan.batch_id} has {bad} bad record(s) and on_bad_record is 'fail'; nothing was "
        f"written. First: {'; '.join(batch_io.bad_examples(rows))}. Fix the producer, or set "
        f"'on_bad_record: dead_letter' to divert them to {plan.dead_letter_uri}.", pipeline=plan.pipeline)


def stored(written: dict[TopicPartition, Tally], dead: dict[TopicPartition, Tally]) -> dict[TopicPartition, Tally]:
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
