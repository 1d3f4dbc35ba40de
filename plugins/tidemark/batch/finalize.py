"""Finalize: check what the tables hold for a batch against its frozen ranges, then commit the
ledger (flip the batch's planned rows to committed, with their counts). Idempotent.

The output table's Delta commit (marker ``txnAppId = <pipeline>``, ``txnVersion = <batch id>``)
is the commit point; this step only records it in the ledger, so it may run again after any
crash, from the job that wrote the batch or from a later run's recovery (docs/DESIGN.md).
"""

from __future__ import annotations

from tidemark.batch.modes import Counted, mode_for
from tidemark.batch.plan import BatchPlan
from tidemark.batch.tables import Tally
from tidemark.kafka.offsets import TopicPartition
from tidemark.storage import ObjectStore


def finalize_batch(plan: BatchPlan, tallies: dict[TopicPartition, Tally] | None = None,
                   records_read: int | None = None, *, bad_read: int | None = None,
                   store: ObjectStore | None = None) -> bool:
    """Count the batch's records in the output and the dead-letter table, check they lie within
    the frozen ranges, and flip its ledger rows to committed with those counts, as the batch's write mode
    does it (``tidemark.batch.modes``). With the ``tallies`` Spark counted before writing, or the
    ``records_read`` (and ``bad_read``: the bad records among them) it counted while writing, a mismatch
    raises ReconciliationError and leaves the ledger untouched. ``store``: the object store of tables on S3.
    Idempotent; returns False when the ledger already had the batch committed."""
    return mode_for(plan).finalize(plan, Counted(tallies, records_read, bad_read), store)
