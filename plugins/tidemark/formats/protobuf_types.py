"""Protobuf messages as Spark columns (``value_format: protobuf``): the shape a message's values take in the
output table, and whether records of one schema's message can be read as another schema's. Pure: the protobuf
runtime's descriptors only (no protoc, no Spark), so the plan task and Spark's Python workers share it.

What a field becomes (a proto3 or proto2 field; the column is null where the record does not set a field with
presence: a message, a ``oneof`` member, an ``optional`` scalar, a wrapper):

==============================================  ==============================================================
int32, sint32, sfixed32                         int
int64, sint64, sfixed64                         bigint
uint32, fixed32                                 bigint (every value exactly)
uint64, fixed64                                 decimal(20,0) (every value exactly)
float, double, bool, string, bytes              float, double, boolean, string, binary
an enum                                         string: the value's name
a message                                       struct of its fields (a ``oneof``'s members among them)
repeated T                                      array<T> (empty, never null, when the record has none)
map<K, V>                                       map<K, V>
google.protobuf.Timestamp                       timestamp (UTC), to the microsecond
google.protobuf.Int64Value, StringValue, ...    the wrapped value's type, null when unset
==============================================  ==============================================================

Names in messages: ``a.b`` is field ``b`` of the message in field ``a``; ``a[]`` the elements of the repeated
field ``a``; ``a{}`` the values of the map in field ``a``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import Descriptor, FieldDescriptor, FileDescriptor

from tidemark.formats.records import FIELD_NAME, RESERVED_COLUMNS, Field
from tidemark.formats.type_changes import is_widening, normalize_type

TIMESTAMP = "google.protobuf.Timestamp"
WRAPPERS = {"google.protobuf.DoubleValue": "double", "google.protobuf.FloatValue": "float",
            "google.protobuf.Int64Value": "bigint", "google.protobuf.UInt64Value": "decimal(20,0)",
            "google.protobuf.Int32Value": "int", "google.protobuf.UInt32Value": "bigint",
            "google.protobuf.BoolValue": "boolean", "google.protobuf.StringValue": "string",
            "google.protobuf.BytesValue": "binary"}
"""The well-known wrapper messages -> the Spark type of the value they wrap (a nullable column)."""
_T = FieldDescriptor
SCALARS = {_T.TYPE_INT32: "int", _T.TYPE_SINT32: "int", _T.TYPE_SFIXED32: "int",
           _T.TYPE_INT64: "bigint", _T.TYPE_SINT64: "bigint", _T.TYPE_SFIXED64: "bigint",
           _T.TYPE_UINT32: "bigint", _T.TYPE_FIXED32: "bigint", _T.TYPE_UINT64: "decimal(20,0)",
           _T.TYPE_FIXED64: "decimal(20,0)", _T.TYPE_FLOAT: "float", _T.TYPE_DOUBLE: "double",
           _T.TYPE_BOOL: "boolean", _T.TYPE_STRING: "string", _T.TYPE_BYTES: "binary", _T.TYPE_ENUM: "string"}


@dataclass(frozen=True)
class Leaf:
    """A value of one Spark type: a scalar, an enum's name, a Timestamp, a wrapper's value."""

    spark: str


@dataclass(frozen=True)
class Struct:
    """A message: its fields in declaration order."""

    name: str
    fields: tuple[tuple[str, Shape], ...]


@dataclass(frozen=True)
class Array:
    element: Shape


@dataclass(frozen=True)
class Map:
    key: Shape
    value: Shape


Shape = Union[Leaf, Struct, Array, Map]  # noqa: UP007 (a runtime alias: the dataclasses above name it)


def ddl(shape: Shape) -> str:
    """The Spark SQL type (DDL) of a shape."""
    if isinstance(shape, Leaf):
        return shape.spark
    if isinstance(shape, Array):
        return f"array<{ddl(shape.element)}>"
    if isinstance(shape, Map):
        return f"map<{ddl(shape.key)},{ddl(shape.value)}>"
    return "struct<" + ",".join(f"`{name}`:{ddl(s)}" for name, s in shape.fields) + ">"


def is_repeated(fd: FieldDescriptor) -> bool:
    flag = getattr(fd, "is_repeated", None)  # protobuf >= 6; ``label`` before
    return bool(flag) if flag is not None else fd.label == FieldDescriptor.LABEL_REPEATED


def is_map(fd: FieldDescriptor) -> bool:
    return fd.message_type is not None and is_repeated(fd) and fd.message_type.GetOptions().map_entry


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def message_shape(message: Descriptor) -> Struct:
    """The shape of a message's values. Raises ValueError, naming the field, for what a table cannot hold: a
    message that contains itself (directly or not), a message without fields (an empty struct)."""
    return _struct(message, "", frozenset())


def _struct(message: Descriptor, path: str, open_messages: frozenset[str]) -> Struct:
    if message.full_name in open_messages:
        raise ValueError(f"field '{path}': message '{message.full_name}' contains itself: a table cannot hold "
                         f"recursive types")
    if not message.fields:
        where = f"field '{path}': " if path else ""
        raise ValueError(f"{where}message '{message.full_name}' has no fields (an empty struct cannot be stored)")
    inner = open_messages | {message.full_name}
    return Struct(message.full_name, tuple((fd.name, field_shape(fd, _join(path, fd.name), inner))
                                           for fd in message.fields))


def field_shape(fd: FieldDescriptor, path: str, open_messages: frozenset[str] = frozenset()) -> Shape:
    """The shape of one field's values (an array for a repeated field, a map for a map field)."""
    if is_map(fd):
        entry = fd.message_type.fields_by_name
        return Map(_element(entry["key"], path + "{}", open_messages),
                   _element(entry["value"], path + "{}", open_messages))
    element = _element(fd, path + "[]" if is_repeated(fd) else path, open_messages)
    return Array(element) if is_repeated(fd) else element


