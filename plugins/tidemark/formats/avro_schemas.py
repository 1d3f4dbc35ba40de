"""Avro value schemas, decided before Spark starts: parse a schema, the Spark SQL type ``from_avro``
gives each reader field (Spark 4.2), and the Confluent wire format (magic byte 0, a 4-byte big-endian
schema id, the Avro binary body). Whether data written with one schema can be read with another is
``tidemark.formats.avro_resolution``. Pure: stdlib only.

Names in error messages: ``a.b`` is field ``b`` of the record in field ``a``; ``a[]`` the items of
the array in field ``a``; ``a{}`` the values of the map in field ``a``.
"""

from __future__ import annotations

import json
import math
from typing import Any

from tidemark.formats.records import FIELD_NAME, RESERVED_COLUMNS, Field

MAGIC_BYTE = 0
HEADER_BYTES = 5

PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
NAMED = {"record", "enum", "fixed"}
COMPLEX = NAMED | {"array", "map"}
PROMOTIONS = {"int": {"long", "float", "double"}, "long": {"float", "double"}, "float": {"double"},
              "string": {"bytes"}, "bytes": {"string"}}
"""Writer type -> the reader types its values are promoted to (the specification's schema resolution)."""
LOSSY_PROMOTIONS = {("int", "float"), ("long", "float"), ("long", "double")}
"""Promotions that can change a value (a float holds integers exactly only up to 2**24, a double up to 2**53):
a writer schema that needs one cannot be read into the reader schema (its records are bad records)."""
SPARK_MAX_DECIMAL_PRECISION = 38
# Logical types Avro's Java library (the one Spark uses) recognizes, by the type they annotate.
# Any other annotation, or one that is invalid (a decimal whose scale exceeds its precision), is
# ignored: the value has the underlying type, as the specification says.
LOGICAL_TYPES = {
    "int": {"date", "time-millis"},
    "long": {"time-micros", "timestamp-millis", "timestamp-micros", "timestamp-nanos", "local-timestamp-millis",
             "local-timestamp-micros", "local-timestamp-nanos"},
    "string": {"uuid"},
    "bytes": {"decimal"},
    "fixed": {"decimal", "duration", "uuid"},
}

Schema = Any
"""A parsed Avro schema: a type name, a union (list) or a complex type (dict)."""
Names = dict[str, dict]
"""Full name -> the definition of a named type (record, enum, fixed)."""


# --- parsing -------------------------------------------------------------------------------------

def parse(text: str) -> dict:
    """Parse a value schema's JSON text. Raises ValueError when it is not JSON, not a record at the
    top level (a value schema must be one: its fields become the columns), or not well formed."""
    try:
        schema = json.loads(text)
    except (TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"the Avro schema is not JSON: {exc}") from None
    _require_record(schema)
    _collect(schema, "", {})
    return schema


def parse_any(text: str) -> Schema:
    """Parse a schema of any type (a key schema is often a plain ``"string"``). Raises ValueError
    when it is not JSON or not well formed."""
    try:
        schema = json.loads(text)
    except (TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"the Avro schema is not JSON: {exc}") from None
    _collect(schema, "", {})
    return schema


def is_record(schema: Schema) -> bool:
    return isinstance(schema, dict) and schema.get("type") == "record"


def _require_record(schema: Schema) -> None:
    if not (isinstance(schema, dict) and schema.get("type") == "record"):
        raise ValueError(f"a value schema must be an Avro record at the top level (its fields become the "
                         f"columns), not {_brief(schema)}")


def _brief(schema: Schema) -> str:
    if isinstance(schema, list):
        return "a union"
    if isinstance(schema, dict):
        return f"type {json.dumps(schema.get('type'))}"
    return f"type {json.dumps(schema)}"


def _full_name(schema: dict, namespace: str) -> str:
    """A named type's full name: its name if dotted, else qualified by its own or the enclosing namespace."""
    name = schema.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"an Avro {schema.get('type')} needs a name")
    if "." in name:
        return name
    space = schema.get("namespace")
    space = namespace if space is None else space
    return f"{space}.{name}" if space else name


def _space(full_name: str) -> str:
    """The namespace of a full name: where the names inside that type are resolved."""
    return full_name.rpartition(".")[0]


