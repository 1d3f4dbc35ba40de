"""Protobuf value schemas from the Schema Registry, frozen before Spark starts (``value_format: protobuf``).

``freeze_protobuf`` reads every version of the subject (schemaType PROTOBUF), compiles each with protoc
(``grpc_tools.protoc``, the well-known types on its include path; the version's registry references written
beside it) into a FileDescriptorSet, and decides:

* the **reader message**: the first message of the reader version's file (message indexes [0]; the subject's
  latest version, or the pinned one). Its top-level fields are the output columns (``tidemark.formats.protobuf_types``);
* the **writers**: every version whose file declares a message of the reader message's full name whose values
  read as the reader's exactly (``tidemark.formats.protobuf_types.incompatibility``), with that message's message-index
  path;
* the **unreadable** ids, with the reason: another message shape, no such message, a file protoc refuses.

The result (``FrozenProtobuf``) carries each descriptor set base64-encoded; it is frozen in the ledger with the
batch (``frozen_schemas``) and travels in the plan, so the Spark job (``tidemark.batch.spark.protobuf_udf``) and every
retry decode with exactly these schemas, without the registry or protoc.
"""

from __future__ import annotations

import base64
import importlib.resources
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

from tidemark.errors import SchemaRegistryError
from tidemark.formats.records import Field
from tidemark.formats.schema_registry import RegisteredSchema, SchemaSource

PROTOC_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class FrozenProtobuf:
    """The Protobuf schemas of one subject that a batch decodes with (JSON-ready)."""

    subject: str
    reader_id: int
    reader_version: int
    message: str
    """The reader message's full name (``shop.Order``)."""
    descriptors: dict[str, str] = field(default_factory=dict)
    """Schema id -> its FileDescriptorSet (imports included), base64: the reader's and every writer's."""
    files: dict[str, str] = field(default_factory=dict)
    """Schema id -> the name of the schema's own file inside its descriptor set."""
    versions: dict[str, int] = field(default_factory=dict)
    """Schema id -> its version of the subject."""
    writers: dict[str, list[int]] = field(default_factory=dict)
    """Schema id -> the message-index path of the reader message in its file, for every readable id."""
    unreadable: dict[str, str] = field(default_factory=dict)
    """Schema id -> why its records cannot be read as the reader message (they become bad records)."""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> FrozenProtobuf:
        return cls(**data)

    def fields(self) -> tuple[Field, ...]:
        """The reader message's top-level fields, as columns."""
        from tidemark.formats.protobuf_types import load_file, message_shape, reader_fields

        key = str(self.reader_id)
        file = load_file(base64.b64decode(self.descriptors[key]), self.files[key])
        return reader_fields(message_shape(file.pool.FindMessageTypeByName(self.message)))


def include_path() -> str:
    """The folder of the well-known types' .proto files that grpc_tools ships (google/protobuf/*.proto)."""
    return str(importlib.resources.files("grpc_tools") / "_proto")


def file_name(schema: RegisteredSchema) -> str:
    """The name a schema's own file gets in its descriptor set (its imports keep their registered names)."""
    return f"tidemark_schema_{schema.id}.proto"


def _sources(schema: RegisteredSchema, source: SchemaSource, files: dict[str, str]) -> dict[str, str]:
    """The .proto texts a schema needs, by file name: its own and its references', transitively. Raises
    ValueError for a reference the registry does not hold or a name that is not a relative path."""
    for name, subject, version in schema.references:
        path = PurePosixPath(name)
        if path.is_absolute() or ".." in path.parts or not name:
            raise ValueError(f"reference '{name}' is not a relative .proto path")
        if name in files:
            continue
        found = [s for s in source.versions(subject) if s.version == version]
        if not found:
            raise ValueError(f"reference '{name}' (subject '{subject}' version {version}) is not in the registry")
        files[name] = found[0].schema
        _sources(found[0], source, files)
    return files


