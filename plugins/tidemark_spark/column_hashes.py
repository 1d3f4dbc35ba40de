"""One 64-bit hash per compared column of a row, the unit both sides of the audit's Spark comparisons are
reduced to (``tidemark_spark.audit_decode`` for sampled ranges, ``tidemark_spark.audit_keys`` for a keyed
table's sampled keys): ``xxhash64`` of the column's JSON, so that a long and an int of the same value agree
and a struct's null fields count as absent; ``{}`` for null and for a column one side lacks."""

from __future__ import annotations

from collections.abc import Mapping

from tidemark.batch.schemas import normalize_type


def hashes(columns: list[str], present: set[str], casts: Mapping[str, str] | None = None):
    """One hash per compared column: of its JSON (``{}`` for null, and for a column this side lacks), after
    ``casts`` (column -> the table's type)."""
    from pyspark.sql import functions as F

    def value(c: str):
        return F.col(c).cast(casts[c]) if casts and c in casts else F.col(c)

    return F.array(*[F.xxhash64(F.to_json(F.struct(value(c).alias("v"))) if c in present else F.lit("{}"))
                     for c in columns])


def to_table_types(rows, table: Mapping[str, str]) -> dict[str, str]:
    """The decoded columns whose plain type differs from the table's column (a column widened after the batch
    was written: int to long, float to double), to be cast to the table's type before they are hashed, as the
    widening cast the table's rows. Nested types are left alone (their JSON compares field by field)."""
    nested = ("struct", "array", "map")
    casts = {}
    for f in rows.schema.fields:
        decoded, held = normalize_type(f.dataType.simpleString()), normalize_type(table.get(f.name) or "")
        if held and decoded != held and not decoded.startswith(nested) and not held.startswith(nested):
            casts[f.name] = table[f.name]
    return casts