def _is_avro_name(part: str) -> bool:
    """Avro's rule for a name and each part of a namespace, which its Java library (Spark's) enforces: a
    letter or _, then letters, digits and _."""
    return (part[:1].isalpha() or part[:1] == "_") and part.replace("_", "a").isalnum()


def _define(schema: dict, namespace: str, names: Names) -> str:
    full = _full_name(schema, namespace)
    invalid = [p for p in full.split(".") if not _is_avro_name(p)]
    if invalid:  # Spark would refuse the schema when the job decodes: say so before it starts
        raise ValueError(f"Avro name '{full}' is not valid: '{invalid[0]}' must start with a letter or _ and hold only "
                         f"letters, digits and _ (from a Debezium connector: set schema.name.adjustment.mode=avro)")
    if names.get(full, schema) is not schema:
        raise ValueError(f"Avro type '{full}' is defined twice")
    names[full] = schema
    return full


def _lookup(name: str, namespace: str, names: Names) -> str:
    """The full name a type reference stands for (in the enclosing namespace, else the null one)."""
    candidates = [name] if "." in name else [f"{namespace}.{name}", name] if namespace else [name]
    for full in candidates:
        if full in names:
            return full
    raise ValueError(f"unknown Avro type '{name}' (a named type must be defined before it is used)")


def _collect(schema: Schema, namespace: str, names: Names) -> None:
    """Define every named type in ``names`` and check the schema is well formed (raises ValueError)."""
    if isinstance(schema, str):
        if schema not in PRIMITIVES:
            _lookup(schema, namespace, names)
        return
    if isinstance(schema, list):
        if not schema:
            raise ValueError("an Avro union needs at least one type")
        for branch in schema:
            if isinstance(branch, list):
                raise ValueError("an Avro union cannot contain a union directly")
            _collect(branch, namespace, names)
        return
    if not isinstance(schema, dict) or not isinstance(schema.get("type"), str):
        raise ValueError(f"not an Avro schema: {json.dumps(schema)[:200]}")
    kind = schema["type"]
    if kind in NAMED:
        full = _define(schema, namespace, names)
        if kind == "record":
            fields = schema.get("fields")
            if not isinstance(fields, list) or not all(isinstance(f, dict) and isinstance(f.get("name"), str)
                                                       and "type" in f for f in fields):
                raise ValueError(f"record '{full}': 'fields' must be a list of objects with a name and a type")
            for field in fields:
                _collect(field["type"], _space(full), names)
        elif kind == "enum" and not (isinstance(schema.get("symbols"), list)
                                     and all(isinstance(s, str) for s in schema["symbols"])):
            raise ValueError(f"enum '{full}': 'symbols' must be a list of strings")
        elif kind == "fixed" and not _is_int(schema.get("size")):
            raise ValueError(f"fixed '{full}': 'size' must be an integer")
    elif kind in ("array", "map"):
        key = "items" if kind == "array" else "values"
        if key not in schema:
            raise ValueError(f"an Avro {kind} needs '{key}'")
        _collect(schema[key], namespace, names)
    elif kind not in PRIMITIVES:
        _lookup(kind, namespace, names)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _deref(schema: Schema, namespace: str, names: Names) -> tuple[Schema, str, str | None]:
    """Follow a type reference: (the type's definition, the namespace inside it, its full name or None)."""
    if isinstance(schema, dict):
        kind = schema.get("type")
        if kind in NAMED:
            full = _full_name(schema, namespace)
            return schema, _space(full), full
        if kind in PRIMITIVES or kind in COMPLEX:
            return schema, namespace, None
        schema = kind  # {"type": "SomeName"}: a reference
    if isinstance(schema, str) and schema not in PRIMITIVES:
        full = _lookup(schema, namespace, names)
        return names[full], _space(full), full
    return schema, namespace, None


def _kind(schema: Schema) -> str:
    """``union``, a primitive type or a complex type's name (of a dereferenced schema)."""
    if isinstance(schema, list):
        return "union"
    return schema["type"] if isinstance(schema, dict) else schema


def _is_null(schema: Schema) -> bool:
    return _kind(schema) == "null"


