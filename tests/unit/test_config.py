from __future__ import annotations

from pathlib import Path

import pytest

from tidemark.config import PipelineConfig, find_pipeline, load_all, load_pipeline
from tidemark.errors import ConfigError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pipelines"


def test_three_keys_are_enough_and_defaults_apply(monkeypatch, tmp_path):
    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(tmp_path))
    config = load_pipeline(FIXTURES / "good" / "orders.yaml")
    assert config.topics == ["orders"]
    assert config.table_uri == str(tmp_path / "orders")
    assert (config.kafka_conn_id, config.spark_conn_id) == ("kafka_default", "spark_default")
    assert (config.starting_offsets, config.on_data_loss) == ("earliest", "fail")
    assert config.isolation_level == "read_committed" and config.max_records_per_run is None
    assert config.dag_id == "tidemark_ingest__orders"


def test_every_option_parses_and_uris_pass_through():
    config = load_pipeline(FIXTURES / "good" / "payments.yaml")
    assert config.table_uri == "s3a://bucket/lake/payments"
    assert config.max_records_per_run == 100000 and config.spark_conf == {"spark.sql.shuffle.partitions": "4"}


def test_documented_defaults_match_the_model():
    fields = PipelineConfig.model_fields
    assert {n for n, f in fields.items() if f.is_required()} == {"name", "topics", "table"}


@pytest.mark.parametrize(("fixture", "expected"), [
    ("unknown_key", r"unknown key 'colour' \(accepted keys: name, topics, table"),
    ("missing_table", r"'table' is required"),
    ("empty_topics", r"'topics': List should have at least 1 item"),
    ("bad_topic", r"'no spaces allowed' is not a valid Kafka topic name"),
    ("bad_policy", r"'on_data_loss': Input should be 'fail' or 'skip'"),
    ("bad_cap", r"'max_records_per_run': Input should be greater than 0"),
    ("not_yaml", r"not valid YAML"),
    ("name_mismatch", r"'name' is 'other_name' but the file is named 'name_mismatch.yaml'"),
    ("not_mapping", r"expected a mapping of keys"),
    ("bad_name", r"'name': String should match pattern"),
    ("dup_topics", r"topics are listed more than once"),
])
def test_each_broken_fixture_names_the_file_and_the_problem(fixture, expected):
    path = FIXTURES / "broken" / f"{fixture}.yaml"
    with pytest.raises(ConfigError, match=expected) as err:
        load_pipeline(path)
    assert str(path) in str(err.value)


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
