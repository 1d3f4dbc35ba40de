"""Execute: the Spark part of a batch, given a SparkSession. Reads exactly the frozen ranges, writes them
with the batch's write mode (``tidemark.batch.modes``: the output commit, with the batch's idempotency
marker, is the commit point; dead letters before or after it, as the mode says), then finalizes (the ledger
commit). The Spark job (``tidemark_spark.ingest_job``) only parses its arguments, builds the session and calls
``execute_batch``; tests call it with their own session.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from tidemark import fault_injection
from tidemark.batch.finalize import finalize_batch
from tidemark.batch.modes import mode_for
from tidemark.batch.modes.base import check_plan_is_frozen, read_rows
from tidemark.batch.plan import BatchPlan
from tidemark.batch.tables import output_txn_version
from tidemark.storage import ObjectStore

log = logging.getLogger(__name__)


def execute_batch(spark, plan: BatchPlan, properties: Mapping[str, str], store: ObjectStore | None = None) -> None:
    """Execute one frozen batch with the given SparkSession and commit it: read exactly its ranges
    from Kafka (with the plan's isolation level), write them with the batch's mode (the output commit is the
    commit point), then finalize (ledger commit). A batch whose marker is already in the output is only
    completed (its dead letters) and finalized. Idempotent.
    ``store``: the object store of tables on S3 (delta-rs' reads of the ledger and the markers)."""
    mode = mode_for(plan)
    marker = output_txn_version(plan.table_uri, plan.pipeline, store)
    if marker is not None and marker >= plan.batch_id:
        log.warning("pipeline '%s': batch %d is already in the output table; only %sthe ledger %s brought up to "
                    "date", plan.pipeline, plan.batch_id, "the dead letters and " if plan.format.can_reject else "",
                    "are" if plan.format.can_reject else "is")
        mode.complete(spark, plan, properties, store)
        finalize_batch(plan, store=store)
    else:
        check_plan_is_frozen(plan, store)
        log.info("pipeline '%s': batch %d: reading %d offsets of %d partition(s) from Kafka (%s)", plan.pipeline,
                 plan.batch_id, plan.total_offsets, len(plan.ranges), mode.name)
        fault_injection.crash_when_spark_is_busy(fault_injection.DURING_READ, spark)
        counted = mode.write(spark, read_rows(spark, plan, properties), plan, properties, store)
        finalize_batch(plan, counted.tallies, counted.records_read, bad_read=counted.bad_read, store=store)
    fault_injection.crash_point(fault_injection.AFTER_LEDGER_COMMIT)