def _logical(schema: Schema) -> tuple | None:
    """The logical type Avro recognizes on this (dereferenced) schema: ``("decimal", p, s)``,
    ``("timestamp-millis",)``..., or None when there is none or it is invalid (and so ignored)."""
    if not isinstance(schema, dict):
        return None
    name, kind = schema.get("logicalType"), schema["type"]
    if name not in LOGICAL_TYPES.get(kind, ()):
        return None
    if name == "decimal":
        precision, scale = schema.get("precision"), schema.get("scale", 0)
        if not (_is_int(precision) and _is_int(scale) and 0 < precision and 0 <= scale <= precision):
            return None
        if kind == "fixed" and precision > math.floor(math.log10(2) * (8 * schema["size"] - 1)):
            return None  # more digits than the fixed size holds: Avro ignores the annotation
        return ("decimal", precision, scale)
    if (name == "duration" and schema["size"] != 12) or (name == "uuid" and kind == "fixed" and schema["size"] != 16):
        return None
    return (name,)


def _describe(schema: Schema, namespace: str, names: Names) -> str:
    """A short name for a type in messages: ``string``, ``long (timestamp-millis)``, ``record 'a.B'``."""
    schema, namespace, full = _deref(schema, namespace, names)
    kind = _kind(schema)
    if kind == "union":
        return "union [" + ", ".join(_describe(b, namespace, names) for b in schema) + "]"
    if full is not None:
        return f"{kind} '{full}'"
    logical = _logical(schema)
    if logical is None:
        return kind
    label = f"decimal({logical[1]},{logical[2]})" if logical[0] == "decimal" else logical[0]
    return f"{kind} ({label})"


def _where(path: str) -> str:
    return f"field '{path}': " if path else ""


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


# --- Spark types ---------------------------------------------------------------------------------

def spark_type(schema: Schema, names: Names | None = None, namespace: str = "", field: str = "") -> str:
    """The Spark SQL type (DDL) of an Avro type as Spark 4.2's ``from_avro`` reads it. ``names``
    holds the named types defined so far (filled while walking, so later references resolve);
    ``field`` names the field in errors. Raises ValueError for what Spark cannot read or Delta
    cannot store: unions of several types, recursive records, ``null`` alone, ``time-micros``,
    decimals over 38 digits, records without fields."""
    names = {} if names is None else names
    _collect(schema, namespace, dict(names))  # well formed first, without defining anything yet
    return _spark(schema, names, namespace, field, frozenset())


def _spark(schema: Schema, names: Names, namespace: str, path: str, open_records: frozenset[str]) -> str:
    if isinstance(schema, dict) and schema.get("type") in NAMED:
        _define(schema, namespace, names)
    schema, inner, full = _deref(schema, namespace, names)
    kind = _kind(schema)
    if kind == "union":
        return _spark_union(schema, names, namespace, path, open_records)
    if kind == "record":
        if full in open_records:
            raise ValueError(f"{_where(path)}record '{full}' contains itself: Spark cannot read recursive types")
        if not schema["fields"]:
            raise ValueError(f"{_where(path)}record '{full}' has no fields (an empty struct cannot be stored)")
        members = [f"`{f['name'].replace('`', '``')}`:"
                   f"{_spark(f['type'], names, inner, _join(path, f['name']), open_records | {full})}"
                   for f in schema["fields"]]
        return f"struct<{','.join(members)}>"
    if kind == "array":
        return f"array<{_spark(schema['items'], names, inner, path + '[]', open_records)}>"
    if kind == "map":
        return f"map<string,{_spark(schema['values'], names, inner, path + '{}', open_records)}>"
    return _spark_simple(schema, kind, path)


def _spark_simple(schema: Schema, kind: str, path: str) -> str:
    logical = _logical(schema)
    name = logical[0] if logical else None
    if kind == "null":
        raise ValueError(f"{_where(path)}type null alone has no storable Spark type (a column of nulls only)")
    if name == "decimal":
        _, precision, scale = logical
        if precision > SPARK_MAX_DECIMAL_PRECISION:
            raise ValueError(f"{_where(path)}decimal precision {precision} exceeds Spark's maximum of "
                             f"{SPARK_MAX_DECIMAL_PRECISION}")
        return f"decimal({precision},{scale})"
    if name == "time-micros":
        raise ValueError(f"{_where(path)}logical type time-micros is not supported: Spark 4.2 reads it as TIME, "
                         f"which it cannot write to a table (declare the field a plain long)")
    if name == "date":
        return "date"
    if name in ("timestamp-millis", "timestamp-micros"):
        return "timestamp"
    if name in ("local-timestamp-millis", "local-timestamp-micros"):
        return "timestamp_ntz"
    return {"boolean": "boolean", "int": "int", "long": "bigint", "float": "float", "double": "double",
            "string": "string", "enum": "string", "bytes": "binary", "fixed": "binary"}[kind]


