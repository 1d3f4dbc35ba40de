"""The audit (``tidemark audit PIPELINE``): a live output table checked, after the fact, against the ledger and,
with ``--verify-sample N``, against Kafka. Read-only: it never writes a table or the ledger; damage is named with
its pipeline, topic, partition and offsets (``AuditDamageError``).

- ``pipeline_audit``: the whole audit of a pipeline, as ``tidemark audit`` runs it;
- ``live_table``: every committed range's records and coverage in the output and dead-letter tables;
- ``sample``: committed ranges read again from Kafka and compared record by record (order-free checksums);
- ``typed_sample``: the same for typed columns, decoded again by the ingest decoders;
- ``keyed_sample``: a keyed table's sampled keys against the newest change of each in the committed ranges.

The Spark half of the samples is ``tidemark_spark``; the schedule (``audit:``) is ``tidemark.config.audit_schedule``.
"""

__all__ = ["keyed_sample", "live_table", "pipeline_audit", "sample", "typed_sample"]
