"""Launching the Spark job (tidemark_spark.submit): its local environment."""

from __future__ import annotations

from pathlib import Path


def test_spark_jobs_log_the_kafka_client_at_warn_unless_the_caller_has_a_spark_conf_dir(monkeypatch, tmp_path):
    from tidemark_spark.submit import SPARK_CONF_DIR, local_spark_env

    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    assert local_spark_env()["SPARK_CONF_DIR"] == SPARK_CONF_DIR
    lines = (Path(SPARK_CONF_DIR) / "log4j2.properties").read_text().splitlines()
    assert "logger.kafka.name = org.apache.kafka" in lines and "logger.kafka.level = warn" in lines
    assert "rootLogger.level = info" in lines  # Spark's own progress stays
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert local_spark_env()["SPARK_CONF_DIR"] == str(tmp_path)
