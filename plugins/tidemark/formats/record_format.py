"""The format a batch is frozen with: how its record values are decoded (raw, JSON with a declared schema or a
registry's JSON Schemas, Avro or Protobuf with the schemas frozen at plan time), what makes a record bad, how the
output table takes the decoded fields, and, for a keyed table, its keys. One typed value from the plan step to
the Spark job (``tidemark.batch.plan.BatchPlan.record_format``), parsed once from JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

from tidemark.formats.frozen_schemas import FrozenSchemas
from tidemark.formats.protobuf_schemas import FrozenProtobuf
from tidemark.formats.records import BATCH_COLUMNS, DATE_COLUMN, HISTORY_COLUMNS, KAFKA_COLUMNS, Field


@dataclass(frozen=True)
class KeyedSpec:
    """A keyed table as its batches apply it (``keyed:`` of the pipeline file, ``tidemark.config.keyed_tables``)."""

    keys: tuple[str, ...]
    order_by: tuple[str, ...] = ()
    delete_field: str | None = None
    delete_values: tuple[str, ...] = ()
    envelope: str = "none"
    columns: tuple[str, ...] = field(default_factory=tuple)
    """Extra output columns of the envelope (``CDC_COLUMNS`` for Debezium)."""
    history: str = "none"
    """``scd2``: every version of a key is kept (``tidemark.batch.spark.versions``), not the newest alone."""

    @property
    def by_kafka_position(self) -> bool:
        return not self.order_by and self.envelope == "none"

    @property
    def keeps_history(self) -> bool:
        return self.history != "none"

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict) -> KeyedSpec:
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


@dataclass(frozen=True)
class RecordFormat:
    """The value format of a pipeline and what makes a record bad."""

    value_format: Literal["raw", "json", "avro", "protobuf"] = "raw"
    fields: tuple[Field, ...] = field(default_factory=tuple)
    max_value_bytes: int | None = None
    on_bad_record: Literal["dead_letter", "fail"] = "dead_letter"
    avro: FrozenSchemas | None = None
    """For ``avro``: the batch's frozen value schemas."""
    key_avro: FrozenSchemas | None = None
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
    keyed: KeyedSpec | None = None
    """A keyed table's keys, ordering and deletes: the batch is merged by key instead of appended."""
    transform: str | None = None
    """The pipeline's SQL transform (``tidemark.config.transforms``): the output's columns are what it selects."""
    schema_changes: str = "additive"
    """The pipeline's ``schema_changes``: how a transform's output may change the table (checked in the job)."""
    json_schemas: FrozenSchemas | None = None
    """For ``json`` with a ``value_subject``: the batch's frozen JSON Schemas: values are in the Confluent wire
    format, their schema ids checked against it."""
    protobuf: FrozenProtobuf | None = None
    """For ``protobuf``: the batch's frozen value schemas (their descriptor sets)."""

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
        """The format from its ``to_dict`` (a plan's JSON, a ledger row's ``frozen_plan``), parsed once."""
        def frozen(name: str) -> FrozenSchemas | None:
            return FrozenSchemas.from_dict(data[name]) if data.get(name) else None

        return cls(data["value_format"], tuple(Field(**f) for f in data["fields"]), data["max_value_bytes"],
                   data["on_bad_record"], frozen("avro"), frozen("key_avro"), data.get("key_type"),
                   data.get("add_columns", False), data.get("casts") or {}, data.get("widen") or {},
                   KeyedSpec.from_dict(data["keyed"]) if data.get("keyed") else None, data.get("transform"),
                   data.get("schema_changes", "additive"), json_schemas=frozen("json_schemas"),
                   protobuf=FrozenProtobuf.from_dict(data["protobuf"]) if data.get("protobuf") else None)


def output_columns(fmt: RecordFormat, partition_by: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The output table's columns: Kafka coordinates, the payload (raw ``value`` or the declared
    JSON fields), the batch id and ingestion time, and ``kafka_date`` when it partitions the table."""
    payload = ["value"] if fmt.value_format == "raw" else [f.name for f in fmt.fields]
    if fmt.keyed:
        payload += list(fmt.keyed.columns) + (list(HISTORY_COLUMNS) if fmt.keyed.keeps_history else [])
    if fmt.key_type:
        payload = ["key", *payload]
    derived = [DATE_COLUMN] if DATE_COLUMN in partition_by else []
    return [*KAFKA_COLUMNS, *payload, *BATCH_COLUMNS, *derived]
