"""Dead letters from what the one pass carried: a batch of values that can be bad writes its good records in one
pass over Kafka, and that pass brings its bad records to the driver with its counts
(``tidemark.batch.spark.tally.write_output_tallying``) when they are few and small. They are written here, after the
output commit as before, with delta-rs: one commit of the dead-letter table with the batch's marker, no Spark job and no
second read of Kafka. The order of the commits, the markers and recovery are those of the read-again path
(``modes.checked_append.write_checked_in_one_pass``): a crash between the output commit and this one leaves the
dead letters to the next attempt, which reads them again (``modes.base.complete_dead_letters``)."""

from __future__ import annotations

from collections.abc import Sequence

from tidemark import storage
from tidemark.batch.plan import BatchPlan
from tidemark.errors import ConcurrentBatchWriteError
from tidemark.storage import ObjectStore


def arrow_schema():
    """The dead-letter table's columns as Spark writes them (``tidemark.batch.spark.batch_io.write_dead_letters``), for
    a table that does not exist yet."""
    import pyarrow as pa

    timestamp = pa.timestamp("us", tz="UTC")
    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    return pa.schema([("pipeline", pa.string()), ("kafka_topic", pa.string()), ("kafka_partition", pa.int32()),
                      ("kafka_offset", pa.int64()), ("kafka_timestamp", timestamp), ("kafka_key", pa.binary()),
                      ("kafka_headers", pa.list_(header)), ("value", pa.binary()), ("error", pa.string()),
                      ("ingest_batch_id", pa.int64()), ("ingested_at", timestamp)])


def rows(plan: BatchPlan, carried: Sequence[dict]) -> list[dict]:
    """The dead-letter rows of the carried bad records (pure): the plan's pipeline and batch id added, the
    timestamps (microseconds) left as numbers, which Arrow takes for its timestamp type."""
    return [{"pipeline": plan.pipeline, **{name: record[name] for name in record},
             "ingest_batch_id": plan.batch_id} for record in carried]


def beside_spark(dead_letter_uri: str, spark_log_store: str | None) -> bool:
    """Whether delta-rs may commit to this dead-letter table beside Spark, which commits to it on the read-again
    path: always on a local disk; on object storage only when Spark commits with Tidemark's log store, whose
    conditional PUT of ``_delta_log/N.json`` is delta-rs' own. Delta's DynamoDB log store (``storage.SAFE_LOG_STORES``)
    claims a version in DynamoDB and copies the file afterwards, which delta-rs' commits would not see: with it,
    the dead letters are always read again and written by Spark."""
    return not storage.is_object_store(dead_letter_uri) or spark_log_store == storage.LOG_STORE


def check_fits(schema, columns: Sequence[str], uri: str) -> None:
    """Refuse the schema of the table at ``uri`` when it cannot take rows of these columns: a column it lacks
    (Arrow would drop it without a word) or a column of its own the rows leave null although it takes no null."""
    missing = [name for name in columns if name not in schema.names]
    required = [field.name for field in schema if field.name not in columns and not field.nullable]
    if missing or required:
        raise UnfitTableError(f"{uri}: " + "; ".join(
            ([f"it has no column {', '.join(missing)}"] if missing else [])
            + ([f"its column {', '.join(required)} takes no null"] if required else [])))


class UnfitTableError(Exception):
    """The dead-letter table cannot take the carried records as they are (a column of another type, say, in a
    table an earlier release or another tool made); nothing was committed: read the dead letters again, so that
    Spark writes them as it always has."""


def write(plan: BatchPlan, carried: Sequence[dict], store: ObjectStore | None = None) -> bool:
    """Append the carried bad records to the dead-letter table in one commit with the batch's marker
    (``txnAppId`` = pipeline, ``txnVersion`` = batch id) and its metadata, unless the marker is there already
    (another attempt wrote them). Returns whether this call wrote them; raises UnfitTableError when the table's
    columns cannot take them (before any commit)."""
    import pyarrow as pa
    from deltalake import CommitProperties, Transaction, write_deltalake
    from deltalake.exceptions import CommitFailedError, SchemaMismatchError

    table = storage.open_table(plan.dead_letter_uri, store)  # one load: the marker checked is the one written on
    if _holds(table, plan):
        return False
    schema = arrow_schema() if table is None else pa.schema(table.schema().to_arrow())
    records = rows(plan, carried)
    check_fits(schema, list(dict.fromkeys(name for row in records for name in row)), plan.dead_letter_uri)
    try:
        data = _arrow_table(records, schema, plan.dead_letter_uri)  # a column the table has beyond these: null
        write_deltalake(table if table is not None else storage.delta_rs_uri(plan.dead_letter_uri), data,
                        mode="append",
                        storage_options=None if table is not None else storage.delta_options(plan.dead_letter_uri,
                                                                                              store),
                        commit_properties=CommitProperties(
                            app_transactions=[Transaction(app_id=plan.pipeline, version=plan.batch_id)],
                            custom_metadata={"userMetadata": plan.commit_metadata()}))
    except (pa.ArrowInvalid, pa.ArrowTypeError, SchemaMismatchError) as exc:
        raise UnfitTableError(f"{plan.dead_letter_uri}: {exc}") from exc
    except CommitFailedError as exc:  # a commit delta-rs could not rebase on: another attempt's, perhaps
        if _holds(storage.open_table(plan.dead_letter_uri, store), plan):
            return False
        raise ConcurrentBatchWriteError(
            f"the dead letters could not be committed to {plan.dead_letter_uri}: another writer committed first "
            f"({exc}); nothing of this attempt was committed there, and a retry writes them",
            pipeline=plan.pipeline, batch_id=plan.batch_id, location=plan.dead_letter_uri) from None
    except OSError as exc:
        raise storage.storage_failure(exc, plan.dead_letter_uri, store, plan.pipeline) from None
    return True


def _arrow_table(records: list[dict], schema, uri: str):
    """The rows as an Arrow table of the table's schema, column by column, so that a column that cannot take
    its values is named (Arrow's own message does not name it)."""
    import pyarrow as pa

    columns = []
    for field in schema:
        try:
            columns.append(pa.array([row.get(field.name) for row in records], type=field.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise UnfitTableError(f"{uri}: its column {field.name} ({field.type}) cannot take the carried values: "
                                  f"{exc}") from exc
    return pa.Table.from_arrays(columns, schema=schema)


def _holds(table, plan: BatchPlan) -> bool:
    """Whether the dead-letter table (None: none yet) already holds this batch's marker."""
    return table is not None and (table.transaction_version(plan.pipeline) or 0) >= plan.batch_id
