"""How record values are interpreted: raw bytes, JSON with a declared schema, or Avro in the
Confluent wire format with schemas from a Schema Registry (frozen at plan time). Pure values that
travel inside the frozen plan to the Spark job; the Spark side is in ``tidemark.batch.spark.batch_io``."""

from __future__ import annotations

import re
from dataclasses import dataclass

FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
SIMPLE_TYPES = {"string", "boolean", "int", "integer", "bigint", "long", "smallint", "tinyint", "float", "double",
                "date", "timestamp"}
DECIMAL = re.compile(r"^decimal\(\s*(\d{1,2})\s*,\s*(\d{1,2})\s*\)$")
RESERVED_COLUMNS = {"kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp", "kafka_key", "kafka_headers",
                    "ingest_batch_id", "ingested_at", "value", "error", "pipeline", "kafka_date"}


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    required: bool = True


def parse_field_type(name: str, declared: str) -> Field:
    """``bigint`` -> required bigint field; ``string?`` -> optional string. Raises ValueError."""
    if not FIELD_NAME.match(name):
        raise ValueError(f"field name '{name}' must be letters, digits and _ (not starting with a digit)")
    if name.lower() in RESERVED_COLUMNS:
        taken = ", ".join(sorted(RESERVED_COLUMNS))
        raise ValueError(f"field name '{name}' clashes with a column Tidemark adds ({taken})")
    text = declared.strip().lower()
    required = not text.endswith("?")
    base = text.rstrip("?").strip()
    if base not in SIMPLE_TYPES and not DECIMAL.match(base):
        accepted = ", ".join(sorted(SIMPLE_TYPES)) + ", decimal(p,s)"
        raise ValueError(f"field '{name}': unknown type '{declared}' (accepted: {accepted}; add '?' for optional)")
    return Field(name, base, required)


DATE_COLUMN = "kafka_date"
"""Derived output column (the UTC date of ``kafka_timestamp``), present when it partitions the table."""
KAFKA_COLUMNS = ["kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp", "kafka_key", "kafka_headers"]
BATCH_COLUMNS = ["ingest_batch_id", "ingested_at"]
HISTORY_COLUMNS = ("valid_from", "valid_to", "is_current")
"""What a history table (``keyed.history: scd2``) adds to each version: the interval in which it was the key's row,
by the ordering (``valid_to`` null while current), and whether it is the key's row now."""
DEAD_LETTER_COLUMNS = ["pipeline", *KAFKA_COLUMNS, "value", "error", *BATCH_COLUMNS]
