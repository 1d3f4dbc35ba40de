"""Dead letters from what the one pass carried: a batch of values that can be bad writes its good records in one
pass over Kafka, and that pass brings its bad records to the driver with its counts
(``spark_tally.write_output_tallying``) when they are few and small. They are written here, after the output commit
as before, with delta-rs: one commit of the dead-letter table with the batch's marker, no Spark job and no second
read of Kafka. The order of the commits, the markers and recovery are those of the read-again path
(``execute.write_checked_in_one_pass``): a crash between the output commit and this one leaves the dead letters to
the next attempt, which reads them again (``execute.complete_dead_letters``)."""

from __future__ import annotations

from collections.abc import Sequence

from tidemark import storage
from tidemark.batch.plan import BatchPlan
from tidemark.storage import ObjectStore


def arrow_schema():
    """The dead-letter table's columns as Spark writes them (``spark_io.write_dead_letters``), for a table that
    does not exist yet."""
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
    from deltalake.exceptions import SchemaMismatchError

    table = storage.open_table(plan.dead_letter_uri, store)  # one load: the marker checked is the one written on
    if table is not None and (table.transaction_version(plan.pipeline) or 0) >= plan.batch_id:
        return False
    schema = arrow_schema() if table is None else pa.schema(table.schema().to_arrow())
    try:
        data = pa.Table.from_pylist(rows(plan, carried), schema=schema)  # a column the table has beyond these: null
        write_deltalake(table if table is not None else storage.delta_rs_uri(plan.dead_letter_uri), data,
                        mode="append",
                        storage_options=None if table is not None else storage.delta_options(plan.dead_letter_uri,
                                                                                              store),
                        commit_properties=CommitProperties(
                            app_transactions=[Transaction(app_id=plan.pipeline, version=plan.batch_id)],
                            custom_metadata={"userMetadata": plan.commit_metadata()}))
    except (pa.ArrowInvalid, pa.ArrowTypeError, SchemaMismatchError) as exc:
        raise UnfitTableError(f"{plan.dead_letter_uri}: {exc}") from exc
    return True
