"""``tidemark audit PIPELINE``: the live output table checked against the ledger, after the fact.

For every committed range of kind batch or backfill, the records that batch wrote (rows of the output
carrying its ``ingest_batch_id`` inside its range, plus its dead letters, plus those the pipeline's transform
filtered out, the ledger's ``filtered_count``) must number the ``record_count`` the ledger recorded, and no
Kafka coordinate may be in the output twice. Counts, not offsets, decide what is missing: transaction markers
and compaction leave offsets with no record, and a recorded gap holds none. So a range's offsets are its output
records + dead letters + filtered records + offsets without a record.

A transformed pipeline (``transformed``) may write several rows of one record (an ``explode``), all with its
coordinates and in one batch: its output records are counted by distinct coordinate, and a duplicate is a
coordinate held by rows of more than one batch.

Reported damage:
  * duplicates: (topic, partition, offset) in the output more than once, with the count (transformed: in more
    than one batch, with the number of batches);
  * missing: committed ranges whose output + dead-letter + filtered records number fewer than the ledger
    recorded;
  * outside: output rows that no ledger range of their batch covers (an offset beyond the range, or a
    batch id the ledger does not know). Rows of a batch still planned are not outside: recovery rolls it
    forward;
  * in both: Kafka coordinates in the output that are also dead letters of the pipeline (a record is in
    exactly one of them; a reprocess of dead letters killed between its output commit and its dead-letter
    update leaves this until it is run again: ``tidemark.operations.reprocessing``).

All counting happens in delta-rs' query engine (DataFusion) with the output, dead-letter and ledger tables
registered side by side; Python only receives one row per ledger range and the (bounded) damage lists, so
the audit's memory does not grow with the output. Kafka is not re-read (no content checksums).

``judge`` is the decision (pure); ``audit_tables`` runs the queries.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from tidemark import storage
from tidemark.ledger.state import COMMITTED, WRITING_KINDS, LedgerRow
from tidemark.ledger.store import Ledger
from tidemark.storage import ObjectStore

DAMAGE_LIMIT = 1000
"""At most this many duplicates and outside rows are listed (their totals are always given)."""

_Key = tuple[int, str, int]  # (batch_id, topic, partition)


@dataclass(frozen=True)
class Missing:
    topic: str
    partition: int
    start: int
    end: int
    expected: int
    found: int
    batch_id: int


@dataclass
class Findings:
    """What the queries found (counts per ledger range, and the damage lists)."""

    records: int = 0
    output_counts: dict[_Key, int] = field(default_factory=dict)
    dead_letter_counts: dict[_Key, int] = field(default_factory=dict)
    duplicates: list[dict] = field(default_factory=list)
    duplicated_offsets: int = 0
    outside: list[dict] = field(default_factory=list)
    outside_rows: int = 0
    in_both: list[dict] = field(default_factory=list)
    in_both_rows: int = 0
    duplicate_keys: list[dict] = field(default_factory=list)
    duplicate_key_rows: int = 0


DAMAGE_KINDS = {  # the report's attribute -> the words ``tidemark audit --help`` and the docs say it with
    "duplicated_offsets": "duplicated offsets",
    "missing": "committed ranges missing records",
    "outside_rows": "rows outside every committed range",
    "in_both_rows": "offsets both in the output and the dead letters",
    "sample_mismatches": "sampled ranges (keyed tables: sampled keys) that differ from what Kafka still holds",
    "duplicate_key_rows": "keys held by more than one row (keyed tables)",
    "deleted_keys_present": "keys held although their newest change still in Kafka is a delete (keyed tables)",
}
"""Every kind of damage the audit reports: ``AuditReport.ok`` is true when none is found, and the CLI's help
names each (``tests/unit/tidemark/test_live_table.py`` holds the two to this table)."""


@dataclass
class AuditReport:
    pipeline: str
    table: str
    checked_ranges: int
    records: int
    duplicates: list[dict]
    duplicated_offsets: int
    missing: list[Missing]
    outside: list[dict]
    outside_rows: int
    in_both: list[dict] = field(default_factory=list)
    in_both_rows: int = 0
    sample: dict | None = None
    """``--verify-sample``: ranges read again from Kafka and compared (``tidemark.audit.sample``), or a keyed
    table's keys compared with their newest change in what Kafka still holds (``tidemark.audit.keyed_sample``)."""
    keys: list[str] | None = None
    """A keyed table's key columns: its rows are one per key, so a range's records are not counted in it."""
    duplicate_keys: list[dict] = field(default_factory=list)
    duplicate_key_rows: int = 0
    deleted_keys_present: int | None = None
    """A keyed table's keys held although their newest change in the committed ranges Kafka still holds is a
    delete (None: not checked, no Spark job was given); ``deleted_keys``: the first of them."""
    deleted_keys: list[dict] = field(default_factory=list)
    filtered: int | None = None
    """A transformed pipeline's records its transform filtered out over the checked ranges, counted in each batch
    that read them (a replay filters and counts a record again; None: no transform);
    its output records are counted by coordinate (one record may give several rows)."""

    @property
    def sample_mismatches(self) -> list:
        return (self.sample or {}).get("mismatches") or []

    @property
    def ok(self) -> bool:
        return not any(getattr(self, kind) for kind in DAMAGE_KINDS)

    def to_dict(self) -> dict:
        return {"pipeline": self.pipeline, "table": self.table, "checked_ranges": self.checked_ranges,
                "records": self.records, "duplicates": self.duplicates, "duplicated_offsets": self.duplicated_offsets,
                "missing": [asdict(m) for m in self.missing], "outside": self.outside,
                "outside_rows": self.outside_rows, "in_both": self.in_both, "in_both_rows": self.in_both_rows,
                **({} if self.keys is None else {"keys": self.keys, "duplicate_keys": self.duplicate_keys,
                                                 "duplicate_key_rows": self.duplicate_key_rows,
                                                 "deleted_keys_present": self.deleted_keys_present,
                                                 "deleted_keys": self.deleted_keys}),
                **({} if self.filtered is None else {"filtered": self.filtered}),
                **({} if self.sample is None else {"sample": self.sample}), "ok": self.ok}


