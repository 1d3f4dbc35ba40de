"""Plan-time schema knowledge: which schemas a batch decodes with, and whether the output table
can take them.

* ``freeze_avro``: for ``value_format: avro``, the reader schema (the subject's latest version, or
  the pinned one) and every version's writer schema by id, with the ids whose records cannot be
  read into the reader schema and why. The result is frozen in the ledger with the batch, so a
  retry decodes with exactly the same schemas, registry or not.
* ``check_changes``: the value fields against the output table's columns (JSON and Avro alike).
  A new field adds a column (Delta schema evolution, ``mergeSchema`` on the output commit); a field
  whose type widens (``tidemark.formats.type_changes.is_widening``) widens its column in the batch's own commit. A
  field removed from the schema, or given any other type, is refused under ``schema_changes:
  additive`` (the default); under ``lenient`` a removed field's column stays (null in new rows)
  and a retyped field is written into the column's type only where the value stays exactly the
  same, any other value being a bad record.

Everything here runs before Spark starts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from tidemark.batch.history_checks import check_history_shape, check_history_widening
from tidemark.config import keyed_tables
from tidemark.errors import ConfigError, SchemaChangeError, SchemaRegistryError, TransformError
from tidemark.formats import avro_resolution, avro_schemas, debezium, json_schemas
from tidemark.formats.frozen_schemas import FrozenSchemas
from tidemark.formats.protobuf_schemas import FrozenProtobuf
from tidemark.formats.record_format import RecordFormat
from tidemark.formats.records import BATCH_COLUMNS, DATE_COLUMN, HISTORY_COLUMNS, KAFKA_COLUMNS, RESERVED_COLUMNS, Field
from tidemark.formats.schema_registry import SchemaSource
from tidemark.formats.type_changes import is_widening, normalize_type, widening_hint

if TYPE_CHECKING:
    from tidemark.config.pipeline import PipelineConfig

# --- Avro: what a batch freezes -------------------------------------------------------------------


@dataclass(frozen=True)
class BatchSchemas:
    """Everything a batch freezes from the Schema Registry: the value's schemas (``value_format:
    avro``) and the key's (``key_format: avro``). Stored as JSON in the ledger's ``frozen_schemas``."""

    value: FrozenSchemas | None = None
    key: FrozenSchemas | None = None
    protobuf: FrozenProtobuf | None = None
    """``value_format: protobuf``: the value's Protobuf schemas (their descriptor sets)."""

    def to_json(self) -> str:
        protobuf = {"protobuf": self.protobuf.to_dict()} if self.protobuf else {}
        return json.dumps({"value": self.value.__dict__ if self.value else None,
                           "key": self.key.__dict__ if self.key else None, **protobuf}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> BatchSchemas:
        data = json.loads(text)
        return cls(*(FrozenSchemas(**data[k]) if data.get(k) else None for k in ("value", "key")),
                   protobuf=FrozenProtobuf.from_dict(data["protobuf"]) if data.get("protobuf") else None)


def subject_of(subject: str | None, topics: Sequence[str], part: str = "value") -> str:
    """The subject a pipeline's values (or keys) are registered under: the configured one, or
    ``<topic>-value`` / ``<topic>-key`` (Confluent's TopicNameStrategy) for a one-topic pipeline."""
    return subject or f"{topics[0]}-{part}"


def freeze_avro(pipeline: str, subject: str, pinned_version: int | None, source: SchemaSource,
                part: str = "value") -> FrozenSchemas:
    """Read the subject's versions and decide the batch's schemas. A value's reader schema must be a
    record (its fields become columns); a key's may be any type (one ``key`` column). Raises
    SchemaRegistryError when the subject, the pinned version or the reader schema cannot be used."""
    def check_reader(text: str) -> None:
        if part == "value":
            avro_schemas.reader_fields(avro_schemas.parse(text))
        else:
            avro_schemas.spark_type(avro_schemas.parse_any(text), field="key")

    def incompatibility(writer: str, reader: str) -> str | None:
        return avro_resolution.incompatibility(avro_schemas.parse_any(writer), avro_schemas.parse_any(reader))

    return _freeze(pipeline, subject, pinned_version, source, part, "AVRO", check_reader, incompatibility)


def freeze_json(pipeline: str, subject: str, pinned_version: int | None, source: SchemaSource) -> FrozenSchemas:
    """For ``value_format: json`` with a ``value_subject``: the subject's JSON Schema versions, as ``freeze_avro``
    freezes Avro's (``tidemark.formats.json_schemas``: the reader's properties become columns)."""
    return _freeze(pipeline, subject, pinned_version, source, "value", "JSON", json_schemas.fields,
                   json_schemas.incompatibility)


def _freeze(pipeline: str, subject: str, pinned_version: int | None, source: SchemaSource, part: str, kind: str,
            check_reader, incompatibility) -> FrozenSchemas:
    """The reader (the latest or the pinned version of the subject's ``kind`` schemas), checked by
    ``check_reader``; every version's id readable into it (``incompatibility`` is None), and why the others
    are not. Raises SchemaRegistryError when the subject, the pinned version or the reader cannot be used."""
    registered = [s for s in source.versions(subject) if s.schema_type.upper() == kind]
    if not registered:
        name = {"AVRO": "Avro schema", "JSON": "JSON Schema"}.get(kind, f"{kind} schema")
        raise SchemaRegistryError(f"subject '{subject}' has no {name} in the Schema Registry; register the "
                                  f"{part} schema first", pipeline=pipeline)
    if pinned_version is None:
        reader = max(registered, key=lambda s: s.version)
    else:
        matching = [s for s in registered if s.version == pinned_version]
        if not matching:
            raise SchemaRegistryError(
                f"{part}_schema_version {pinned_version} is not a version of subject '{subject}' (versions: "
                f"{', '.join(str(s.version) for s in registered)})", pipeline=pipeline)
        reader = matching[0]
    try:
        check_reader(reader.schema)
    except ValueError as exc:
        raise SchemaRegistryError(f"the {part} reader schema (subject '{subject}' version {reader.version}, id "
                                  f"{reader.id}) cannot be written as columns: {exc}", pipeline=pipeline) from None
    writers, unreadable = {}, {}
    for schema in registered:
        try:
            reason = incompatibility(schema.schema, reader.schema)
        except ValueError as exc:
            reason = str(exc)
        if reason is None:
            writers[str(schema.id)] = schema.schema
        else:
            unreadable[str(schema.id)] = (f"schema id {schema.id} (version {schema.version}) cannot be read into the "
                                          f"reader schema (version {reader.version}): {reason}")
    return FrozenSchemas(subject, reader.id, reader.version, reader.schema, writers, unreadable)


# --- the output table's columns ------------------------------------------------------------------

def delta_type(spec: str | Mapping) -> str:
    """A Delta log's column type (``"long"``, or ``{"type": "struct", ...}``) as Spark DDL, nested
    field names as the table spells them (a cast to the column's type must keep them)."""
    if isinstance(spec, str):
        return spec
    kind = spec["type"]
    if kind == "struct":
        return "struct<" + ",".join(f"`{f['name']}`:{delta_type(f['type'])}" for f in spec["fields"]) + ">"
    if kind == "array":
        return f"array<{delta_type(spec['elementType'])}>"
    if kind == "map":
        return f"map<{delta_type(spec['keyType'])},{delta_type(spec['valueType'])}>"
    return str(kind)


def table_columns(table_uri: str, store=None) -> dict[str, str] | None:
    """The output table's columns and their types (Spark DDL), or None when it does not exist yet.
    ``store``: the object store of a table on S3."""
    from tidemark import storage

    table = storage.open_table(table_uri, store)
    if table is None:
        return None
    return {f["name"]: delta_type(f["type"]) for f in json.loads(table.schema().to_json())["fields"]}


@dataclass(frozen=True)
class SchemaChanges:
    """What the value fields change in the output table."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    retyped: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Field -> (the table's type, the schema's type)."""


def compare(fields: Sequence[Field], columns: Mapping[str, str]) -> SchemaChanges:
    """The value fields against the table's columns (Tidemark's own columns aside). Types compare
    in one spelling (``normalize_type``), nested names case-insensitively, as Spark resolves them."""
    payload = {n: t for n, t in columns.items() if n.lower() not in RESERVED_COLUMNS}
    names = {f.name for f in fields}
    added = tuple(f.name for f in fields if f.name not in columns)
    removed = tuple(n for n in payload if n not in names)
    retyped = {f.name: (columns[f.name], f.type) for f in fields
               if f.name in payload and normalize_type(f.type) != normalize_type(columns[f.name])}
    return SchemaChanges(added, removed, retyped)


@dataclass(frozen=True)
class Decision:
    """What a batch does about the changes its fields make to the output table."""

    widen: dict[str, str] = field(default_factory=dict)
    """Field -> its new type, for columns widened in place (every old value is exact in the new type)."""
    casts: dict[str, str] = field(default_factory=dict)
    """Field -> the column's type, for fields cast to it exactly (``lenient``; a value that changes is bad)."""


def check_changes(pipeline: str, table_uri: str, changes: SchemaChanges, policy: str, source: str) -> Decision:
    """Apply the ``schema_changes`` policy. A retyped field whose change is a widening
    (``tidemark.formats.type_changes``) widens its column under either policy. Raises SchemaChangeError, naming each
    field, when the additive policy meets a removed field or any other type change; ``lenient`` keeps a removed field's
    column and casts any other retyped field to the column's type, exactly or not at all. ``source`` says where the
    schema came from, for the message."""
    widen = {n: new for n, (old, new) in changes.retyped.items() if is_widening(old, new)}
    other = {n: types for n, types in changes.retyped.items() if n not in widen}
    problems = [f"field '{n}' is no longer in the schema (the table's column '{n}' would be null from now on)"
                for n in changes.removed]
    for name, (old, new) in other.items():
        hint = widening_hint(old, new)
        problems.append(f"field '{name}' is {new} in the schema but {old} in the table, and {new} does not hold "
                        f"every {old} value exactly" + (f" ({hint})" if hint else ""))
    if problems and policy != "lenient":
        raise SchemaChangeError(
            f"the value schema ({source}) does not fit the output table {table_uri}: {'; '.join(problems)}. Nothing "
            f"was frozen. By default a table takes new fields and type widenings (integers to wider integers, to "
            f"double or to a decimal that holds them; float to double; a decimal to more digits) only. Restore the "
            f"field, declare a type that widens the column, write to a new table, or set 'schema_changes: lenient' "
            f"to keep a removed field's column (null in new rows) and write a retyped field into the column's "
            f"type where the value stays exactly the same (any other value becomes a dead letter).",
            pipeline=pipeline)
    return Decision(widen=widen, casts={n: old for n, (old, _) in other.items()})


def fit_transform_output(pipeline: str, table_uri: str, output: dict[str, str], columns: dict[str, str] | None,
              policy: str) -> tuple[bool, dict[str, str]]:
    """The transform's output columns (name -> Spark type) against the output table's under ``schema_changes``,
    as for a value schema (``tidemark.batch.schemas.check_changes``): a new column is added; a widened type widens its
    column in place; ``additive`` refuses a column the output no longer has, ``lenient`` leaves it null. Any other type
    change is refused under both: cast in the SELECT instead. Returns (columns to add?, columns to widen)."""
    if columns is None:
        return False, {}
    changes = compare([Field(n, t) for n, t in output.items() if n.lower() not in RESERVED_COLUMNS], columns)
    widen = {n: new for n, (old, new) in changes.retyped.items() if is_widening(old, new)}
    problems = [f"column '{n}' is {new} in the transform's output but {old} in the table, which is no widening: CAST "
                f"it to {old} in the SELECT (try_cast for values that may not fit)"
                for n, (old, new) in changes.retyped.items() if n not in widen]
    if policy != "lenient":
        problems += [f"column '{n}' is no longer in the transform's output (schema_changes: additive; 'lenient' "
                     f"leaves it null in new rows)" for n in changes.removed]
    if problems:
        raise TransformError(f"the transform's output does not fit the output table {table_uri}: {'; '.join(problems)}."
                             f" Nothing was read or written.", pipeline=pipeline)
    return bool(changes.added), widen


# --- the format a batch is executed with ---------------------------------------------------------

KEY_COLUMN = "key"
"""The decoded key's column (``key_format: avro``); ``kafka_key`` keeps the key's bytes."""


def _avro_fields(config: PipelineConfig, frozen: FrozenSchemas, source: str) -> tuple[Field, ...]:
    """The columns of Avro values: the reader schema's fields, or a Debezium envelope's row's; with the keyed
    block's fields among them. Raises SchemaRegistryError saying what to change."""
    if not (config.keyed and config.keyed.envelope == "debezium"):
        fields = frozen.fields()
    else:
        try:
            fields = frozen.fields("debezium")
        except ValueError as exc:
            raise SchemaRegistryError(
                f"keyed.envelope 'debezium' reads Debezium change events, and the value reader schema ({source}) "
                f"is not one: {exc}. Point the pipeline at a Debezium connector's topic (Kafka Connect's "
                f"AvroConverter writes the envelope), or remove envelope for plain Avro records",
                pipeline=config.name) from None
    if config.keyed:
        try:
            keyed_tables.check(config.keyed, [f.name for f in fields], source)
        except ValueError as exc:
            raise SchemaRegistryError(f"{exc}; change the keyed block or the schema", pipeline=config.name) from None
    return fields


def _json_schema_fields(config: PipelineConfig, frozen: FrozenSchemas, source: str) -> tuple[Field, ...]:
    """The columns of JSON values whose schema is in the registry: the reader version's properties."""
    try:
        return json_schemas.fields(frozen.reader)
    except ValueError as exc:  # frozen before a release that refuses it: say so rather than guess
        raise SchemaRegistryError(f"the JSON Schema reader ({source}) cannot be written as columns: {exc}",
                                  pipeline=config.name) from None


def _value_fields(config: PipelineConfig, frozen: BatchSchemas, value_fields: tuple[Field, ...] | None,
                  ) -> tuple[tuple[Field, ...], str]:
    """The value's columns and where they come from: the frozen registry schemas, the JSON converter's schema of the
    batch's records (``value_fields``, Debezium without a ``value_schema``), or the ``value_schema``."""
    if frozen.value is not None:
        source = f"subject '{frozen.value.subject}' version {frozen.value.reader_version}"
        return (_json_schema_fields(config, frozen.value, source) if config.value_format == "json"
                else _avro_fields(config, frozen.value, source)), source
    if config.value_format == "protobuf":
        return protobuf_columns(config, frozen.protobuf)
    if value_fields is None:
        return config.record_format.fields, "value_schema"
    source = "the JSON converter's schema of the batch's newest change"
    try:
        keyed_tables.check(config.keyed, [f.name for f in value_fields], source)
    except ValueError as exc:
        raise ConfigError(f"{exc}; change the keyed block", pipeline=config.name) from None
    return value_fields, source


def _kafka_keys(config: PipelineConfig, frozen: BatchSchemas, key_fields, fields) -> tuple[str, ...]:
    try:
        return keyed_tables.kafka_keys(frozen.key.reader if frozen.key else None, key_fields, [f.name for f in fields])
    except ValueError as exc:
        raise ConfigError(str(exc), pipeline=config.name) from None


def batch_format(config: PipelineConfig, frozen: BatchSchemas | None, store=None,
                 key_fields: tuple[str, ...] | None = None, value_fields: tuple[Field, ...] | None = None,
                 ) -> RecordFormat:
    """The pipeline's record format for one batch: the fields (the JSON ``value_schema``, or the frozen Avro reader
    schema's, and the decoded key) checked against the output table (delta-rs, no JVM) under ``schema_changes``, with
    the columns to add and the casts to make; a Debezium table without ``keys`` gets the Kafka key's fields."""
    base = config.record_format
    frozen = frozen or BatchSchemas()
    for part, needed in {"value": config.value_format == "avro", "key": config.key_format == "avro"}.items():
        if needed and getattr(frozen, part) is None:
            raise SchemaRegistryError(f"an Avro {part} needs the schemas frozen with the batch; this batch has none "
                                      f"(it was planned under another {part}_format): finish or reset it under that "
                                      f"format", pipeline=config.name)
    if config.value_format == "raw" and config.key_format == "raw":
        return base
    fields, source = _value_fields(config, frozen, value_fields)
    if base.keyed and not base.keyed.keys:  # Debezium's keys from the Kafka key
        base = replace(base, keyed=replace(base.keyed, keys=_kafka_keys(config, frozen, key_fields, fields)))
    key_type = None
    if frozen.key is not None:
        if KEY_COLUMN in {f.name.lower() for f in fields}:
            raise SchemaRegistryError(f"a value field is named '{KEY_COLUMN}', the column of the decoded key "
                                      f"(key_format: avro); rename the field", pipeline=config.name)
        key_type = frozen.key.spark_type()
        source += f" and key subject '{frozen.key.subject}' version {frozen.key.reader_version}"
    names = {f.name for f in fields} | ({KEY_COLUMN} if key_type else set())
    for column in [] if config.transform else config.partition_by:  # a transform's columns: checked in the job
        if column not in names and column not in (*KAFKA_COLUMNS, *BATCH_COLUMNS, DATE_COLUMN, "value"):
            raise SchemaRegistryError(f"partition_by: '{column}' is not an output column ({source})",
                                      pipeline=config.name)
    columns = None if config.transform else table_columns(config.table_uri, store)  # ditto
    add_columns, casts, widen = False, {}, {}
    # a keyed table's own columns: Debezium's cdc_*, a history table's valid_from, valid_to and is_current
    envelope = set(base.keyed.columns if base.keyed else ()) | set(
        HISTORY_COLUMNS if base.keyed and base.keyed.keeps_history else ())
    if columns is not None:
        check_history_shape(config, base, columns, {f.name for f in fields})
        columns = {n: t for n, t in columns.items() if n not in envelope}
        checked = [*fields, *([Field(KEY_COLUMN, key_type, False)] if key_type else [])]
        if config.value_format == "raw":  # only the key is checked: the raw value column is Tidemark's own
            checked = checked[len(fields):]
            columns = {n: t for n, t in columns.items() if n == KEY_COLUMN or n.lower() in RESERVED_COLUMNS}
        changes = compare(checked, columns)
        decision = check_changes(config.name, config.table_uri, changes, config.schema_changes, source)
        add_columns, casts, widen = bool(changes.added), decision.casts, decision.widen
        check_history_widening(config, base, widen)
    avro = frozen.value if frozen.value and config.value_format == "avro" else None
    registry_json = frozen.value if frozen.value and config.value_format == "json" else None
    if avro and config.keyed and config.keyed.envelope == "debezium":  # read Debezium's times as times
        avro = replace(avro, reader=json.dumps(debezium.with_time_types(avro_schemas.parse(avro.reader))))
    return replace(base, fields=fields, avro=avro, json_schemas=registry_json, key_avro=frozen.key,
                   key_type=key_type, protobuf=frozen.protobuf,
                   add_columns=add_columns, casts=casts, widen=widen)


def protobuf_columns(config: PipelineConfig, frozen: FrozenProtobuf | None) -> tuple[tuple[Field, ...], str]:
    """The columns of a batch's Protobuf values (the reader message's fields) and
    where they come from, for messages (``tidemark.batch.schemas.batch_format``). Raises SchemaRegistryError saying what
    to do."""
    if frozen is None:
        raise SchemaRegistryError("Protobuf values need the schemas frozen with the batch; this batch has none (it was "
                                  "planned under another value_format): finish or reset it under that format",
                                  pipeline=config.name)
    source = f"subject '{frozen.subject}' version {frozen.reader_version} message '{frozen.message}'"
    return frozen.fields(), source  # no keyed block: a keyed table of Protobuf values is refused with its file
