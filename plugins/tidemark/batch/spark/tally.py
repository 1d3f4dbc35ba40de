"""The one pass of values that can be bad (``tidemark.batch.modes.checked_append``): the batch's
good records written while Spark tallies every record and the bad ones in an ``Observation`` of the same job,
and carries the bad records back when they are few and small. Where the bad records lie (pages of offsets,
buckets of coordinates) is what the read for the dead letters needs when they were not carried."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from tidemark.batch.plan import BatchPlan
from tidemark.batch.spark.batch_io import observed_metrics, write_observed
from tidemark.kafka.offsets import TopicPartition

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


BAD_BUCKETS = 65536
"""The buckets a bad record's Kafka coordinates are hashed into (``bad_bucket``)."""


def _bad_bucket_sql() -> str:
    return f"pmod(xxhash64(kafka_topic, kafka_partition, kafka_offset), {BAD_BUCKETS})"


def bad_bucket() -> Column:
    """A record's bucket: its Kafka coordinates hashed into one of ``BAD_BUCKETS``. The one pass
    collects the buckets of the bad records (a bounded set, however many records are bad); the read
    for the dead letters then decodes only the records of those buckets, since no other can be bad."""
    from pyspark.sql import functions as F

    return F.expr(_bad_bucket_sql())


def in_buckets(buckets: list[int]) -> Column:
    """True for a record whose ``bad_bucket`` is one of ``buckets``. One SQL expression, which Spark
    turns into a hash set: ``Column.isin`` would make a py4j call per bucket (0.35-0.57 s in the
    driver for the 991 buckets of 1,000 bad records, before the read even starts)."""
    from pyspark.sql import functions as F

    if not buckets:
        return F.lit(False)
    return F.expr(f"{_bad_bucket_sql()} IN ({', '.join(str(int(b)) for b in buckets)})")


BAD_PAGE_BITS = 10
"""The one pass notes in which pages of 2**BAD_PAGE_BITS (1,024) offsets of each partition bad records
lie, not where each one is (``write_output_tallying``): a set no larger than the batch's offsets / 1,024
however many records are bad, and a burst of bad records is read again as the few pages it spans."""


CARRIED_RECORDS = 2000
"""The one pass brings up to this many bad records to the driver with its counts (``write_output_tallying``): a
batch with no more bad records than that, each small enough (``CARRIED_BYTES``), has its dead letters written from
them (``tidemark.batch.carried``), with no second Spark job and no second read of Kafka."""
CARRIED_BYTES = 8 * 1024
"""A bad record is carried when its key, value, headers and error text take at most this many bytes together
(``carried_size``), so that what a task and the driver hold of them stays under about CARRIED_RECORDS x 8 KiB
(16 MiB), plus the fixed fields."""
CARRIED_FIELDS = ("kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp", "kafka_key", "kafka_headers",
                  "value", "error", "ingested_at")
"""What the pass carries of a bad record: its dead-letter row but the pipeline and the batch id (the plan's). The
two timestamps are carried as microseconds since the epoch (``unix_micros``), exact and free of the driver's time
zone."""


def carried_size() -> Column:
    """The bytes of a record's variable fields (key, value, header keys and values, error text), which bound what
    carrying it costs (``CARRIED_BYTES``)."""
    from pyspark.sql import functions as F

    def length(column: Column) -> Column:
        return F.coalesce(F.octet_length(column), F.lit(0))

    headers = F.aggregate("kafka_headers", F.lit(0), lambda total, h: total + length(h["key"]) + length(h["value"]))
    return length(F.col("value")) + length(F.col("kafka_key")) + length(F.col("error")) + F.coalesce(headers, F.lit(0))


def carried_record() -> Column:
    """A bad record as the pass carries it (``CARRIED_FIELDS``)."""
    from pyspark.sql import functions as F

    micros = {"kafka_timestamp", "ingested_at"}
    return F.struct(*[F.unix_micros(name).alias(name) if name in micros else F.col(name) for name in CARRIED_FIELDS])


