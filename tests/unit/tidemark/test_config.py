from __future__ import annotations

from pathlib import Path

import pytest

from tidemark.batch.schemas import subject_of
from tidemark.config.pipeline import PipelineConfig, find_pipeline, load_all, load_pipeline, parse_pipeline
from tidemark.errors import ConfigError
from tidemark_airflow.naming import ingest_dag_id

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "pipelines"


def test_three_keys_are_enough_and_defaults_apply(monkeypatch, tmp_path):
    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(tmp_path))
    config = load_pipeline(FIXTURES / "good" / "orders.yaml")
    assert config.topics == ["orders"]
    assert config.table_uri == str(tmp_path / "orders")
    assert (config.kafka_conn_id, config.spark_conn_id) == ("kafka_default", "spark_default")
    assert (config.starting_offsets, config.on_data_loss) == ("earliest", "fail")
    assert config.isolation_level == "read_committed" and config.max_offsets_per_run is None
    assert ingest_dag_id(config.name) == "tidemark_ingest__orders"


def test_every_option_parses_and_uris_pass_through():
    config = load_pipeline(FIXTURES / "good" / "payments.yaml")
    assert config.table_uri == "s3a://bucket/lake/payments"
    assert config.max_offsets_per_run == 100000 and config.spark_conf == {"spark.sql.shuffle.partitions": "4"}


def test_documented_defaults_match_the_model():
    fields = PipelineConfig.model_fields
    assert {n for n, f in fields.items() if f.is_required()} == {"name", "table"}
    documented = (Path(__file__).resolve().parents[3] / "docs" / "CONFIGURATION.md").read_text()
    for name in fields:
        assert f"| `{name}` |" in documented, f"docs/CONFIGURATION.md does not document '{name}'"


