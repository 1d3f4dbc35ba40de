"""Record formats, decided before Spark starts: what a value (raw, JSON, Avro, Protobuf, Debezium envelopes) and
a key hold, which writer schemas a reader schema can read, and which type changes keep every value exactly.
Pure values that travel inside the frozen plan; the only I/O is the Schema Registry client, read at plan time.
The Spark side of decoding is ``tidemark.batch.spark``.

- ``records``: ``RecordFormat`` and ``Field``, the format a batch is frozen with, and the output's columns;
- ``type_changes``: widenings that keep every value;
- ``avro_schemas``, ``avro_resolution``: Avro types, the wire format and schema resolution;
- ``json_schemas``: JSON Schema subjects as columns;
- ``protobuf_schemas``, ``protobuf_types``, ``protobuf_wire``: Protobuf, frozen as
  descriptor sets, their columns and the wire format (decoded in the JVM: jvm/protobuf);
- ``debezium``: Debezium change events;
- ``schema_registry``: the registry client (``SchemaSource``).
"""

__all__ = ["avro_resolution", "avro_schemas", "debezium", "json_schemas", "protobuf_schemas",
           "protobuf_types", "protobuf_wire", "records", "schema_registry", "type_changes"]
