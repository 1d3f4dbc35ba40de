"""How a pipeline file's value and key settings go together (pure; called by
``tidemark.config.pipeline.PipelineConfig``):
which format takes an inline schema, which reads its schemas from a Schema Registry subject, and the checks
that depend on the decoded fields (keyed tables, transforms)."""

from __future__ import annotations

from typing import Any

from tidemark.config.keyed_tables import check_pipeline
from tidemark.config.transforms import check_pipeline as check_transform
from tidemark.formats.records import parse_field_type

REGISTRY_FORMATS = ("avro", "protobuf")
"""Value formats whose schemas always come from a Schema Registry subject (JSON's may: ``value_subject``)."""


def reads_registry(value_format: str, value_subject: str | None) -> bool:
    """Whether a pipeline's values are decoded with schemas frozen from a Schema Registry: Avro always, JSON when
    it names a subject (JSON Schema) instead of an inline ``value_schema``."""
    return value_format in REGISTRY_FORMATS or (value_format == "json" and value_subject is not None)


def schema_in_data(config: Any) -> bool:
    """JSON values without a schema of their own, which a Debezium pipeline reads from the JSON converter's wrapper."""
    return (config.value_format == "json" and not config.value_schema and not config.value_subject
            and config.keyed is not None and config.keyed.envelope == "debezium")


def check_value_settings(config: Any) -> None:
    """Raise ValueError, saying what to write instead, when the value and key settings of ``config`` (a
    ``tidemark.config.pipeline.PipelineConfig`` being validated) do not go together."""
    fmt = config.value_format
    if fmt == "json" and not config.value_schema and not config.value_subject and not schema_in_data(config):
        raise ValueError("value_format 'json' needs a value_schema (field: type, ...), or a value_subject whose JSON "
                         "Schema the Schema Registry holds (Debezium's change events with the JSON converter's schema: "
                         "keyed: {envelope: debezium} and no value_schema)")
    if fmt == "json" and config.value_schema and config.value_subject:
        raise ValueError("give value_schema (inline) or value_subject (a JSON Schema in the Schema Registry), not both")
    if fmt != "json" and config.value_schema:
        raise ValueError("value_schema is only used with value_format: json (Avro schemas come from the Schema "
                         "Registry)")
    if fmt in REGISTRY_FORMATS and not config.value_subject and len(config.topics) != 1:
        raise ValueError(f"value_format '{fmt}' reads the subject '<topic>-value' of a one-topic pipeline; with "
                         f"several topics or a topic_pattern, name the subject with value_subject")
    if not reads_registry(fmt, config.value_subject) and (config.value_subject or config.value_schema_version):
        raise ValueError("value_subject and value_schema_version are only used with value_format: avro or protobuf, "
                         "or json with its schema in the Schema Registry (value_subject)")
    if config.key_format == "avro" and not config.key_subject and len(config.topics) != 1:
        raise ValueError("key_format 'avro' reads the subject '<topic>-key' of a one-topic pipeline; with several "
                         "topics or a topic_pattern, name the subject with key_subject")
    if config.key_format != "avro" and config.key_subject:
        raise ValueError("key_subject is only used with key_format: avro")
    for name, declared in (config.value_schema or {}).items():
        try:
            parse_field_type(name, declared)
        except ValueError as exc:
            raise ValueError(f"value_schema: {exc}") from None
    check_pipeline(config.keyed, fmt, None if schema_in_data(config) else config.value_schema or {},
                   config.value_subject)
    if config.keyed and config.keyed.keeps_history and config.transform:
        raise ValueError("keyed.history keeps every version of the value's rows, and a transform feeding a history "
                         "table is not supported: remove the transform, or keep history: none")
    check_transform(config.transform, config.audit.verify_sample if config.audit else 0)
