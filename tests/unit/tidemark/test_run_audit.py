"""``PipelineRun.audit`` on a keyed table: ``--verify-sample`` compares every record of a range, which a table of
one row per key does not hold, so it is refused with what to run instead (before anything is read)."""

from __future__ import annotations

import pytest

from tidemark.config import parse_pipeline
from tidemark.errors import ConfigError
from tidemark.run import PipelineRun

pytestmark = pytest.mark.unit


def test_verify_sample_is_refused_for_a_keyed_table(tmp_path):
    config = parse_pipeline({"name": "customers", "topics": ["customers"], "table": str(tmp_path / "t"),
                             "value_format": "json", "value_schema": {"id": "bigint"}, "keyed": {"keys": ["id"]}},
                            "test")
    run = PipelineRun(config, resolver=None, ledger_uri=str(tmp_path / "ledger"), store=None)
    with pytest.raises(ConfigError, match=r"--verify-sample does not check keyed tables yet.*tidemark audit customers"):
        run.audit(verify_sample=3)
