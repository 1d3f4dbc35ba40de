"""``tidemark audit PIPELINE --verify-sample N`` on a keyed table: N keys, picked at random among those with a
change that Kafka still holds, each compared with the newest change of that key in the committed ranges.

A keyed table holds one row per key, the newest change by the pipeline's ordering (docs/DESIGN.md, *Keyed
tables*), not every record of a range, so its sample is of keys, not ranges:

* **What is read.** Every committed batch and backfill offset that Kafka still holds (``retained_pieces``):
  each committed range's offsets that no earlier range covered (a replay or backfill re-reads offsets; each
  is read once, with the format of the first batch that read it, the one that applied it) and that are at
  or after the partition's earliest offset. A range whose start retention deleted is read from the earliest
  offset on; ranges of an older incarnation of a recreated topic are left out, as the ledger's state leaves
  them. Consecutive pieces of one partition with the same format are one read.
* **Against one snapshot.** Batches go on MERGEing while the audit runs (a scheduled audit beside hourly
  batches), and a newer change in the table is not damage. So the table's version and its marker (the highest
  batch it merged) are read first, the ledger after them, and only ranges of batches up to the marker count
  (a batch still planned whose MERGE is in the snapshot too: recovery rolls it forward); Spark reads the table
  at that version.
* **Reduced** in Spark (``tidemark_spark.audit_keys``) by the ingest decoder (``tidemark.batch.spark.shaping.to_rows``,
each
  read with its batch's format, as the typed audit decodes: ``tidemark.audit.typed_sample.batch_formats``) and
  ``tidemark.batch.spark.merge.newest_changes`` with no high water: the newest good change per key, by the ordering,
  then the Kafka offset.
* **Compared** (``judge_keys``, pure): a key whose newest change is an upsert must be held by exactly one row,
  equal in the change's coordinates (``kafka_topic``, ``kafka_partition``, ``kafka_offset``), timestamp, key,
  headers and every payload column (a 64-bit hash per column on each side, as the typed audit compares); a
  key whose newest change is a delete must have no row.

**Not retained.** ``not_retained`` counts the committed ranges with records whose start Kafka no longer
holds (as for ranges). A key all of whose changes are at offsets Kafka no longer holds is not in what was
read and cannot be picked. Under the default ordering (the Kafka position, one partition per key) a key with
any change still held has its newest change held too (retention deletes the oldest offsets first), so the
comparison is exact. Under ``order_by`` or Debezium's ordering a change that retention deleted may be newer
by the ordering than every change still held (a late producer, a key that moved partitions): such a key can
show as differing once committed records were deleted. On a compacted topic, compaction keeps the newest
record per Kafka key: when the Kafka key is the table's key and the ordering is the Kafka position, each
key's newest change survives (a deleted key whose tombstone was removed too is simply not read); otherwise a
change compacted away can show as differing, as compacted records do in the ranges' sample. Batches whose
format cannot be rebuilt (``batch_formats``) are not read (``not_comparable``): a key changed there can show as
differing too.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping

from tidemark import storage
from tidemark.audit.typed_sample import ValueCheck, batch_formats
from tidemark.config.pipeline import PipelineConfig
from tidemark.formats.record_format import RecordFormat
from tidemark.kafka.offsets import TopicPartition
from tidemark.ledger.state import COMMITTED, PLANNED, WRITING_KINDS, LedgerRow
from tidemark.ledger.store import Ledger
from tidemark.storage import ObjectStore

COORDINATES = ("kafka_topic", "kafka_partition", "kafka_offset")
"""Compared first for a key's row: it holds the coordinates of the change that wrote it."""
CHANGES = {"u": "upsert", "d": "delete"}
ROW_MISSING, ROW_DELETED = "row missing", "row present but deleted"


