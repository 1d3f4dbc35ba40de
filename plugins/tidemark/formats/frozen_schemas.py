"""The schemas of one Schema Registry subject that a batch decodes with, frozen at plan time (Avro values or
keys, JSON Schema values): the reader, every writer readable into it, and why the others are not. Travels in
the batch's plan (``tidemark.formats.record_format.RecordFormat``) and in the ledger's ``frozen_schemas``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from tidemark.formats import avro_schemas, debezium
from tidemark.formats.records import Field


@dataclass(frozen=True)
class FrozenSchemas:
    """The schemas of one subject that a batch decodes with (JSON-ready)."""

    subject: str
    reader_id: int
    reader_version: int
    reader: str
    writers: dict[str, str] = field(default_factory=dict)
    """Schema id (as a string) -> writer schema text, for every id readable into the reader schema."""
    unreadable: dict[str, str] = field(default_factory=dict)
    """Schema id -> why its records cannot be read into the reader schema (they become bad records)."""

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> FrozenSchemas:
        return cls(**json.loads(text))

    def fields(self, envelope: str = "none") -> tuple[Field, ...]:
        """The value reader schema's top-level fields, as columns; of a Debezium envelope (``envelope``
        ``debezium``), its row's fields. Raises ValueError when the schema is no such envelope."""
        schema = avro_schemas.parse(self.reader)
        if envelope == "debezium":
            schema = debezium.avro_envelope(debezium.with_time_types(schema)).row
        return avro_schemas.reader_fields(schema)

    def spark_type(self) -> str:
        """The key reader schema as one column's Spark type (a struct for a record)."""
        return avro_schemas.spark_type(avro_schemas.parse_any(self.reader), field="key")

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict) -> FrozenSchemas:
        return cls(**data)
