"""The pure side of SQL transforms: what a pipeline file may say, which coordinates an output carries, the
filtered counts, and how a transform's output may change the table (``schema_changes``)."""

from __future__ import annotations

import pytest

from tidemark.batch.schemas import fit_transform_output
from tidemark.config.pipeline import parse_pipeline
from tidemark.config.transforms import check_sql, missing_coordinates
from tidemark.errors import ConfigError, TransformError
from tidemark.formats.record_format import RecordFormat

pytestmark = pytest.mark.unit

BASE = {"name": "orders", "topics": ["orders"], "table": "orders", "value_format": "json",
        "value_schema": {"id": "bigint", "country": "string"}}


@pytest.mark.parametrize("sql", [
    "SELECT * FROM records",
    "  select id from RECORDS where country = 'a;b' ;  ",
    "WITH x AS (SELECT * FROM records) SELECT * FROM x",
    "SELECT * FROM records -- trailing; comment",
    "SELECT * /* ; */ FROM records r LEFT JOIN delta.`/lake/dims` d ON r.country = d.code",
    "SELECT `id;x` AS id FROM `records`",  # a quoted name: the view's, and a ';' inside one
    "SELECT country, count(*) AS n FROM records GROUP BY country ORDER BY n LIMIT 3",
    "SELECT `order` FROM records r WHERE r.`order` > 0",
])
def test_one_query_over_records_is_accepted(sql):
    assert check_sql(sql) == sql.strip().rstrip(";").strip()


@pytest.mark.parametrize(("sql", "says"), [
    ("", "is empty"),
    ("   ;", "is empty"),
    ("DROP TABLE records", "starts with 'DROP'"),
    ("INSERT INTO t SELECT * FROM records", "starts with 'INSERT'"),
    ("SELECT 1; SELECT * FROM records", "more than one statement"),
    ("SELECT * FROM orders", "does not read 'records'"),
    ("SELECT 'records' AS x FROM orders", "does not read 'records'"),
    ('SELECT "records" AS x FROM `orders`', "does not read 'records'"),
    ("SELECT * FROM records WHERE x = '" + "y" * 20_000 + "'", "at most 20000"),
    # A clause keyword with nothing of its clause: Spark's parser takes it as the table's alias (issue 61)
    ("SELECT * FROM records WHERE", "'WHERE' right after 'records' .* an alias of 'records'.* write every record"),
    ("SELECT * FROM records where -- the filter comes later\n", "'where' right after 'records'"),
    ("SELECT id FROM records GROUP", "'GROUP' right after 'records'"),
    ("SELECT id FROM records ORDER LIMIT 3", "'ORDER' right after 'records'"),
    ("SELECT * FROM records AS HAVING", "'HAVING' right after 'records'"),
    ("SELECT * FROM (SELECT * FROM records LIMIT) t", "'LIMIT' right after 'records'"),
])
def test_anything_else_is_refused_when_the_file_is_read(sql, says):
    with pytest.raises(ConfigError, match=says) as refused:
        parse_pipeline({**BASE, "transform": sql}, "orders.yaml")
    assert "orders.yaml" in str(refused.value) and "transform" in str(refused.value)


def test_a_transform_travels_in_the_frozen_format():
    config = parse_pipeline({**BASE, "transform": "SELECT * FROM records", "schema_changes": "lenient"}, "f")
    fmt = config.record_format
    assert (fmt.transform, fmt.schema_changes) == ("SELECT * FROM records", "lenient")
    assert RecordFormat.from_dict(fmt.to_dict()) == fmt
    assert RecordFormat.from_dict({k: v for k, v in fmt.to_dict().items()
                                   if k not in ("transform", "schema_changes")}).transform is None  # an older plan


def test_a_keyed_table_may_have_a_transform_and_neither_may_have_a_value_sample():
    keyed = parse_pipeline({**BASE, "transform": "SELECT * FROM records", "keyed": {"keys": ["id"]}}, "f")
    assert keyed.record_format.transform and keyed.record_format.keyed
    with pytest.raises(ConfigError, match="audit.verify_sample .3. cannot be used on a pipeline with a transform"):
        parse_pipeline({**BASE, "transform": "SELECT * FROM records", "audit": {"every": "1d", "verify_sample": 3}},
                       "f")


def test_partition_and_zorder_columns_of_a_transform_are_checked_in_the_job():
    config = parse_pipeline({**BASE, "transform": "SELECT *, upper(country) AS region FROM records",
                             "partition_by": ["region"],
                             "maintenance": {"optimize_every": "1d", "zorder_by": ["id2"]}}, "f")
    assert config.partition_by == ["region"]


def test_an_output_carries_a_coordinate_only_under_its_own_tag():
    carried = {"kafka_topic": "kafka_topic", "kafka_partition": "kafka_offset", "kafka_offset": None, "x": None}
    assert missing_coordinates(carried) == ["kafka_partition", "kafka_offset"]
    assert missing_coordinates({c: c for c in ("kafka_topic", "kafka_partition", "kafka_offset")}) == []


TABLE = {"kafka_topic": "string", "kafka_offset": "bigint", "id": "bigint", "amount": "decimal(10,2)",
         "gone": "string"}


def test_a_transform_output_adds_columns_and_widens_them_as_a_value_schema_would():
    output = {"kafka_topic": "string", "kafka_offset": "bigint", "id": "bigint", "amount": "decimal(12,2)",
              "gone": "string", "new": "int"}
    assert fit_transform_output("p", "/t", output, TABLE, "additive") == (True, {"amount": "decimal(12,2)"})
    assert fit_transform_output("p", "/t", output, None, "additive") == (False, {})  # no table yet


def test_a_transform_output_that_does_not_fit_is_refused_naming_the_column():
    output = {"kafka_topic": "string", "kafka_offset": "bigint", "id": "string", "amount": "decimal(10,2)"}
    with pytest.raises(TransformError) as refused:
        fit_transform_output("p", "/t", output, TABLE, "additive")
    message = str(refused.value)
    assert "column 'id' is string in the transform's output but bigint in the table" in message
    assert "CAST it to bigint" in message and "column 'gone' is no longer" in message
    with pytest.raises(TransformError, match="column 'id'") as lenient:
        fit_transform_output("p", "/t", output, TABLE, "lenient")
    assert "gone" not in str(lenient.value)  # lenient leaves a dropped column null
    del output["id"]
    assert fit_transform_output("p", "/t", {**output, "id": "bigint"}, TABLE, "lenient") == (False, {})
