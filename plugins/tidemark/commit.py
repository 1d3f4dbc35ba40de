"""The commit protocol (see docs/DESIGN.md).

* The commit point of batch N is the output table's own Delta commit carrying the idempotency
  marker ``txnAppId = <pipeline>``, ``txnVersion = N`` and the batch's ranges in ``userMetadata``.
* The ledger's planned rows of batch N are flipped to committed afterwards, idempotently.
* Recovery (start of every run): a planned batch whose marker is in the output table is rolled
  forward; one whose marker is not is executed again with the same frozen ranges.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Literal

from tidemark import faults
from tidemark.ledger import Ledger
from tidemark.offsets import OffsetRange, TopicPartition

log = logging.getLogger(__name__)

METADATA_KEY = "tidemark"


@dataclass
class BatchPlan:
    """A frozen batch, as handed from the plan task to the ingest job (no secrets in it)."""

    pipeline: str
    batch_id: int
    table_uri: str
    ledger_uri: str
    ranges: list[OffsetRange] = field(default_factory=list)
    recovered: bool = False
    run_id: str | None = None
    """The run that owns (froze or took over) the batch; only it may execute the batch."""

    @property
    def is_empty(self) -> bool:
        return all(r.size == 0 for r in self.ranges)

    @property
    def total_offsets(self) -> int:
        return sum(r.size for r in self.ranges)

    def to_json(self) -> str:
        data = dict(self.__dict__, ranges=[r.to_dict() for r in self.ranges])
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> BatchPlan:
        data = json.loads(text)
        data["ranges"] = [OffsetRange.from_dict(r) for r in data["ranges"]]
        return cls(**data)

    def commit_metadata(self) -> str:
        """The ``userMetadata`` of the output commit: which batch and ranges it holds."""
        return json.dumps({METADATA_KEY: {"pipeline": self.pipeline, "batch_id": self.batch_id,
                                          "ranges": [r.to_dict() for r in self.ranges]}}, sort_keys=True)


Recovery = Literal["none", "roll_forward", "re_execute"]


def decide_recovery(pending_batch_id: int | None, output_txn_version: int | None) -> Recovery:
    """What to do with an unfinished batch, from the ledger's pending batch and the output
    table's idempotency marker for the pipeline."""
    if pending_batch_id is None:
        return "none"
    if output_txn_version is not None and output_txn_version >= pending_batch_id:
        return "roll_forward"
    return "re_execute"


def output_txn_version(table_uri: str, pipeline: str) -> int | None:
    """The highest batch id the output table has committed for this pipeline (None if none)."""
    from deltalake import DeltaTable

    try:
        table = DeltaTable(table_uri)
    except Exception as exc:
        if type(exc).__name__ == "TableNotFoundError":
            return None
        raise
    return table.transaction_version(pipeline)


def count_batch_records(table_uri: str, batch_id: int) -> dict[TopicPartition, int]:
    """Records per partition that the output table holds for one batch (delta-rs, no JVM)."""
    from deltalake import DeltaTable, QueryBuilder

    table = DeltaTable(table_uri)
    reader = QueryBuilder().register("output", table).execute(
        "SELECT kafka_topic, kafka_partition, COUNT(*) AS n FROM output "
        f"WHERE ingest_batch_id = {int(batch_id)} GROUP BY kafka_topic, kafka_partition")
    import pyarrow as pa

    return {TopicPartition(r["kafka_topic"], int(r["kafka_partition"])): int(r["n"])
            for r in pa.table(reader.read_all()).to_pylist()}


def finalize_batch(plan: BatchPlan) -> bool:
    """Flip the batch's ledger rows to committed with the record counts found in the output.
    Idempotent; returns False when the ledger already had the batch committed."""
    counts = count_batch_records(plan.table_uri, plan.batch_id)
    per_range = {r.tp: counts.get(r.tp, 0) for r in plan.ranges}
    faults.crash_soon(faults.DURING_LEDGER_COMMIT)
    changed = Ledger(plan.ledger_uri).mark_committed(plan.pipeline, plan.batch_id, per_range)
    log.info("pipeline '%s': batch %d %s in the ledger (%d records)", plan.pipeline, plan.batch_id,
             "committed" if changed else "was already committed", sum(per_range.values()))
    return changed