# One broken fixture per validation rule, with the message a user sees.
BROKEN = {
    "unknown_key": r"unknown key 'colour' \(accepted keys: name, topics, topic_pattern, table",
    "missing_table": r"'table' is required",
    "empty_table": r"'table': String should have at least 1 character",
    "empty_topics": r"give exactly one of 'topics' \(a list of names\) or 'topic_pattern'",
    "topics_and_pattern": r"give exactly one of 'topics' .* or 'topic_pattern' \(a regular expression\)",
    "topics_not_list": r"'topics': Input should be a valid list",
    "bad_topic": r"'topics': 'no spaces allowed' is not a valid Kafka topic name",
    "dup_topics": r"'topics': topics are listed more than once",
    "bad_pattern": r"'topic_pattern': 'orders-\(\[' is not a valid regular expression",
    "bad_start": r"'starting_offsets': 'yesterday' is not 'earliest', 'latest' or an ISO-8601 date-time",
    "bad_policy": r"'on_data_loss': Input should be 'fail' or 'skip'",
    "bad_isolation": r"'isolation_level': Input should be 'read_committed' or 'read_uncommitted'",
    "bad_cap": r"'max_offsets_per_run': Input should be greater than 0",
    "bad_schedule": r"'schedule': '61 \* \* \* \*' is not a cron expression or preset",
    "bad_spark_conf": r"'spark_conf': Input should be a valid dictionary",
    "bad_timeout": r"'kafka_timeout_seconds': Input should be greater than 0",
    "bad_mirror": r"'mirror_consumer_group': Input should be a valid boolean",
    "bad_format": r"'value_format': Input should be 'raw', 'json', 'avro' or 'protobuf'",
    "json_without_schema": r"value_format 'json' needs a value_schema",
    "schema_without_json": r"value_schema is only used with value_format: json",
    "bad_field_type": r"value_schema: field 'id': unknown type 'integerish' \(accepted: bigint",
    "reserved_field": r"value_schema: field name 'kafka_offset' clashes with a column Tidemark adds",
    "bad_value_bytes": r"'max_value_bytes': Input should be greater than 0",
    "bad_bad_record": r"'on_bad_record': Input should be 'dead_letter' or 'fail'",
    "bad_partition_by": r"partition_by: 'country' is not an output column \(one of kafka_topic",
    "dup_partition_by": r"partition_by lists a column more than once",
    "bad_retries": r"'retries': Input should be less than or equal to 20",
    "bad_retry_delay": r"'retry_delay_seconds': Input should be greater than 0",
    "not_yaml": r"not valid YAML",
    "name_mismatch": r"'name' is 'other_name' but the file is named 'name_mismatch.yaml'",
    "not_mapping": r"expected a mapping of keys",
    "bad_name": r"'name': 'bad name!' is not a pipeline name: letters, digits, '_', '.' and '-', up to 200 "
                r"characters, not starting with '.' or '-'$",
    "spark_conf_number": r"'spark_conf.spark.executor.cores': Spark settings are strings: write the value in quotes, "
                         r'"2"$',
    "schema_as_list": r"'value_schema': Input should be a mapping of field names to types, not a list: write "
                      r"value_schema: \{id: bigint",
    "both_cap_names": r"'max_records_per_run' is the old name of 'max_offsets_per_run': give only max_offsets_per_run$",
    "keyed_raw": r"keyed needs value_format: json \(with an inline value_schema\) or avro, not 'raw'",
    "keyed_without_keys": r"keyed.keys: name the key columns \(keys: \[id\]\); only envelope: debezium takes them "
                          r"from the Kafka key",
    "keyed_protobuf": r"keyed needs value_format: json \(with an inline value_schema\) or avro, not 'protobuf'",
    "keyed_registry_json": r"keyed needs a JSON value's schema inline \(value_schema\): a keyed table does not take a "
                           r"JSON Schema from the Schema Registry \(value_subject: a-value\) yet",
    "history_two_orderings": r"keyed.history: scd2 takes each version's valid_from and valid_to from the ordering: "
                             r"name one field that orders the changes .*, not 2 fields$",
    "history_without_ordering": r"keyed.history: scd2 takes .* or use envelope: debezium$",
    "history_column_taken": r"the value_schema has a field 'valid_from', a column that keyed.history adds "
                            r"\(valid_from, valid_to, is_current\): rename it",
    "history_with_transform": r"a transform feeding a history table is not supported: remove the transform, or keep "
                              r"history: none",
    "history_unknown": r"'keyed.history': Input should be 'none' or 'scd2'",
    # strict values (issue 42): a wrong type is a wrong pipeline, not a value read some other way
    "bool_cap": r"'max_offsets_per_run': Input should be a valid integer, not true \(a boolean\)$",
    "quoted_retries": r"'retries': Input should be a valid integer, not '3' \(a string\): write a whole number without "
                      r"quotes$",
    "quoted_mirror": r"'mirror_consumer_group': Input should be a valid boolean, not 'false' \(a string\): write true "
                     r"or false without quotes$",
    "unitless_sla": r"'freshness_sla': 7200 has no unit \(seconds\? hours\?\): write it with one, 7200s, 7200m, 7200h "
                    r"or 7200d$",
    "bool_hold": r"'lag.hold_warning_after': true is not a duration: give a number and a unit, like 30s, 15m, 2h "
                 r"or 1d$",
    "misspelt_callback": r"'freshness_alert.callback': 'tidemark_airflow.alert.log_stale_pipeline': no module "
                         r"'tidemark_airflow.alert' can be found \(did you mean 'tidemark_airflow.alerts'\?\); check "
                         r"the spelling, or install the package here",
    "flow_type_with_comma": r"'value_schema': field 'amount' has the type 'decimal\(22', cut at a comma: in YAML's "
                            r"flow style .* must be quoted, amount: 'decimal\(22,...\)'",
    "missing_callback_module": r"'freshness_alert.callback': 'acme_alerts.page_oncall': no module 'acme_alerts' can be "
                               r"found",
}


def test_every_broken_fixture_has_an_expected_message():
    assert sorted(BROKEN) == sorted(p.stem for p in (FIXTURES / "broken").glob("*.yaml"))


