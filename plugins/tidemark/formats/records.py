"""How record values are interpreted: raw bytes, JSON with a declared schema, or Avro in the
Confluent wire format with schemas from a Schema Registry (frozen at plan time). Pure values that
travel inside the frozen plan to the Spark job; the Spark side is in ``tidemark.batch.spark.batch_io``."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Literal

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


@dataclass(frozen=True)
class RecordFormat:
    """The value format of a pipeline and what makes a record bad."""

    value_format: Literal["raw", "json", "avro", "protobuf"] = "raw"
    fields: tuple[Field, ...] = field(default_factory=tuple)
    max_value_bytes: int | None = None
    on_bad_record: Literal["dead_letter", "fail"] = "dead_letter"
    avro: dict | None = None
    """For ``avro``: the batch's frozen value schemas (``tidemark.batch.schemas.FrozenSchemas`` as a dict)."""
    key_avro: dict | None = None
    """For ``key_format: avro``: the batch's frozen key schemas."""
    key_type: str | None = None
    """For ``key_format: avro``: the Spark type of the decoded ``key`` column."""
    add_columns: bool = False
    """The fields include columns the output table does not have yet: the output commit adds them."""
    casts: dict[str, str] = field(default_factory=dict)
    """Field -> the output column's type, for fields whose type changed (``schema_changes: lenient``): a
    value is written into it only when it stays exactly the same."""
    widen: dict[str, str] = field(default_factory=dict)
    """Field -> its new, wider type: the output commit widens these columns (``tidemark.formats.type_changes``)."""
    keyed: dict | None = None
    """A keyed table's ``tidemark.config.keyed_tables.KeyedSpec`` as a dict: the batch is merged by key instead of
    appended."""
    transform: str | None = None
    """The pipeline's SQL transform (``tidemark.config.transforms``): the output's columns are what it selects."""
    schema_changes: str = "additive"
    """The pipeline's ``schema_changes``: how a transform's output may change the table (checked in the job)."""
    json_schemas: dict | None = None
    """For ``json`` with a ``value_subject``: the batch's frozen JSON Schemas (``tidemark.batch.schemas.FrozenSchemas``
    as a dict): values are in the Confluent wire format, their schema ids checked against it."""
    protobuf: dict | None = None
    """For ``protobuf``: the batch's frozen value schemas (``tidemark.formats.protobuf_schemas.FrozenProtobuf`` as a
    dict)."""

    @property
    def can_reject(self) -> bool:
        """Whether any record can be bad under this format (so a dead-letter table may be written)."""
        return self.value_format != "raw" or self.max_value_bytes is not None or self.key_avro is not None

    def spark_ddl(self) -> str:
        return ", ".join(f"`{f.name}` {f.type}" for f in self.fields)

    def to_dict(self) -> dict:
        """JSON-ready (lists, not tuples), so a plan survives the JSON round trip unchanged."""
        return {**asdict(self), "fields": [asdict(f) for f in self.fields]}

    @classmethod
    def from_dict(cls, data: dict) -> RecordFormat:
        return cls(data["value_format"], tuple(Field(**f) for f in data["fields"]), data["max_value_bytes"],
                   data["on_bad_record"], data.get("avro"), data.get("key_avro"), data.get("key_type"),
                   data.get("add_columns", False), data.get("casts") or {}, data.get("widen") or {},
                   data.get("keyed"), data.get("transform"), data.get("schema_changes", "additive"),
                   protobuf=data.get("protobuf"), json_schemas=data.get("json_schemas"))


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
DEAD_LETTER_COLUMNS = ["pipeline", *KAFKA_COLUMNS, "value", "error", *BATCH_COLUMNS]


def output_columns(fmt: RecordFormat, partition_by: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The output table's columns: Kafka coordinates, the payload (raw ``value`` or the declared
    JSON fields), the batch id and ingestion time, and ``kafka_date`` when it partitions the table."""
    payload = ["value"] if fmt.value_format == "raw" else [f.name for f in fmt.fields]
    if fmt.keyed:
        payload += list(fmt.keyed.get("columns") or ())
    if fmt.key_type:
        payload = ["key", *payload]
    derived = [DATE_COLUMN] if DATE_COLUMN in partition_by else []
    return [*KAFKA_COLUMNS, *payload, *BATCH_COLUMNS, *derived]