def checked_ranges(rows: list[LedgerRow]) -> list[LedgerRow]:
    """The committed ranges that wrote records (batches and backfills), in ledger order."""
    return sorted((r for r in rows if r.status == COMMITTED and r.kind in WRITING_KINDS),
                  key=lambda r: (r.batch_id, r.topic, r.partition))


def judge(pipeline: str, table: str, rows: list[LedgerRow], found: Findings,
          keys: list[str] | None = None, transformed: bool = False) -> AuditReport:
    """The verdict: a committed range is missing records when its output records, dead letters and the records
    the transform filtered out (``filtered_count``) number fewer than its recorded ``record_count`` (a range
    recorded without a count, by an old release, is not judged). A keyed table (``keys``) holds one row per key,
    the newest change: its ranges are not counted, and a key held by two rows is damage instead. A
    ``transformed`` pipeline's report says how many records its transform filtered out."""
    ranges = checked_ranges(rows)
    missing = []
    for r in ([] if keys else ranges):
        key = (r.batch_id, r.topic, r.partition)
        have = found.output_counts.get(key, 0) + found.dead_letter_counts.get(key, 0) + (r.filtered_count or 0)
        if r.record_count is not None and have < r.record_count:
            missing.append(Missing(r.topic, r.partition, r.start_offset, r.end_offset, r.record_count, have,
                                   r.batch_id))
    return AuditReport(pipeline, table, len(ranges), found.records, found.duplicates, found.duplicated_offsets,
                       missing, found.outside, found.outside_rows, found.in_both, found.in_both_rows, keys=keys,
                       duplicate_keys=found.duplicate_keys, duplicate_key_rows=found.duplicate_key_rows,
                       filtered=sum(r.filtered_count or 0 for r in ranges) if transformed else None)


def summary(report: AuditReport) -> str:
    """One line for people: the pipeline, what was checked and the verdict."""
    return f"pipeline '{report.pipeline}': {verdict(report)}"


def verdict(report: AuditReport) -> str:
    """What was checked and the verdict, without the pipeline's name (an error that names it takes this)."""
    checked = _sample_checked(report.sample)
    if report.ok and report.keys:
        deleted = ("" if report.deleted_keys_present is None else
                   ", no key held whose newest change still in Kafka is a delete")
        return (f"ok: {report.checked_ranges} committed ranges merged into {report.table}, {report.records} rows, "
                f"each key ({', '.join(report.keys)}) once, no Kafka coordinate twice{deleted}{checked}")
    if report.ok and report.filtered is not None:
        return (f"ok: {report.checked_ranges} committed ranges, {report.records} rows in {report.table} "
                f"({report.filtered} filtered by the transform, counted in each batch that read them), every "
                f"committed offset there in exactly one "
                f"batch{checked}")
    if report.ok:
        return (f"ok: {report.checked_ranges} committed ranges, {report.records} records in {report.table}, every "
                f"committed offset there exactly once{checked}")
    return (f"DAMAGE in {report.table}: {report.duplicated_offsets} duplicated offsets, {len(report.missing)} ranges "
            f"missing records, {report.outside_rows} rows outside every committed range, {report.in_both_rows} "
            f"offsets both in the output and the dead letters"
            + (f", {report.duplicate_key_rows} keys held by more than one row" if report.keys else "")
            + (f", {report.deleted_keys_present} keys held although their newest change is a delete"
               if report.deleted_keys_present else "")
            + f"{checked} (see the lists above)")


