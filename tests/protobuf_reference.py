"""The reference Protobuf decoder: record values decoded into the reader message's columns, or the reason they
cannot be, in Python (upb). Tidemark ran it in Spark's Python workers until 2026-12; Spark now runs the JVM decoder
(jvm/protobuf, ``tidemark.batch.spark.protobuf_udf``), and tests/integration/test_protobuf_decoder.py holds that one
to this one, value by value.

From the batch's frozen schemas alone (the
descriptor set of each schema id, built at plan time: ``tidemark.formats.protobuf_schemas``): no registry, no protoc.
Each record is decoded with the message its own schema id and message indexes name (the writer's), and its fields are
written as the reader message's by name (``tidemark.formats.protobuf_types``): a field the writer lacks is null. The
checks, in order, the first failing one being the record's ``error``: the header (null, short, magic byte), the schema
id (unreadable into the reader message, or not a version of the subject at plan time), the message indexes (no message,
or not the reader's message), the body (does not parse, holds fields its message does not declare or on another wire
type, lacks a proto2 required field), then the values a column cannot hold exactly (a Timestamp finer than a
microsecond or out of range, an enum number its enum does not name).
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf import message_factory, unknown_fields
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

from tidemark.formats.protobuf_types import (
    SCALARS,
    TIMESTAMP,
    WRAPPERS,
    Leaf,
    Shape,
    Struct,
    is_map,
    is_repeated,
    load_file,
    message_shape,
    messages_by_path,
)
from tidemark.formats.protobuf_wire import BadRecord, header, message_indexes

MIN_SECONDS, MAX_SECONDS = -62_135_596_800, 253_402_300_799
"""The range of a google.protobuf.Timestamp: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z."""
_FLOATS = {"float", "double"}
_INTEGERS = {"int", "bigint"}


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _timestamp(path: str) -> Callable[[Message], int]:
    def read(value: Message) -> int:
        seconds, nanos = value.seconds, value.nanos
        if not (MIN_SECONDS <= seconds <= MAX_SECONDS and 0 <= nanos <= 999_999_999):
            raise BadRecord(f"field '{path}': Timestamp seconds={seconds} nanos={nanos} is not a valid Timestamp "
                            f"(0001-01-01 to 9999-12-31, nanos 0 to 999,999,999)")
        if nanos % 1000:
            when = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=seconds)
            raise BadRecord(f"field '{path}': {when.year:04d}-{when:%m-%dT%H:%M:%S}.{nanos:09d}Z has more precision "
                            f"than a timestamp column holds (microseconds)")
        return seconds * 1_000_000 + nanos // 1000  # microseconds since the epoch, as Spark holds a timestamp
    return read


def _cast(writer: str, reader: str) -> Callable[[Any], Any] | None:
    """How a writer's leaf value becomes the reader's type (checked exact at plan time); None: as it is."""
    if reader in _FLOATS and writer in _INTEGERS:
        return float
    return None


def _element(fd: FieldDescriptor, shape: Shape, path: str, where: str) -> Callable[[Any], Any] | None:
    """The reader of one value of a field (an element of a repeated field, a map's value); None: as it is."""
    if fd.message_type is not None:
        name = fd.message_type.full_name
        if name == TIMESTAMP:
            return _timestamp(path)
        if name in WRAPPERS:
            cast = _cast(WRAPPERS[name], shape.spark) or (lambda v: v)
            return lambda wrapper: cast(wrapper.value)
        return struct_reader(fd.message_type, shape, path, where)
    if fd.enum_type is not None:
        names, enum = {v.number: v.name for v in fd.enum_type.values}, fd.enum_type.full_name

        def enum_name(number: int) -> str:
            if number not in names:
                raise BadRecord(f"field '{path}': {number} is not a value of enum '{enum}' in {where}")
            return names[number]
        return enum_name
    return _cast(SCALARS[fd.type], shape.spark if isinstance(shape, Leaf) else "")


def _field(fd: FieldDescriptor, shape: Shape, path: str, where: str) -> Callable[[Message], Any]:
    """The reader of one field of a message: a list for a repeated field, (key, value) pairs in key order for
    a map, None for a field with presence that the record does not set."""
    name = fd.name
    if is_map(fd):
        entry = fd.message_type.fields_by_name
        key = _element(entry["key"], shape.key, path + "{}", where) or (lambda k: k)
        value = _element(entry["value"], shape.value, path + "{}", where) or (lambda v: v)
        return lambda m: [(key(k), value(v)) for k, v in sorted(getattr(m, name).items(), key=lambda kv: kv[0])]
    if is_repeated(fd):
        element = _element(fd, shape.element, path + "[]", where)
        return (lambda m: list(getattr(m, name))) if element is None else \
            (lambda m: [element(v) for v in getattr(m, name)])
    one = _element(fd, shape, path, where) or (lambda v: v)
    if fd.has_presence:
        return lambda m: one(getattr(m, name)) if m.HasField(name) else None
    return lambda m: one(getattr(m, name))


def struct_reader(message: Descriptor, shape: Struct, path: str = "", where: str = "") -> Callable[[Message], dict]:
    """A message (of the writer's schema) as the reader's struct: the reader's fields by name, null where the
    writer's message has no such field."""
    steps = [(name, _field(message.fields_by_name[name], s, _join(path, name), where)
              if name in message.fields_by_name else None) for name, s in shape.fields]

    def read(value: Message) -> dict:
        return {name: None if step is None else step(value) for name, step in steps}
    return read


@dataclass
class _Writer:
    """One readable schema id: its version, the reader message's path in its file, and how to read it."""

    version: int
    path: tuple[int, ...]
    messages: dict[tuple[int, ...], Descriptor]
    parse: Callable[[bytes], Message]
    read: Callable[[Message], dict]


class Decoder:
    """Record values -> (the reader message's fields, None) or (None, why the record is bad), with one batch's
    frozen schemas (``tidemark.formats.protobuf_schemas.FrozenProtobuf`` as a dict). A schema id's classes are built the
    first time a record carries it."""

    def __init__(self, frozen: dict) -> None:
        self.frozen = frozen
        self.subject, self.message = frozen["subject"], frozen["message"]
        reader_id = str(frozen["reader_id"])
        file = load_file(base64.b64decode(frozen["descriptors"][reader_id]), frozen["files"][reader_id])
        self.shape = message_shape(file.pool.FindMessageTypeByName(self.message))
        self._writers: dict[int, _Writer] = {}

    def _writer(self, schema_id: int) -> _Writer | None:
        if schema_id not in self._writers:
            key = str(schema_id)
            if key not in self.frozen["writers"]:
                return None
            file = load_file(base64.b64decode(self.frozen["descriptors"][key]), self.frozen["files"][key])
            messages, path = messages_by_path(file), tuple(self.frozen["writers"][key])
            where = f"schema id {schema_id} (version {self.frozen['versions'][key]})"
            cls = message_factory.GetMessageClass(messages[path])
            self._writers[schema_id] = _Writer(self.frozen["versions"][key], path, messages, cls.FromString,
                                               struct_reader(messages[path], self.shape, "", where))
        return self._writers[schema_id]

    def decode(self, value: bytes | None) -> tuple[dict | None, str | None]:
        try:
            return self._decode(value), None
        except BadRecord as exc:
            return None, str(exc)

    def _decode(self, value: bytes | None) -> dict:
        schema_id = header(value)
        if str(schema_id) in self.frozen["unreadable"]:
            raise BadRecord(self.frozen["unreadable"][str(schema_id)])
        writer = self._writer(schema_id)
        if writer is None:
            raise BadRecord(f"schema id {schema_id} is not a version of subject '{self.subject}' in the Schema "
                            f"Registry (as of plan time)")
        path, start = message_indexes(value, schema_id)
        if path != writer.path:
            named = writer.messages.get(path)
            if named is None:
                raise BadRecord(f"message indexes {list(path)} name no message of schema id {schema_id} (version "
                                f"{writer.version})")
            raise BadRecord(f"message indexes {list(path)} name message '{named.full_name}' of schema id "
                            f"{schema_id}, not the reader message '{self.message}'")
        body = value[start:]
        where = f"message '{self.message}' of schema id {schema_id}"
        try:
            record = writer.parse(body)
        except DecodeError as exc:
            raise BadRecord(f"the Protobuf body does not decode as {where}: {str(exc).rpartition(': ')[2]}") from None
        size = record.ByteSize()
        record.DiscardUnknownFields()
        if record.ByteSize() != size:
            numbers = sorted({f.field_number for f in unknown_fields.UnknownFieldSet(writer.parse(body))})
            inside = f" (field numbers {', '.join(map(str, numbers))})" if numbers else " (in a nested message)"
            raise BadRecord(f"the Protobuf body holds fields that {where} does not declare, or declares with another "
                            f"wire type{inside}: not a record of that message")
        if not record.IsInitialized():
            raise BadRecord(f"the Protobuf body lacks required fields of {where}: "
                            f"{', '.join(record.FindInitializationErrors())}")
        return writer.read(record)
