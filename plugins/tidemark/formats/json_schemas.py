"""JSON Schema from the Schema Registry (``value_format: json`` with ``value_subject``; pure): a subject's JSON
Schema versions as the columns of a JSON pipeline, and which writer versions its reader version can read.

Values are in the Confluent wire format (magic byte 0, a 4-byte schema id, then the JSON text), as Confluent's
``KafkaJsonSchemaSerializer`` writes them. The reader schema (the subject's latest version, or a pinned one)
gives the columns, exactly as an inline ``value_schema`` would:

=====================================  ===========================
JSON Schema property                   column
=====================================  ===========================
``"type": "integer"``                  ``bigint``
``"type": "number"``                   ``double``
``"type": "string"``                   ``string``
``"format": "date-time"`` (a string)   ``timestamp``
``"format": "date"`` (a string)        ``date``
``"type": "boolean"``                  ``boolean``
=====================================  ===========================

A property is required when the schema's ``required`` lists it and its type does not allow ``null``
(``"type": ["string", "null"]``). Nested objects, arrays, ``$ref`` and combinators (``oneOf``...) are refused
at plan time, naming the property. A writer version is readable when every property it shares with the reader
has the same column type (or one the reader's widens, ``tidemark.formats.type_changes``) and it has every property the
reader requires; the records of any other version are bad records that say why.
"""

from __future__ import annotations

import json

from tidemark.formats.records import Field, parse_field_type
from tidemark.formats.type_changes import is_widening

_SIMPLE = {"integer": "bigint", "number": "double", "string": "string", "boolean": "boolean"}
_FORMATS = {"date-time": "timestamp", "date": "date"}
_REFUSED = ("$ref", "oneOf", "anyOf", "allOf", "not", "if", "enum", "const")


def parse(text: str) -> dict:
    """A registered schema's text as a JSON Schema object. Raises ValueError."""
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"it is not JSON ({exc})") from None
    if not isinstance(schema, dict) or schema.get("type") != "object" or not isinstance(
            schema.get("properties"), dict):
        raise ValueError('its top level must be {"type": "object", "properties": {...}} (one column per property)')
    return schema


def _column(name: str, spec: object) -> tuple[str, bool]:
    """A property's column type and whether it may be null."""
    if not isinstance(spec, dict):
        raise ValueError(f"property '{name}' is not a schema object")
    if refused := [k for k in _REFUSED if k in spec]:
        raise ValueError(f"property '{name}' uses {', '.join(refused)}, which Tidemark does not map to a column yet; "
                         f"give it a plain type (integer, number, string, boolean)")
    types = spec.get("type")
    types = [types] if isinstance(types, str) else list(types or [])
    nullable = "null" in types
    kinds = [t for t in types if t != "null"]
    if len(kinds) != 1:
        raise ValueError(f"property '{name}' has type {json.dumps(spec.get('type'))}: give one type (and null, for a "
                         f"property that may be null)")
    kind = kinds[0]
    if kind in ("object", "array"):
        raise ValueError(f"property '{name}' is an {kind}: nested objects and arrays are not mapped to columns yet; "
                         f"flatten it, or read it as a string in a raw pipeline with a transform")
    if kind not in _SIMPLE:
        raise ValueError(f"property '{name}' has the unknown type '{kind}'")
    column = _FORMATS.get(spec.get("format", ""), "string") if kind == "string" else _SIMPLE[kind]
    return column, nullable


def fields(text: str) -> tuple[Field, ...]:
    """The columns of a reader schema, in its properties' order. Raises ValueError naming the property."""
    schema = parse(text)
    required = set(schema.get("required") or ())
    found = []
    for name, spec in schema["properties"].items():
        column, nullable = _column(name, spec)
        found.append(parse_field_type(name, column + ("" if name in required and not nullable else "?")))
    return tuple(found)


def incompatibility(writer: str, reader: str) -> str | None:
    """Why a writer version's records cannot be read into the reader version's columns (None when they can)."""
    try:
        written = {f.name: f for f in fields(writer)}
    except ValueError as exc:
        return str(exc)
    problems = []
    for f in fields(reader):
        mine = written.get(f.name)
        if mine is None:
            if f.required:
                problems.append(f"it lacks '{f.name}', which the reader requires")
        elif mine.type != f.type and not is_widening(mine.type, f.type):
            problems.append(f"'{f.name}' is {mine.type} there but {f.type} in the reader")
    return "; ".join(problems) or None