def _sample_checked(sample: dict | None) -> str:
    """What ``--verify-sample`` checked, for the verdict ('' without it)."""
    if sample is None:
        return ""
    if "keys_read" in sample:  # a keyed table's sample (tidemark.audit.keyed_sample)
        return (f"; {sample['verified']} sampled keys (of {sample['keys_read']} with a change Kafka still holds; "
                f"{sample['not_retained']} committed ranges no longer retained) compared with their newest change, "
                f"{len(sample['mismatches'])} differing")
    return (f"; {sample['verified']} sampled ranges read again from Kafka ({sample['not_retained']} no longer "
            f"retained), {len(sample['mismatches'])} differing")


# The ledger's ranges of one pipeline that wrote (or are writing) records.
_RANGES = ("SELECT batch_id, topic, \"partition\", start_offset, end_offset FROM ledger "
           "WHERE pipeline = '{pipeline}' AND kind IN ({kinds})")
_COUNTS = """
WITH r AS ({ranges})
SELECT r.batch_id AS b, r.topic AS t, r."partition" AS p, {count} AS n
FROM {table} o JOIN r ON o.ingest_batch_id = r.batch_id AND o.kafka_topic = r.topic
  AND o.kafka_partition = r."partition" AND o.kafka_offset >= r.start_offset AND o.kafka_offset < r.end_offset
{where} GROUP BY r.batch_id, r.topic, r."partition"
"""
_OUTSIDE = """
WITH r AS ({ranges}),
x AS (SELECT o.kafka_topic AS topic, o.kafka_partition AS "partition", o.kafka_offset AS "offset",
             o.ingest_batch_id AS batch_id
      FROM output o LEFT JOIN r ON o.ingest_batch_id = r.batch_id AND o.kafka_topic = r.topic
        AND o.kafka_partition = r."partition" AND o.kafka_offset >= r.start_offset AND o.kafka_offset < r.end_offset
      WHERE r.batch_id IS NULL)
"""
_IN_BOTH = """
WITH b AS (SELECT {distinct}o.kafka_topic AS topic, o.kafka_partition AS "partition", o.kafka_offset AS "offset"
           FROM output o JOIN dead d ON o.kafka_topic = d.kafka_topic AND o.kafka_partition = d.kafka_partition
             AND o.kafka_offset = d.kafka_offset WHERE d.pipeline = '{pipeline}')
"""
_DUPLICATES = """
WITH d AS (SELECT kafka_topic AS topic, kafka_partition AS "partition", kafka_offset AS "offset", {count} AS "count"
           FROM output {where} GROUP BY kafka_topic, kafka_partition, kafka_offset HAVING {count} > 1)
"""
_ROWS, _BATCHES, _COORDINATES = "COUNT(*)", "COUNT(DISTINCT ingest_batch_id)", "COUNT(DISTINCT o.kafka_offset)"
"""How the queries count: rows; for a transformed pipeline, a coordinate's batches (duplicates) and a range's
distinct offsets (its output records: one record may give several rows, all in its batch)."""
_SPANS = ("SELECT kafka_topic AS t, kafka_partition AS p, MIN(kafka_offset) AS lo, MAX(kafka_offset) AS hi "
          "FROM output GROUP BY kafka_topic, kafka_partition")
DUPLICATE_WINDOW = 1_000_000
"""Duplicates are grouped one window of this many offsets of one partition at a time, so the audit's memory does
not grow with the table (one GROUP BY over every row held every key at once: 1.2 GB of RSS at 10M rows)."""


def _rows(builder, sql: str) -> list[dict]:
    import pyarrow as pa

    return pa.table(builder.execute(sql).read_all()).to_pylist()


def _counts(builder, sql: str) -> dict[_Key, int]:
    return {(int(r["b"]), r["t"], int(r["p"])): int(r["n"]) for r in _rows(builder, sql)}


