"""The pipeline file's rules for ``value_format: protobuf`` (tidemark.config.pipeline, tidemark.config.value_settings):
the subject, a pinned version, no inline schema, and columns that are only known at plan time."""

from __future__ import annotations

from tests.unit.tidemark.test_config import pipeline, refused
from tidemark.batch.schemas import subject_of


def test_a_protobuf_pipeline_reads_its_schemas_from_the_registry():
    config = pipeline(topics=["orders"], value_format="protobuf")
    assert config.uses_registry and config.record_format.value_format == "protobuf"
    assert config.record_format.can_reject and config.schema_registry_conn_id == "schema_registry_default"
    assert subject_of(config.value_subject, config.topics) == "orders-value"
    pinned = pipeline(topics=["a", "b"], value_format="protobuf", value_subject="orders-value", value_schema_version=3)
    assert (pinned.value_subject, pinned.value_schema_version) == ("orders-value", 3)


def test_several_topics_or_a_pattern_need_a_value_subject():
    expected = ("value_format 'protobuf' reads the subject '<topic>-value' of a one-topic pipeline; with several "
                "topics or a topic_pattern, name the subject with value_subject")
    assert expected in refused(topics=["a", "b"], value_format="protobuf")
    assert expected in refused(topic_pattern="orders.*", value_format="protobuf")


def test_an_inline_value_schema_is_refused():
    assert "value_schema is only used with value_format: json" in refused(
        topics=["a"], value_format="protobuf", value_schema={"id": "bigint"})


def test_value_subject_and_version_name_protobuf_among_the_formats_that_use_them():
    assert "only used with value_format: avro or protobuf" in refused(topics=["a"], value_schema_version=2)


def test_payload_columns_are_checked_at_plan_time_not_when_the_file_is_read():
    config = pipeline(topics=["a"], value_format="protobuf", partition_by=["country"],
                      maintenance={"optimize_every": "24h", "zorder_by": ["order_id"]})
    assert config.partition_by == ["country"] and config.maintenance.zorder_by == ["order_id"]
    assert "partition_by: 'country' is not an output column" in refused(topics=["a"], partition_by=["country"])


def test_a_misspelt_format_lists_protobuf():
    assert "'value_format': Input should be 'raw', 'json', 'avro' or 'protobuf'" in refused(
        topics=["a"], value_format="proto")
