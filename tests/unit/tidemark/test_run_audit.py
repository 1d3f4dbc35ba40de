"""``PipelineRun.audit`` on a keyed table: ``--verify-sample`` compares sampled keys with their newest change in
Spark (``tidemark.audit_keyed``), so without the Spark side it is refused, with what to run instead, before
anything is read."""

from __future__ import annotations

import pytest

from tidemark.config import parse_pipeline
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