def descriptor_set(schema: RegisteredSchema, source: SchemaSource) -> bytes:
    """The schema compiled by protoc into a FileDescriptorSet with its imports (well-known types and
    registry references). Raises ValueError with protoc's own message when it refuses the schema."""
    files = _sources(schema, source, {file_name(schema): schema.schema})
    with tempfile.TemporaryDirectory(prefix="tidemark-protoc-") as tmp:
        for name, text in files.items():
            target = Path(tmp, "src", name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        out = Path(tmp, "set.pb")
        command = [sys.executable, "-m", "grpc_tools.protoc", f"-I{Path(tmp, 'src')}", f"-I{include_path()}",
                   f"--descriptor_set_out={out}", "--include_imports", file_name(schema)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=PROTOC_TIMEOUT_S, cwd=tmp)
        except subprocess.TimeoutExpired:
            raise ValueError(f"protoc did not finish within {PROTOC_TIMEOUT_S:g} s") from None
        if done.returncode != 0 or not out.exists():
            said = " ".join((done.stderr or done.stdout).replace(str(Path(tmp, "src")) + "/", "").split())
            raise ValueError(f"protoc refuses it: {said[:600] or f'exit code {done.returncode}'}")
        return out.read_bytes()


def _label(subject: str, schema: RegisteredSchema) -> str:
    return f"subject '{subject}' version {schema.version} (id {schema.id})"


def _reader(pipeline: str, subject: str, pinned: int | None, registered: list[RegisteredSchema]) -> RegisteredSchema:
    if pinned is None:
        return max(registered, key=lambda s: s.version)
    matching = [s for s in registered if s.version == pinned]
    if not matching:
        raise SchemaRegistryError(
            f"value_schema_version {pinned} is not a Protobuf version of subject '{subject}' (versions: "
            f"{', '.join(str(s.version) for s in registered)}). Nothing was frozen: pin one of them, or remove "
            f"value_schema_version to read with the latest", pipeline=pipeline)
    return matching[0]


def freeze_protobuf(pipeline: str, subject: str, pinned_version: int | None, source: SchemaSource) -> FrozenProtobuf:
    """Read the subject's versions and decide the batch's schemas (the module's rules). Raises
    SchemaRegistryError, saying what to do, when the subject has no Protobuf version, the pinned version is not
    one, or the reader version does not compile or its first message cannot be written as columns."""
    from tidemark.formats.protobuf_types import load_file, message_shape, messages_by_path, reader_fields

    every = source.versions(subject)
    registered = [s for s in every if s.schema_type.upper() == "PROTOBUF"]
    if not registered:
        kinds = sorted({s.schema_type.upper() for s in every}) or ["none"]
        raise SchemaRegistryError(
            f"subject '{subject}' has no Protobuf schema in the Schema Registry (its versions' types: "
            f"{', '.join(kinds)}). Nothing was frozen: register the value schema with schemaType PROTOBUF, or set "
            f"value_format to the subject's format", pipeline=pipeline)
    reader = _reader(pipeline, subject, pinned_version, registered)
    try:
        built = descriptor_set(reader, source)
        file = load_file(built, file_name(reader))
        messages = messages_by_path(file)
        if not messages:
            raise ValueError("its file declares no message")
        shape = message_shape(messages[(0,)])
        reader_fields(shape)
    except ValueError as exc:
        raise SchemaRegistryError(
            f"the value reader schema ({_label(subject, reader)}) cannot be used: {exc}. Nothing was frozen: register "
            f"a version that protoc compiles (its imports registered as references) and whose first message's fields "
            f"can be columns, or pin value_schema_version to one", pipeline=pipeline) from None
    descriptors, files, versions, writers, unreadable = {}, {}, {}, {}, {}
    for schema in registered:
        key = str(schema.id)
        try:
            data = built if schema is reader else descriptor_set(schema, source)
            reason, path = _readable(load_file(data, file_name(schema)), shape)
        except ValueError as exc:
            reason, path, data = str(exc), None, b""
        if path is None:
            unreadable[key] = (f"schema id {schema.id} (version {schema.version}) cannot be read as the reader "
                               f"message '{shape.name}' (version {reader.version}): {reason}")
            continue
        descriptors[key] = base64.b64encode(data).decode("ascii")
        files[key], versions[key], writers[key] = file_name(schema), schema.version, list(path)
    return FrozenProtobuf(subject, reader.id, reader.version, shape.name, descriptors, files, versions, writers,
                          unreadable)


def _readable(file, reader) -> tuple[str | None, tuple[int, ...] | None]:
    """(None, the message-index path of the reader message in the writer's file), or (why not, None)."""
    from tidemark.formats.protobuf_types import incompatibility, message_shape, messages_by_path

    found = {message.full_name: (path, message) for path, message in messages_by_path(file).items()}
    if reader.name not in found:
        return f"its file declares no message '{reader.name}'", None
    path, message = found[reader.name]
    reason = incompatibility(message_shape(message), reader)
    return (reason, None) if reason else (None, path)