def _spark_union(branches: list, names: Names, namespace: str, path: str, open_records: frozenset[str]) -> str:
    """``["null", T]`` is a nullable T; ``[int, long]`` and ``[float, double]`` widen (as in Spark);
    other unions of several types, which Spark reads as a struct of ``member0``, ``member1``..., are refused."""
    types = [b for b in branches if not _is_null(_deref(b, namespace, names)[0])]
    if not types:
        raise ValueError(f"{_where(path)}a union of null only has no storable Spark type")
    if len(types) == 1:
        return _spark(types[0], names, namespace, path, open_records)
    kinds = {_kind(_deref(b, namespace, names)[0]) for b in types}
    if len(types) == 2 and kinds == {"int", "long"}:
        return "bigint"
    if len(types) == 2 and kinds == {"float", "double"}:
        return "double"
    raise ValueError(f"{_where(path)}unions of several types are not supported "
                     f"({_describe(branches, namespace, names)}); only a type or null is")


def _is_nullable(schema: Schema) -> bool:
    return isinstance(schema, list) and any(_is_null(b) for b in schema)


def reader_fields(schema: dict) -> tuple[Field, ...]:
    """The reader schema's top-level fields as output columns: ``Field(name, Spark type, required)``,
    required when the Avro type is not a union with null. Raises ValueError naming the field when a
    name is not a valid column name, clashes with a Tidemark column or another field, or its type
    cannot be stored."""
    _require_record(schema)
    _collect(schema, "", {})
    if not schema["fields"]:
        raise ValueError("the reader schema's record has no fields")
    names: Names = {}
    full = _define(schema, "", names)
    fields: list[Field] = []
    seen: dict[str, str] = {}
    for field in schema["fields"]:
        name = field["name"]
        _check_column_name(name)
        if name.lower() in seen:
            raise ValueError(f"field '{name}' clashes with field '{seen[name.lower()]}' (column names are "
                             f"case-insensitive in Spark)")
        seen[name.lower()] = name
        ddl = _spark(field["type"], names, _space(full), name, frozenset({full}))
        fields.append(Field(name, ddl, not _is_nullable(field["type"])))
    return tuple(fields)


def _check_column_name(name: str) -> None:
    """The column name rules of ``tidemark.formats.records.parse_field_type``."""
    if not FIELD_NAME.match(name):
        raise ValueError(f"field name '{name}' must be letters, digits and _ (not starting with a digit)")
    if name.lower() in RESERVED_COLUMNS:
        taken = ", ".join(sorted(RESERVED_COLUMNS))
        raise ValueError(f"field name '{name}' clashes with a column Tidemark adds ({taken})")


# --- the Confluent wire format -------------------------------------------------------------------

def frame(schema_id: int, body: bytes) -> bytes:
    """A record value in the Confluent wire format: magic byte, 4-byte big-endian schema id, body."""
    if not 0 <= schema_id < 2**31:
        raise ValueError(f"schema id {schema_id} is not a non-negative 32-bit integer")
    return bytes([MAGIC_BYTE]) + schema_id.to_bytes(4, "big") + bytes(body)


def unframe(value: bytes) -> tuple[int, bytes]:
    """(schema id, Avro body) of a record value in the Confluent wire format. Raises ValueError."""
    if len(value) < HEADER_BYTES:
        raise ValueError(f"value of {len(value)} bytes is shorter than the {HEADER_BYTES}-byte header")
    if value[0] != MAGIC_BYTE:
        raise ValueError(f"magic byte is {value[0]}, not {MAGIC_BYTE}")
    return int.from_bytes(value[1:HEADER_BYTES], "big"), bytes(value[HEADER_BYTES:])