class OnePass(NamedTuple):
    """What Spark counted while it wrote a batch's good records (``write_output_tallying``)."""

    records_read: int
    bad_records: int
    bad_spans: dict[TopicPartition, tuple[int, int]]
    """Per partition with bad records: offsets [from, to) that hold every one of them (whole pages of
    ``BAD_PAGE_BITS``, not yet clipped to the batch's range)."""
    bad_buckets: list[int]
    """The ``bad_bucket`` of every bad record."""
    carried: list[dict] | None = None
    """Every bad record (``CARRIED_FIELDS``, as dicts), when the pass carried them all; None when some were too many
    or too large to carry (the dead letters are then read again)."""


def write_output_tallying(rows: DataFrame, plan: BatchPlan) -> OnePass | None:
    """Write the batch's good rows in one pass over Kafka while Spark counts every row it read and
    the bad ones, and collects the pages (``BAD_PAGE_BITS``) and the buckets of the bad ones.
    Four aggregates whatever the number of partitions, nothing grouped or shuffled: Spark updates
    them for every row outside its generated code, so a row costs four updates (a good row: a count
    and three null tests). The records per partition come from the tables afterwards
    (``finalize_batch``). None when Delta skipped the write (the output already holds the batch)."""
    from pyspark.sql import functions as F

    bad = F.col("error").isNotNull()
    page = F.struct("kafka_topic", "kafka_partition", F.shiftright("kafka_offset", BAD_PAGE_BITS).alias("page"))
    carry = bad & (carried_size() <= CARRIED_BYTES)  # And stops at a good record: its size is never computed
    observed = write_observed(rows, plan, F.count(F.lit(1)).alias("total"), F.count_if(bad).alias("bad"),
                               F.collect_set(F.when(bad, page)).alias("pages"),
                               F.collect_set(F.when(bad, bad_bucket())).alias("buckets"),
                               F.min_by(F.when(carry, carried_record()), F.when(carry, F.col("kafka_offset")),
                                        CARRIED_RECORDS + 1).alias("carried"))
    if observed is None:
        return None
    spans: dict[TopicPartition, tuple[int, int]] = {}
    for topic, partition, number in observed["pages"]:
        tp, first, last = TopicPartition(topic, partition), number << BAD_PAGE_BITS, (number + 1) << BAD_PAGE_BITS
        spans[tp] = (min(first, spans[tp][0]), max(last, spans[tp][1])) if tp in spans else (first, last)
    bad_records = int(observed["bad"])
    carried = [r.asDict(recursive=True) for r in observed["carried"] or () if r is not None]
    return OnePass(int(observed["total"]), bad_records, spans, sorted(int(b) for b in observed["buckets"]),
                   carried if len(carried) == bad_records <= CARRIED_RECORDS else None)


OBSERVED_PARTITIONS = 32
"""A keyed batch of at most this many partitions is tallied per partition in the pass that reduces it to the newest
change per key (``observe_by_partition``: four aggregates per partition, updated for every record); a batch of
more is cached and tallied first, as a transformed keyed batch is."""


def observe_by_partition(rows: DataFrame, plan: BatchPlan):
    """The rows observed (an ``Observation``) per partition of the plan: records, bad records, first and last
    offset; and all records. The first action that reads the rows computes them. Returns the observed rows and a
    function that gives, once that action has run, ``(records, {partition: (records, bad, first, last)})`` for the
    partitions that had records (records of a partition outside the plan count in the first number only), or
    None when no action computed them."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    observation = Observation(f"tidemark-{plan.pipeline}-{plan.batch_id}-read")
    bad = F.col("error").isNotNull()
    aggregates = [F.count(F.lit(1)).alias("records")]
    for i, r in enumerate(plan.ranges):
        here = (F.col("kafka_topic") == r.topic) & (F.col("kafka_partition") == r.partition)
        offset = F.when(here, F.col("kafka_offset"))
        aggregates += [F.count_if(here).alias(f"n{i}"), F.count_if(here & bad).alias(f"bad{i}"),
                       F.min(offset).alias(f"lo{i}"), F.max(offset).alias(f"hi{i}")]

    def tallies() -> tuple[int, dict[TopicPartition, tuple[int, int, int | None, int | None]]] | None:
        got = observed_metrics(observation)
        if got is None:
            return None
        return int(got["records"]), {r.tp: (int(got[f"n{i}"]), int(got[f"bad{i}"]), got[f"lo{i}"], got[f"hi{i}"])
                                     for i, r in enumerate(plan.ranges) if got[f"n{i}"]}

    return rows.observe(observation, *aggregates), tallies