def _element(fd: FieldDescriptor, path: str, open_messages: frozenset[str]) -> Shape:
    if fd.message_type is None:
        return Leaf(SCALARS[fd.type])
    name = fd.message_type.full_name
    if name == TIMESTAMP:
        return Leaf("timestamp")
    if name in WRAPPERS:
        return Leaf(WRAPPERS[name])
    return _struct(fd.message_type, path, open_messages)


def reader_fields(shape: Struct) -> tuple[Field, ...]:
    """The reader message's top-level fields as output columns (all nullable: a writer without a field
    reads null). Raises ValueError naming a field whose name is no valid column name, clashes with a
    Tidemark column or another field (Spark's names are case-insensitive)."""
    seen: dict[str, str] = {}
    for name, _ in shape.fields:
        if not FIELD_NAME.match(name):
            raise ValueError(f"field name '{name}' must be letters, digits and _ (not starting with a digit)")
        if name.lower() in RESERVED_COLUMNS:
            raise ValueError(f"field name '{name}' clashes with a column Tidemark adds "
                             f"({', '.join(sorted(RESERVED_COLUMNS))})")
        if name.lower() in seen:
            raise ValueError(f"field '{name}' clashes with field '{seen[name.lower()]}' (column names are "
                             f"case-insensitive in Spark)")
        seen[name.lower()] = name
    return tuple(Field(name, ddl(s), False) for name, s in shape.fields)


def incompatibility(writer: Shape, reader: Shape, path: str = "") -> str | None:
    """None when every value of the writer's shape can be written as the reader's, exactly, else why not.
    Fields match by name: a reader field the writer lacks reads null, a writer field the reader lacks is not
    read. A leaf's type must be the reader's or widen into it (``tidemark.formats.type_changes.is_widening``: int to
    bigint, float to double, an integer to a decimal that holds it, ...); a message, a repeated field or a map must
    stay one."""
    if isinstance(reader, Struct) and isinstance(writer, Struct):
        written = dict(writer.fields)
        for name, shape in reader.fields:
            if name in written and (problem := incompatibility(written[name], shape, _join(path, name))):
                return problem
        return None
    if isinstance(reader, Array) and isinstance(writer, Array):
        return incompatibility(writer.element, reader.element, path + "[]")
    if isinstance(reader, Map) and isinstance(writer, Map):
        if normalize_type(ddl(writer.key)) != normalize_type(ddl(reader.key)):
            return (f"field '{path}': the map's keys are {ddl(writer.key)} in the writer but {ddl(reader.key)} in the "
                    f"reader")
        return incompatibility(writer.value, reader.value, path + "{}")
    if isinstance(reader, Leaf) and isinstance(writer, Leaf):
        if normalize_type(writer.spark) == normalize_type(reader.spark) or is_widening(writer.spark, reader.spark):
            return None
    return (f"field '{path}' is {ddl(writer)} in the writer's message but {ddl(reader)} in the reader's, and "
            f"{ddl(writer)} does not read as {ddl(reader)} exactly")


# --- descriptor sets -----------------------------------------------------------------------------

def load_file(descriptor_set: bytes, file_name: str) -> FileDescriptor:
    """The file ``file_name`` of a serialized FileDescriptorSet (its imports in the same set), in a pool
    of its own. Raises ValueError when the set does not load or holds no such file."""
    pool = descriptor_pool.DescriptorPool()
    try:
        for proto in descriptor_pb2.FileDescriptorSet.FromString(descriptor_set).file:
            pool.Add(proto)
        return pool.FindFileByName(file_name)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"the descriptor set does not load ({exc})") from None


def messages_by_path(file: FileDescriptor) -> dict[tuple[int, ...], Descriptor]:
    """Every message of a file by its message-index path, as the Confluent wire format numbers them: (i,)
    the file's i-th top-level message, (i, j) the j-th message nested in it, ... in declaration order."""
    found: dict[tuple[int, ...], Descriptor] = {}

    def walk(messages, prefix: tuple[int, ...]) -> None:
        for i, message in enumerate(messages):
            found[(*prefix, i)] = message
            walk(message.nested_types, (*prefix, i))

    top = descriptor_pb2.FileDescriptorProto.FromString(file.serialized_pb).message_type  # declaration order
    walk([file.message_types_by_name[m.name] for m in top], ())
    return found
