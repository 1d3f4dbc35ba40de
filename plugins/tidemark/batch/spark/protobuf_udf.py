"""Protobuf values decoded in Spark (``value_format: protobuf``): a JVM UDF over the value column, Tidemark's
``io.tidemark.spark.ProtobufDecode`` (jvm/protobuf, built into the Spark jar set by ``make jars``), giving per record
a struct of the reader message's fields (``row``) and why the record is bad (``error``, null for a good one).

The decoder parses with protobuf-java's dynamic messages from the batch's frozen schemas alone (the descriptor set
of each schema id): no registry, no protoc, no Python worker. Its checks, words and types are those of the table in
``tidemark.formats.protobuf_types`` (tests/protobuf_reference.py holds the same rules in Python, and the tests hold
the two to each other). Why not Spark's ``from_protobuf``: it lives in the ``spark-protobuf`` jar, which Maven
Central as reachable here does not serve; Spark 4.2 refuses the function without it
(``PROTOBUF_NOT_LOADED_SQL_FUNCTIONS_UNUSABLE``). Until 2026-12 this was an Arrow UDF in Python workers, at 0.83x
Avro's throughput (docs/BENCHMARKS.md, *Protobuf against Avro*).
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession

    from tidemark.formats.protobuf_schemas import FrozenProtobuf

JVM_CLASS = "io.tidemark.spark.ProtobufDecode"


def frozen_json(frozen: FrozenProtobuf) -> str:
    """What the JVM decoder reads: the frozen schemas and the reader message's Spark type (``row``, DDL)."""
    row = ",".join(f"`{f.name}`:{f.type}" for f in frozen.fields())
    return json.dumps({**frozen.to_dict(), "row": f"struct<{row}>"}, sort_keys=True)


def decoded(spark: SparkSession, frozen: FrozenProtobuf, column: str = "value") -> Column:
    """The ``{row, error}`` struct of each record's value (the reader message's fields, and why it is bad). The
    UDF is registered in ``spark`` under a name of its schemas, so sessions and batches never see another's."""
    from pyspark.sql import functions as F

    text = frozen_json(frozen)
    name = "tidemark_protobuf_" + hashlib.sha256(text.encode()).hexdigest()[:16]
    row = json.loads(text)["row"]
    spark.udf.registerJavaFunction(name, JVM_CLASS, f"struct<row:{row},error:string>")
    # The schemas travel as one binary literal: Spark hands the UDF that one array for every row of a task.
    return F.call_function(name, F.col(column), F.lit(bytearray(text.encode())))
