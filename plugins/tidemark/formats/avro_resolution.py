"""Avro schema resolution, decided before Spark starts: whether every record written with one schema
can be read with another (the Avro specification's rules, conservatively), and if not, why, naming the
field. Pure: stdlib only; the schema model is ``tidemark.formats.avro_schemas``."""

from __future__ import annotations

import json
from typing import Any

from tidemark.formats.avro_schemas import (  # the schema model's own helpers, shared with resolution
    LOSSY_PROMOTIONS,
    NAMED,
    PROMOTIONS,
    Names,
    Schema,
    _collect,
    _deref,
    _describe,
    _is_int,
    _join,
    _kind,
    _logical,
    _space,
    _where,
)


def incompatibility(writer: dict, reader: dict) -> str | None:
    """None when every record written with ``writer`` can be read with ``reader`` (Avro schema
    resolution), else why not, naming the field. Conservative where the specification fails only
    when an offending value occurs: every branch of a writer union, and every writer enum symbol
    (unless the reader enum has a default), must resolve; records match by name (or a reader alias)
    even where Avro's Java library would not look. Also refused: a field whose logical type
    changes meaning (``timestamp-millis`` -> ``timestamp-micros``, another decimal scale, a smaller
    decimal precision), and a reader default that is not valid for its type. Raises ValueError
    when a schema is not well formed."""
    writer_names: Names = {}
    reader_names: Names = {}
    _collect(writer, "", writer_names)
    _collect(reader, "", reader_names)
    return _Resolution(writer_names, reader_names).check(writer, "", reader, "", "")


class _Resolution:
    """One writer schema against one reader schema."""

    def __init__(self, writer_names: Names, reader_names: Names) -> None:
        self.writer_names = writer_names
        self.reader_names = reader_names
        self.records: set[tuple[str, str]] = set()
        """Record pairs checked or being checked (a recursive record is assumed to resolve into itself)."""

    def check(self, writer: Schema, writer_ns: str, reader: Schema, reader_ns: str, path: str) -> str | None:
        w, w_inner, w_full = _deref(writer, writer_ns, self.writer_names)
        r, r_inner, r_full = _deref(reader, reader_ns, self.reader_names)
        w_kind, r_kind = _kind(w), _kind(r)
        if w_kind == "union":
            for branch in w:
                if problem := self.check(branch, writer_ns, reader, reader_ns, path):
                    return problem
            return None
        if r_kind == "union":
            branch = self._branch(w, w_kind, w_full, r, reader_ns)
            if branch is None:
                return self._cannot(writer, writer_ns, reader, reader_ns, path)
            return self.check(writer, writer_ns, branch, reader_ns, path)
        if w_kind != r_kind:
            if r_kind not in PROMOTIONS.get(w_kind, ()):
                return self._cannot(writer, writer_ns, reader, reader_ns, path)
            if (w_kind, r_kind) in LOSSY_PROMOTIONS:
                return (self._cannot(writer, writer_ns, reader, reader_ns, path) + f" exactly (Avro promotes {w_kind} "
                        f"to {r_kind}, which changes {w_kind} values beyond 2**{24 if r_kind == 'float' else 53})")
            return self._logical_change(writer, writer_ns, reader, reader_ns, path)
        if w_kind in NAMED and not _names_match(w_full, r, r_full):
            return (f"{_where(path)}writer {w_kind} '{w_full}' cannot be read as reader {r_kind} '{r_full}' (the "
                    f"names differ and no alias of the reader's matches)")
        if w_kind == "record":
            return self._record(w, w_inner, w_full, r, r_inner, r_full, path)
        if w_kind == "enum":
            missing = [s for s in w["symbols"] if s not in r["symbols"]]
            if missing and r.get("default") not in r["symbols"]:
                return (f"{_where(path)}writer enum '{w_full}' has symbols {', '.join(missing)} that the reader enum "
                        f"lacks, and the reader enum has no default")
            return None
        if w_kind == "fixed" and w["size"] != r["size"]:
            return f"{_where(path)}writer fixed '{w_full}' has {w['size']} bytes, the reader's has {r['size']}"
        if w_kind == "array":
            return self.check(w["items"], w_inner, r["items"], r_inner, path + "[]")
        if w_kind == "map":
            return self.check(w["values"], w_inner, r["values"], r_inner, path + "{}")
        return self._logical_change(writer, writer_ns, reader, reader_ns, path)

    def _branch(self, w: Schema, w_kind: str, w_full: str | None, union: list, reader_ns: str) -> Schema | None:
        """The reader union's branch a non-union writer type resolves into: the first of the same
        type (and name), else the first it is promoted to (as Avro's Java library picks)."""
        resolved = [(b, *_deref(b, reader_ns, self.reader_names)) for b in union]
        for branch, r, _, r_full in resolved:
            if _kind(r) == w_kind and (w_kind not in NAMED or _names_match(w_full, r, r_full)):
                return branch
        for branch, r, _, _ in resolved:
            if _kind(r) in PROMOTIONS.get(w_kind, ()):
                return branch
        return None

    def _record(self, w: dict, w_inner: str, w_full: str, r: dict, r_inner: str, r_full: str,
                path: str) -> str | None:
        if (w_full, r_full) in self.records:
            return None
        self.records.add((w_full, r_full))
        written = {f["name"]: f for f in w["fields"]}
        for field in r["fields"]:
            name = _join(path, field["name"])
            source = next((written[n] for n in [field["name"], *field.get("aliases", [])] if n in written), None)
            if source is not None:
                if problem := self.check(source["type"], w_inner, field["type"], r_inner, name):
                    return problem
            elif "default" not in field:
                return f"field '{name}': missing in the writer schema and has no default in the reader schema"
            elif not _valid_default(field["type"], r_inner, self.reader_names, field["default"]):
                return (f"field '{name}': missing in the writer schema, and its default in the reader schema "
                        f"({json.dumps(field['default'])}) is not a valid "
                        f"{_describe(field['type'], r_inner, self.reader_names)}")
        return None

    def _logical_change(self, writer: Schema, writer_ns: str, reader: Schema, reader_ns: str,
                        path: str) -> str | None:
        """Refuse a logical type that would reinterpret the values (Avro itself ignores logical types)."""
        w = _logical(_deref(writer, writer_ns, self.writer_names)[0])
        r = _logical(_deref(reader, reader_ns, self.reader_names)[0])
        if w is None or r is None or w == r:
            return None
        if w[0] == r[0] == "decimal" and w[2] == r[2] and r[1] >= w[1]:
            return None
        return self._cannot(writer, writer_ns, reader, reader_ns, path) + " (the values would change meaning)"

    def _cannot(self, writer: Schema, writer_ns: str, reader: Schema, reader_ns: str, path: str) -> str:
        return (f"{_where(path)}writer type {_describe(writer, writer_ns, self.writer_names)} cannot be read as "
                f"{_describe(reader, reader_ns, self.reader_names)}")