@pytest.mark.parametrize(("fixture", "expected"), sorted(BROKEN.items()))
def test_each_broken_fixture_names_the_file_and_the_problem(fixture, expected):
    path = FIXTURES / "broken" / f"{fixture}.yaml"
    with pytest.raises(ConfigError, match=expected) as err:
        load_pipeline(path)
    assert str(err.value).startswith(f"{path}: ")


def test_load_all_keeps_good_pipelines_beside_broken_ones(tmp_path):
    for name in ("orders.yaml",):
        (tmp_path / name).write_text((FIXTURES / "good" / name).read_text())
    (tmp_path / "unknown_key.yaml").write_text((FIXTURES / "broken" / "unknown_key.yaml").read_text())
    good, bad = load_all(tmp_path)
    assert list(good) == ["orders"]
    assert list(bad) == [str(tmp_path / "unknown_key.yaml")]


def test_find_pipeline_lists_the_known_ones(tmp_path):
    (tmp_path / "orders.yaml").write_text((FIXTURES / "good" / "orders.yaml").read_text())
    with pytest.raises(ConfigError, match=r"no pipeline 'nope' .* \(known: orders\)"):
        find_pipeline("nope", tmp_path)


def test_topic_pattern_selects_whole_names_and_skips_internal_topics(tmp_path):
    config = PipelineConfig(name="p", topic_pattern=r"orders\.(eu|us)", table="t")
    available = {"orders.eu", "orders.us", "orders.eu.dlq", "xorders.eu", "__consumer_offsets"}
    assert config.select_topics(available) == ["orders.eu", "orders.us"]
    assert config.topics_label == r"topics matching /orders\.(eu|us)/"
    assert PipelineConfig(name="p", topics=["b", "a"], table="t").select_topics(set()) == ["b", "a"]


def test_starting_offsets_accepts_a_date_time_in_utc():
    import datetime as dt

    config = PipelineConfig(name="p", topics=["a"], table="t", starting_offsets="2026-01-31T12:00:00")
    assert config.start_time == dt.datetime(2026, 1, 31, 12, tzinfo=dt.UTC)
    assert PipelineConfig(name="p", topics=["a"], table="t").start_time is None


# --- the pipeline rules of value_format: avro ---------------------------------------------------

def pipeline(**keys):
    return parse_pipeline({"name": "p", "table": "t", **keys}, "test.yaml")


def refused(**keys) -> str:
    with pytest.raises(ConfigError) as err:
        pipeline(**keys)
    assert str(err.value).startswith("test.yaml: ")
    return str(err.value)


def test_avro_with_several_topics_or_a_pattern_needs_a_value_subject():
    expected = ("value_format 'avro' reads the subject '<topic>-value' of a one-topic pipeline; with several "
                "topics or a topic_pattern, name the subject with value_subject")
    assert expected in refused(topics=["a", "b"], value_format="avro")
    assert expected in refused(topic_pattern="orders.*", value_format="avro")
    config = pipeline(topics=["a", "b"], value_format="avro", value_subject="orders-value")
    assert subject_of(config.value_subject, config.topics) == "orders-value"
    one = pipeline(topics=["a"], value_format="avro", value_schema_version=3)
    assert (one.value_subject, one.value_schema_version, one.schema_changes) == (None, 3, "additive")


def test_value_subject_and_version_are_for_schemas_from_the_registry_only():
    expected = "value_subject and value_schema_version are only used with value_format: avro"
    assert expected in refused(topics=["a"], value_schema_version=2)
    assert expected in refused(topics=["a"], value_format="json", value_schema={"id": "bigint"},
                               value_schema_version=2)
    assert "give value_schema (inline) or value_subject" in refused(
        topics=["a"], value_format="json", value_schema={"id": "bigint"}, value_subject="s")
    assert "needs a value_schema (field: type, ...), or a value_subject" in refused(topics=["a"], value_format="json")


def test_a_json_pipeline_may_read_its_json_schema_from_the_registry():
    config = parse_pipeline({"name": "p", "topics": ["a", "b"], "table": "t", "value_format": "json",
                             "value_subject": "orders-value", "value_schema_version": 3}, "f")
    assert config.uses_registry and config.value_subject == "orders-value"
    assert not parse_pipeline({"name": "p", "topics": ["a"], "table": "t", "value_format": "json",
                               "value_schema": {"id": "bigint"}}, "f").uses_registry