def _uncovered(start: int, end: int, covered: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of ``[start, end)`` outside every interval of ``covered``."""
    parts, at = [], start
    for s, e in sorted(covered):
        if e <= at:
            continue
        if s >= end:
            break
        if s > at:
            parts.append((at, s))
        at = max(at, e)
    if at < end:
        parts.append((at, end))
    return parts


def _is_applied(row: LedgerRow, through: int | None) -> bool:
    """Whether the table's snapshot holds what this ledger row wrote: a batch or backfill committed, or planned
    with its MERGE in the snapshot (``through``: the snapshot's marker, the highest batch it merged; recovery rolls
    such a batch forward); a batch the snapshot does not hold yet (``through`` lower) is left out."""
    if row.kind not in WRITING_KINDS or row.status not in (COMMITTED, PLANNED):
        return False
    if through is None:
        return row.status == COMMITTED
    return row.batch_id <= through


def _may_hold_records(row: LedgerRow) -> bool:
    """A range with records, or whose count is not known (a planned batch's is counted when it commits)."""
    return row.record_count != 0


def retained_pieces(rows: list[LedgerRow], earliest: Mapping[TopicPartition, int], through: int | None = None
                    ) -> tuple[list[dict], int]:
    """What a keyed sample reads: ``{topic, partition, start, end, batch_id}`` per piece of a range with records
    that the table's snapshot holds (``_is_applied``), that no earlier range covered and that Kafka still holds
    (``earliest``: per partition, its first offset); and how many of those ranges Kafka no longer holds from
    their start."""
    covered: dict[TopicPartition, list[tuple[int, int]]] = {}
    topic_ids: dict[str, str] = {}
    pieces: list[dict] = []
    current: list[LedgerRow] = []
    with_records = 0
    for row in sorted(rows, key=lambda r: (r.batch_id, r.topic, r.partition)):
        if row.topic_id:
            if topic_ids.get(row.topic, row.topic_id) != row.topic_id:  # a recreated topic: its old offsets go
                pieces = [p for p in pieces if p["topic"] != row.topic]
                covered = {tp: c for tp, c in covered.items() if tp.topic != row.topic}
                current = [r for r in current if r.topic != row.topic]
            topic_ids[row.topic] = row.topic_id
        if not _is_applied(row, through):
            continue
        seen = covered.setdefault(row.tp, [])
        if _may_hold_records(row) and row.tp in earliest:
            pieces += [{"topic": row.topic, "partition": row.partition, "start": s, "end": e, "batch_id": row.batch_id}
                       for s, e in _uncovered(max(row.start_offset, earliest[row.tp]), row.end_offset, seen)]
        seen.append((row.start_offset, row.end_offset))
        current.append(row)
        with_records += _may_hold_records(row)
    held = [r for r in current if _may_hold_records(r) and r.tp in earliest and r.start_offset >= earliest[r.tp]]
    return pieces, with_records - len(held)


def merge_pieces(pieces: list[dict], formats: Mapping[int, RecordFormat]) -> list[dict]:
    """Consecutive pieces of one partition whose batches decode alike, as one (it keeps the first's batch id);
    pieces of batches without a format (``batch_formats`` refused them) are left out."""
    merged: list[dict] = []
    for p in sorted((p for p in pieces if p["batch_id"] in formats),
                    key=lambda p: (p["topic"], p["partition"], p["start"])):
        last = merged[-1] if merged else None
        if (last is not None and (last["topic"], last["partition"], last["end"]) == (p["topic"], p["partition"],
                                                                                      p["start"])
                and formats[last["batch_id"]].to_dict() == formats[p["batch_id"]].to_dict()):
            last["end"] = p["end"]
        else:
            merged.append(dict(p))
    return merged


def build_key_check(config: PipelineConfig, pieces: list[dict], formats: Mapping[int, RecordFormat], count: int,
                    seed: int, table_version: int | None = None) -> ValueCheck:
    """The keyed check handed to Spark: the pieces to read, each batch's format, how many keys, which ones, and
    the table's version to compare with."""
    return ValueCheck(config.name, config.table_uri, config.dead_letter_uri, pieces,
                      {str(b): formats[b].to_dict() for b in sorted({p["batch_id"] for p in pieces})}, [],
                      config.isolation_level, config.kafka_timeout_seconds, config.max_offsets_per_spark_task,
                      sample_keys=count, keyed=True, seed=seed, table_version=table_version)


def key_difference(op: str, kafka: list[int], held: list[list[int]], columns: list[str]
                   ) -> tuple[str, list[str]] | None:
    """Why a sampled key's rows differ from its newest change (``op``: ``u`` or ``d``; ``kafka`` and each of
    ``held``: a hash per compared column), and the columns that differ; None when they agree."""
    if op == "d":
        return (ROW_DELETED + (f" ({len(held)} rows)" if len(held) > 1 else ""), []) if held else None
    if not held:
        return ROW_MISSING, []
    if len(held) > 1:
        return f"held by {len(held)} rows (a key is one row)", []
    differ = [c for c, a, b in zip(columns, kafka, held[0], strict=True) if a != b]
    return (f"values differ: {', '.join(differ)}", differ) if differ else None


def judge_keys(answer: Mapping) -> list[dict]:
    """The sampled keys that differ, from Spark's answer (``columns``: the compared columns; ``sampled``: per
    key, ``key``, the newest change's ``topic``, ``partition``, ``offset`` and ``op``, its hashes ``kafka`` and
    the hashes of each row the table holds for the key, ``table``)."""
    found = []
    for s in answer["sampled"]:
        difference = key_difference(s["op"], s["kafka"], s["table"], answer["columns"])
        if difference is not None:
            found.append({"key": s["key"], "topic": s["topic"], "partition": s["partition"], "offset": s["offset"],
                          "change": CHANGES.get(s["op"], s["op"]), "table_rows": len(s["table"]),
                          "columns": difference[1], "reason": difference[0]})
    return sorted(found, key=lambda m: (m["topic"], m["partition"], m["offset"]))


def verify_keys(config: PipelineConfig, kafka_properties: Mapping[str, str], ledger_uri: str,
                store: ObjectStore | None, count: int, rng: random.Random | None = None,
                values: Callable[[ValueCheck], dict] | None = None) -> dict:
    """The ``sample`` part of a keyed table's audit report: ``count`` keys (0: none) compared with their newest
    change in what Kafka still holds, and every key the table holds whose newest change there is a delete
    (``deleted_keys_present``, the first ``deleted_keys``). ``values`` runs the Spark side
    (``tidemark_spark.audit_decode.launch``): one job reads every committed offset Kafka still holds."""
    from tidemark.batch.prepare import kafka_offsets

    output = storage.open_table(config.table_uri, store)  # first: the ledger read next holds every batch it merged
    version, through = (None, None) if output is None else (output.version(), output.transaction_version(config.name))
    rows = Ledger(ledger_uri, store).rows(config.name)
    ranges = [r for r in rows if _may_hold_records(r) and _is_applied(r, through)]
    formats, refused = batch_formats(config, ranges, store)
    with kafka_offsets(config, kafka_properties) as kafka:
        earliest = kafka.earliest(sorted({r.tp for r in ranges}))
    pieces, gone = retained_pieces(rows, earliest, through)
    pieces = merge_pieces(pieces, formats)
    sample = {"requested": count, "verified": 0, "not_retained": gone, "values_compared": True, "keys_read": 0,
              "mismatches": [], "deleted_keys_present": 0, "deleted_keys": []}
    if pieces and values is not None:  # with or without a sample: every key whose newest change is a delete
        seed = (rng or random.Random()).getrandbits(31)
        answer = values(build_key_check(config, pieces, formats, count, seed, version))
        sample.update(verified=len(answer["sampled"]), keys_read=answer["keys_read"], mismatches=judge_keys(answer),
                      deleted_keys_present=answer["deleted_present"], deleted_keys=answer["deleted_keys"])
    if refused:
        sample["not_comparable"] = [{"batch_id": b, "reason": why} for b, why in sorted(refused.items())]
    return sample