def _unqualified(name: str) -> str:
    return name.rpartition(".")[2]


def _names_match(writer_full: str | None, reader: dict, reader_full: str | None) -> bool:
    """Named types match by unqualified name, or by a reader alias. An alias is qualified by the
    reader type's namespace and must be the writer's full name, as Avro's Java library (Spark's)
    requires of enums and fixed types; for a record its unqualified name is enough, as for the name."""
    writer_full, reader_full = writer_full or "", reader_full or ""
    if _unqualified(writer_full) == _unqualified(reader_full):
        return True
    aliases = [a for a in reader.get("aliases") or [] if isinstance(a, str)]
    if reader["type"] == "record" and any(_unqualified(a) == _unqualified(writer_full) for a in aliases):
        return True
    space = _space(reader_full)
    return any((a if "." in a or not space else f"{space}.{a}") == writer_full for a in aliases)


def _valid_default(schema: Schema, namespace: str, names: Names, value: Any) -> bool:
    """Whether a field default is valid for its type (for a union: for one of its types, as Avro 1.12)."""
    schema, inner, _ = _deref(schema, namespace, names)
    kind = _kind(schema)
    if kind == "union":
        return any(_valid_default(branch, namespace, names, value) for branch in schema)
    if kind == "record":
        return isinstance(value, dict) and all(
            _valid_default(f["type"], inner, names, value[f["name"]]) if f["name"] in value
            else "default" in f and _valid_default(f["type"], inner, names, f["default"])
            for f in schema["fields"])
    if kind == "array":
        return isinstance(value, list) and all(_valid_default(schema["items"], inner, names, v) for v in value)
    if kind == "map":
        return isinstance(value, dict) and all(_valid_default(schema["values"], inner, names, v)
                                               for v in value.values())
    checks = {
        "null": lambda v: v is None,
        "boolean": lambda v: isinstance(v, bool),
        "int": lambda v: _is_int(v) and -2**31 <= v < 2**31,
        "long": lambda v: _is_int(v) and -2**63 <= v < 2**63,
        "float": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "double": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "string": lambda v: isinstance(v, str),
        "bytes": lambda v: isinstance(v, str),
        "enum": lambda v: isinstance(v, str) and v in schema["symbols"],
        "fixed": lambda v: isinstance(v, str) and len(v) == schema["size"],
    }
    return checks[kind](value)
