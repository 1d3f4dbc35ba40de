"""``PipelineRun.audit`` on a keyed table: ``--verify-sample`` compares sampled keys with their newest change in
Spark (``tidemark.audit.keyed_sample``), so without the Spark side it is refused, with what to run instead, before
anything is read; on a pipeline with a transform, ``--verify-sample`` is refused (its output is not Kafka's)."""

from __future__ import annotations

import pytest

from tidemark.config.pipeline import parse_pipeline
from tidemark.errors import ConfigError
from tidemark.run import PipelineRun

pytestmark = pytest.mark.unit


def test_verify_sample_of_a_keyed_table_without_the_spark_side_is_refused(tmp_path):
    config = parse_pipeline({"name": "customers", "topics": ["customers"], "table": str(tmp_path / "t"),
                             "value_format": "json", "value_schema": {"id": "bigint"}, "keyed": {"keys": ["id"]}},
                            "test")
    run = PipelineRun(config, resolver=None, ledger_uri=str(tmp_path / "ledger"), store=None)
    with pytest.raises(ConfigError, match=r"keyed table compares keys .* in Spark.*tidemark audit customers "
                                          r"--verify-sample 3"):
        run.audit(verify_sample=3)
    assert not (tmp_path / "ledger").exists() and not (tmp_path / "t").exists()


def test_verify_sample_of_a_transformed_pipeline_is_refused_and_the_cli_exits_2(tmp_path, monkeypatch, capsys):
    """The sample compares the table's values with Kafka's, and a transform's output is not Kafka's values; the
    audit without the flag still checks the counts and coordinates (and reads the pipeline as transformed)."""
    from tidemark.audit.live_table import verdict
    from tidemark.config.audit_schedule import check_verify_sample
    from tidemark_cli import main as cli
    from tidemark_cli.exits import EXIT_REFUSED

    config = parse_pipeline({"name": "orders", "topics": ["orders"], "table": str(tmp_path / "t"),
                             "transform": "SELECT * FROM records WHERE kafka_offset % 2 = 0"}, "test")
    run = PipelineRun(config, resolver=None, ledger_uri=str(tmp_path / "ledger"), store=None)
    with pytest.raises(ConfigError, match=r"--verify-sample \(3\) cannot be used on a pipeline with a transform: "
                                          r"the sample compares .* Leave --verify-sample out: the audit still checks"):
        run.audit(verify_sample=3)
    assert not (tmp_path / "ledger").exists() and not (tmp_path / "t").exists()
    report = run.audit()
    assert report.ok and report.filtered == 0
    assert "(0 filtered by the transform, counted in each batch that read them)" in verdict(report)

    monkeypatch.setattr(cli, "open_run", lambda name: run)
    assert cli.main(["audit", "orders", "--verify-sample", "3"]) == EXIT_REFUSED == 2
    assert "cannot be used on a pipeline with a transform" in capsys.readouterr().err

    check_verify_sample(0, "SELECT * FROM records")  # no sample: fine
    check_verify_sample(3, None)  # no transform: fine
    with pytest.raises(ValueError, match=r"^audit.verify_sample \(2\) cannot be used on a pipeline with a transform"):
        check_verify_sample(2, "SELECT * FROM records")
