"""``maintenance:`` of a pipeline file (``MaintenanceConfig``), off unless the file has it, and the VACUUM floor
it is checked against. What maintenance does with it lives in ``tidemark.operations.table_maintenance``; this module
needs no other Tidemark module, so the pipeline's model (``tidemark.config.pipeline``) can hold it without a loop back.

    maintenance:
      optimize_every: 24h                       # the maintenance DAG's schedule
      zorder_by: [kafka_partition, kafka_offset]  # optional; without it, bin-packing only
      vacuum_retain: 168h                       # optional; without it, no VACUUM
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from tidemark.config.value_types import Duration, Every

VACUUM_FLOOR = dt.timedelta(days=7)
"""The shortest VACUUM retention Tidemark accepts: Delta's own default ``deletedFileRetentionDuration``
(7 days), which Spark's and delta-rs' VACUUM both enforce unless told not to. Replay and recovery read the
current snapshot and Kafka, never an old version of the output; what the floor protects is every reader
and writer still working on an older snapshot (a long query, a stalled ingest job, time travel)."""


def hours(duration: dt.timedelta) -> str:
    return f"{duration.total_seconds() / 3600:g}h"


class MaintenanceConfig(BaseModel):
    """``maintenance:`` of a pipeline file. Absent: no maintenance DAG."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    optimize_every: Every
    """How often the maintenance DAG runs OPTIMIZE (and VACUUM and the checkpoints): ``24h``, ``7d``, ..."""

    zorder_by: list[str] = Field(default_factory=list)
    """Output columns to Z-order the files by (delta-rs ``z_order``; rewrites every file of the table at each
    run); none: bin-packing compaction only, which rewrites only the small files."""

    vacuum_retain: Duration | None = None
    """VACUUM of the output, the dead letters and the (shared) ledger: delete files no version of the last
    ``vacuum_retain`` references; at least 168h (7 days).
    None (the default): no VACUUM, old files stay (time travel to any version still in the log)."""

    def check(self, pipeline: str, partition_by: Sequence[str], columns: Sequence[str] | None) -> None:
        """The checks that need the rest of the pipeline file: the VACUUM floor, and the Z-order columns against
        ``partition_by`` and the output's ``columns`` (None when only the plan knows them: Avro)."""
        where = f"pipeline '{pipeline}': maintenance"
        if self.vacuum_retain is not None and self.vacuum_retain < VACUUM_FLOOR:
            raise ValueError(
                f"{where}.vacuum_retain is {hours(self.vacuum_retain)}, shorter than the floor of "
                f"{hours(VACUUM_FLOOR)} (7 days, Delta's default deletedFileRetentionDuration): a shorter VACUUM can "
                f"delete files an ingest job or a reader of an older version still needs. Use {hours(VACUUM_FLOOR)} "
                f"or more, or leave vacuum_retain out (no VACUUM)")
        for column in self.zorder_by:
            if column in partition_by:
                raise ValueError(f"{where}.zorder_by: '{column}' is a partition column (partition_by); Z-order "
                                 f"the files inside partitions by other columns")
            if columns is not None and column not in columns:
                raise ValueError(f"{where}.zorder_by: '{column}' is not an output column (one of "
                                 f"{', '.join(columns)})")
        if len(set(self.zorder_by)) != len(self.zorder_by):
            raise ValueError(f"{where}.zorder_by lists a column more than once")