def test_value_schema_is_json_only():
    message = refused(topics=["a"], value_format="avro", value_schema={"id": "bigint"})
    assert "value_schema is only used with value_format: json (Avro schemas come from the Schema Registry)" in message


def test_schema_changes_is_additive_or_lenient():
    assert pipeline(topics=["a"], schema_changes="lenient").schema_changes == "lenient"
    assert "'schema_changes': Input should be 'additive' or 'lenient'" in refused(topics=["a"], schema_changes="all")


def test_avro_partition_columns_are_checked_at_plan_time_not_in_the_file():
    assert pipeline(topics=["a"], value_format="avro", partition_by=["region"]).partition_by == ["region"]


@pytest.mark.parametrize("dead", ["orders", "orders/", "s3a://lake/t/orders"])
def test_a_dead_letter_table_that_is_the_output_table_is_refused(dead, monkeypatch):
    """Both commits of a batch carry the same marker: dead letters written into the output would break the
    pipeline after its output commit. Refused when the file is read, naming the field and the default."""
    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", "s3a://lake/t")
    with pytest.raises(ConfigError, match="orders.yaml: dead_letter_table resolves to the output table "
                                          r"\(s3a?://lake/t/orders\).*default: (s3://lake/t/)?orders_dead_letters"):
        parse_pipeline({"name": "orders", "topics": ["orders"], "table": "s3://lake/t/orders" if "s3a" in dead
                        else "orders", "dead_letter_table": dead}, "orders.yaml")


def test_pipeline_files_writing_one_table_are_all_broken_and_the_others_load(tmp_path, monkeypatch):
    """Which of two pipelines owns a table is for the user to say: both files are errors, naming each other."""
    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(tmp_path / "lake"))
    (tmp_path / "a.yaml").write_text("name: a\ntopics: [a]\ntable: shared\n")
    (tmp_path / "b.yaml").write_text("name: b\ntopics: [b]\ntable: other\ndead_letter_table: shared\n")
    (tmp_path / "c.yaml").write_text("name: c\ntopics: [c]\ntable: c\n")
    good, bad = load_all(tmp_path)
    assert list(good) == ["c"]
    assert "writes the table" in str(bad[str(tmp_path / "a.yaml")]) and "pipeline(s) 'b' write too" in \
        str(bad[str(tmp_path / "a.yaml")])
    assert "pipeline(s) 'a' write too" in str(bad[str(tmp_path / "b.yaml")])


@pytest.mark.parametrize(("data", "message"), [
    ({"retires": 3}, "unknown key 'retires' (did you mean 'retries'?"),
    ({"lag": {"hold_warning": "1h"}}, "unknown key 'lag.hold_warning' (did you mean 'hold_warning_after'? accepted "
                                      "keys: hold_warning_after)"),
    ({"topics": "orders"}, "'topics': Input should be a valid list; write it as a list: topics: [orders]"),
])
def test_a_misspelt_key_or_a_wrongly_shaped_value_gets_the_fix_in_the_message(data, message):
    with pytest.raises(ConfigError) as refused:
        parse_pipeline({"name": "orders", "topics": ["orders"], "table": "orders", **data}, "orders.yaml")
    assert message in str(refused.value)


def test_a_table_inside_another_tables_folder_is_refused(monkeypatch):
    """A full VACUUM of the output would delete the files of a dead-letter table inside its folder."""
    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", "/lake")
    with pytest.raises(ConfigError, match=r"dead_letter_table \(/lake/orders/dead\) lies inside table "
                                          r"\(/lake/orders\)"):
        parse_pipeline({"name": "orders", "topics": ["orders"], "table": "orders", "dead_letter_table": "orders/dead"},
                       "orders.yaml")
    parse_pipeline({"name": "orders", "topics": ["orders"], "table": "orders", "dead_letter_table": "orders_dead"},
                   "orders.yaml")  # a sibling whose name starts the same is fine
