"""The Spark side of a batch: the only core package that imports pyspark, always lazily and with a session it is
handed. It reads exactly a plan's frozen ranges and writes them under the batch's idempotency marker; what to
write is the write mode's choice (``tidemark.batch.modes``).

- ``batch_io``: the bounded Kafka read, the output and dead-letter writes with the marker;
- ``shaping``: the rows of a batch (metadata columns, decoded values, why a record is bad);
- ``exact_values``: values written exactly or not at all; ``protobuf_udf``: Protobuf decoded by a JVM UDF;
- ``tally``: the one pass that counts every record while it writes the good ones;
- ``change_events``: a keyed batch's records as changes (each one's operation; Debezium's change events);
- ``merge``, ``delete_markers``: a keyed batch's newest change per key, its MERGE, and remembered deletes;
- ``transform_sql``: a pipeline's SQL transform over the batch's records.
"""

__all__ = ["batch_io", "change_events", "delete_markers", "exact_values", "merge", "protobuf_udf", "shaping", "tally",
           "transform_sql"]