def _duplicates(builder, limit: int, window: int = DUPLICATE_WINDOW, transformed: bool = False
                ) -> tuple[list[dict], int]:
    """Coordinates in the output more than once (``transformed``: in more than one batch) (the first ``limit`` of
    them, and how many), counted one window of offsets of one partition at a time (delta-rs skips the files
    outside it by their statistics)."""
    listed, total = [], 0
    for span in sorted(_rows(builder, _SPANS), key=lambda r: (r["t"], r["p"])):
        partition = f"kafka_topic = '{span['t'].replace(chr(39), chr(39) * 2)}' AND kafka_partition = {int(span['p'])}"
        for start in range(int(span["lo"]), int(span["hi"]) + 1, window):
            duplicates = _DUPLICATES.format(
                count=_BATCHES if transformed else _ROWS,
                where=f"WHERE {partition} AND kafka_offset >= {start} AND kafka_offset < {start + window}")
            found = int(_rows(builder, f"{duplicates} SELECT COUNT(*) AS n FROM d")[0]["n"])
            if found and len(listed) < limit:
                listed += _rows(builder, f"{duplicates} SELECT * FROM d ORDER BY \"offset\" "
                                         f"LIMIT {int(limit - len(listed))}")
            total += found
    return listed, total


def _output_findings(builder, ranges: str, limit: int, transformed: bool = False) -> Findings:
    """Counts per range, duplicates and outside rows of the output table (registered as ``output``)."""
    found = Findings()
    found.records = int(_rows(builder, "SELECT COUNT(*) AS n FROM output")[0]["n"])
    found.output_counts = _counts(builder, _COUNTS.format(ranges=ranges, table="output", where="",
                                                          count=_COORDINATES if transformed else _ROWS))
    found.duplicates, found.duplicated_offsets = _duplicates(builder, limit, transformed=transformed)
    outside = _OUTSIDE.format(ranges=ranges)
    found.outside = _rows(builder, f"{outside} SELECT * FROM x ORDER BY topic, \"partition\", \"offset\" "
                                   f"LIMIT {int(limit)}")
    found.outside_rows = int(_rows(builder, f"{outside} SELECT COUNT(*) AS n FROM x")[0]["n"])
    return found


def _duplicate_keys(builder, keys: list[str], limit: int, history: bool = False) -> tuple[list[dict], int]:
    """Keys held by more than one row of a keyed table (a history table: by more than one current version) (the
    first ``limit``, and how many)."""
    columns = ", ".join(f'"{k}"' for k in keys)
    where = "WHERE is_current " if history else ""
    grouped = (f"WITH k AS (SELECT {columns}, COUNT(*) AS rows FROM output {where}GROUP BY {columns} "
               f"HAVING COUNT(*) > 1)")
    return (_rows(builder, f"{grouped} SELECT * FROM k LIMIT {int(limit)}"),
            int(_rows(builder, f"{grouped} SELECT COUNT(*) AS n FROM k")[0]["n"]))


def audit_tables(pipeline: str, table_uri: str, dead_letter_uri: str, ledger_uri: str,
                 store: ObjectStore | None = None, limit: int = DAMAGE_LIMIT, keys: list[str] | None = None,
                 transformed: bool = False, history: bool = False) -> AuditReport:
    """Check the output at ``table_uri`` (and the dead letters) against the pipeline's ledger rows; for a keyed
    table (``keys``), also that no key is held twice (a ``history`` table: no key has two current versions); for a
    ``transformed`` pipeline (one with a SQL transform), the output's records are counted by coordinate, and a
    coordinate is damage when rows of two batches hold it."""
    from deltalake import QueryBuilder

    rows = Ledger(ledger_uri, store).rows(pipeline)
    ledger = storage.open_table(ledger_uri, store)
    output = storage.open_table(table_uri, store)
    found = Findings()
    if ledger is not None and output is not None:
        quoted = pipeline.replace("'", "''")
        ranges = _RANGES.format(pipeline=quoted, kinds=", ".join(f"'{k}'" for k in WRITING_KINDS))
        builder = QueryBuilder().register("ledger", ledger).register("output", output)
        found = _output_findings(builder, ranges, limit, transformed)
        if keys:
            found.duplicate_keys, found.duplicate_key_rows = _duplicate_keys(builder, keys, limit, history)
        dead = storage.open_table(dead_letter_uri, store)
        if dead is not None:
            builder.register("dead", dead)
            found.dead_letter_counts = _counts(builder, _COUNTS.format(
                ranges=ranges, table="dead", where=f"WHERE o.pipeline = '{quoted}'", count=_ROWS))
            both = _IN_BOTH.format(pipeline=quoted, distinct="DISTINCT " if transformed else "")
            found.in_both = _rows(builder, f"{both} SELECT * FROM b ORDER BY topic, \"partition\", \"offset\" "
                                           f"LIMIT {int(limit)}")
            found.in_both_rows = int(_rows(builder, f"{both} SELECT COUNT(*) AS n FROM b")[0]["n"])
    elif output is not None:  # no ledger at all: every row is outside the (no) committed ranges
        found.records = int(_rows(QueryBuilder().register("output", output), "SELECT COUNT(*) AS n FROM output")
                            [0]["n"])
        found.outside_rows = found.records
    return judge(pipeline, table_uri, rows, found, keys, transformed)
