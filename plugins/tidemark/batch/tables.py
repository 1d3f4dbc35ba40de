"""What the output and dead-letter tables hold for a batch, read with delta-rs (no JVM): the
pipeline's idempotency marker, the records and offset span per partition of one batch, and the
Delta version whose commit holds it. Shared by recovery, execute, finalize and status."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from tidemark import storage
from tidemark.batch.plan import METADATA_KEY
from tidemark.kafka.offsets import TopicPartition
from tidemark.ledger.state import RowChanges
from tidemark.storage import ObjectStore


@dataclass(frozen=True)
class Tally:
    """What Spark read (or a table holds) for one partition of a batch."""

    records: int
    bad: int
    min_offset: int | None
    max_offset: int | None
    bad_min_offset: int | None = None
    """The first and last bad record's offsets (when Spark tallied them): the dead letters lie within."""
    bad_max_offset: int | None = None


def output_txn_version(table_uri: str | None, pipeline: str, store: ObjectStore | None = None) -> int | None:
    """The highest batch id the table has committed for this pipeline (None if none, or no table)."""
    if not table_uri:
        return None
    table = storage.open_table(table_uri, store)
    return None if table is None else table.transaction_version(pipeline)


def batch_tallies(table_uri: str | None, batch_id: int, store: ObjectStore | None = None, *, distinct: bool = False
                  ) -> dict[TopicPartition, Tally]:
    """Records and offset span per partition that a table (output or dead letters) holds for one
    batch; empty if the table does not exist. ``distinct``: count coordinates, not rows (a transform's
    output, where one record may give several rows)."""
    if not table_uri:
        return {}
    import pyarrow as pa
    from deltalake import QueryBuilder

    table = storage.open_table(table_uri, store)
    if table is None:
        return {}
    reader = QueryBuilder().register("output", table).execute(
        f"SELECT kafka_topic, kafka_partition, {'COUNT(DISTINCT kafka_offset)' if distinct else 'COUNT(*)'} AS n, "
        "MIN(kafka_offset) AS lo, MAX(kafka_offset) AS hi "
        f"FROM output WHERE ingest_batch_id = {int(batch_id)} GROUP BY kafka_topic, kafka_partition")
    rows = pa.table(reader.read_all()).to_pylist()
    return {TopicPartition(r["kafka_topic"], int(r["kafka_partition"])):
            Tally(int(r["n"]), 0, int(r["lo"]), int(r["hi"])) for r in rows}


def count_batch_records(table_uri: str | None, batch_id: int, store: ObjectStore | None = None
                        ) -> dict[TopicPartition, int]:
    """Records per partition that a table holds for one batch."""
    return {tp: t.records for tp, t in batch_tallies(table_uri, batch_id, store).items()}


def dead_letters_settled(table_uri: str, dead_letter_uri: str | None, pipeline: str, batch_id: int,
                         total_offsets: int, store: ObjectStore | None = None) -> bool:
    """Whether a batch the output holds needs no more dead letters: the dead-letter table's marker is at
    it, or the output holds a good record for every offset of its ranges (``total_offsets``), so none of
    them can be bad. A batch killed between its output commit and its dead letters (values that can be
    bad are written output first) is then finalized without reading Kafka again."""
    if (output_txn_version(dead_letter_uri, pipeline, store) or 0) >= batch_id:
        return True
    held = batch_tallies(table_uri, batch_id, store, distinct=True)  # by coordinate: a transform's record has many rows
    return total_offsets > 0 and sum(t.records for t in held.values()) == total_offsets


RECENT_COMMITS = 5
"""The commits `_batch_commit` reads first, before the last ``depth``."""


def _batch_commit(table_uri: str, pipeline: str, batch_id: int, store: ObjectStore | None, depth: int
                  ) -> tuple[dict, dict] | None:
    """(commit info, held metadata) of the table's commit that holds the batch (its ``userMetadata`` names the
    pipeline and batch id, ``BatchPlan.commit_metadata``), among the last ``depth`` commits; None if none. The
    newest few commits are looked at first: a batch just committed is among them, and each commit looked at is a
    read of its log file (a GET on object storage)."""
    table = storage.open_table(table_uri, store)
    if table is None:
        return None
    for limit in sorted({min(RECENT_COMMITS, depth), depth}):
        for commit in table.history(limit):
            try:
                held = json.loads(commit.get("userMetadata") or "{}").get(METADATA_KEY) or {}
            except (ValueError, AttributeError):
                continue
            if held.get("pipeline") == pipeline and held.get("batch_id") == batch_id:
                return commit, held
    return None


def output_version(table_uri: str, pipeline: str, batch_id: int, store: ObjectStore | None = None,
                   depth: int = 100) -> int | None:
    """The output table's Delta version whose commit holds the batch; None if none of the last ``depth``
    commits does (a batch that found every record already in the output commits nothing new)."""
    found = _batch_commit(table_uri, pipeline, batch_id, store, depth)
    return None if found is None else found[0].get("version")


def row_changes(commit: Mapping) -> RowChanges | None:
    """What a keyed batch's commit did to the table's rows, from its commit info (pure): a MERGE's operation
    metrics (``numTargetRowsInserted``, ``...Updated``, ``...Deleted``: strings in the Delta log); the append that
    created the table inserted ``numOutputRows``. None when the commit has no such metrics (Delta's
    ``spark.databricks.delta.history.metricsEnabled`` off, or another operation)."""
    metrics = commit.get("operationMetrics") or {}
    try:
        if commit.get("operation") == "MERGE":
            return RowChanges(*(int(metrics[f"numTargetRows{n}"]) for n in ("Inserted", "Updated", "Deleted")))
        if commit.get("operation") == "WRITE":
            return RowChanges(int(metrics["numOutputRows"]), 0, 0)
    except (KeyError, TypeError, ValueError):
        return None
    return None


@dataclass(frozen=True)
class KeyedCommit:
    """A keyed table's commit of one batch, as finalize reads it back."""

    records: dict[TopicPartition, int] | None
    """The good records the batch applied per partition (its ``userMetadata``); None when it lacks them."""
    changes: RowChanges | None
    """Rows inserted, updated and deleted (``row_changes``)."""
    filtered: dict[TopicPartition, int] | None = None
    """A keyed table's transform: the good upserts it gave no row, per partition (its ``userMetadata``)."""


def keyed_commit(table_uri: str, pipeline: str, batch_id: int, store: ObjectStore | None = None,
                 depth: int = 100) -> KeyedCommit | None:
    """The keyed table's commit of the batch among its last ``depth`` (one history scan); None when none holds
    it. Delta commits even a MERGE of no change (its marker must land), so a batch that reached its commit
    point has one."""
    found = _batch_commit(table_uri, pipeline, batch_id, store, depth)
    if found is None:
        return None
    commit, held = found
    records, filtered = (_per_partition(held[k]) if k in held else None for k in ("records", "filtered"))
    return KeyedCommit(records, row_changes(commit), filtered)


def _per_partition(counts: Mapping[str, int]) -> dict[TopicPartition, int]:
    return {TopicPartition(k.rpartition(":")[0], int(k.rpartition(":")[2])): int(n) for k, n in counts.items()}
