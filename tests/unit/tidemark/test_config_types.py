"""The value types of a pipeline file (tidemark.config.value_types): strict counts, switches and durations, and a
callback's module looked for, not imported, when the file is read. The broken fixtures with the messages a
user sees are in test_config.py (bool_cap, quoted_mirror, unitless_sla, misspelt_callback, ...)."""

from __future__ import annotations

import datetime as dt
import os
import sys

import pytest

from tidemark.config.pipeline import parse_pipeline
from tidemark.config.value_types import find_module
from tidemark.errors import ConfigError


def pipeline(**keys):
    return parse_pipeline({"name": "p", "topics": ["a"], "table": "t", **keys}, "p.yaml")


def test_the_strict_types_still_take_what_the_docs_show():
    config = pipeline(max_offsets_per_run=5000, retries=0, mirror_consumer_group=False, freshness_sla="90s",
                      lag={"hold_warning_after": "PT2H"}, audit={"every": "1d", "verify_sample": 3},
                      maintenance={"optimize_every": "24h", "vacuum_retain": "7d"})
    assert (config.max_offsets_per_run, config.retries, config.mirror_consumer_group) == (5000, 0, False)
    assert (config.freshness_sla, config.lag.hold_warning_after) == (dt.timedelta(seconds=90), dt.timedelta(hours=2))
    assert (config.audit.every, config.audit.verify_sample) == (dt.timedelta(days=1), 3)
    assert config.maintenance.vacuum_retain == dt.timedelta(days=7)


@pytest.mark.parametrize(("keys", "message"), [
    ({"kafka_timeout_seconds": 1.5}, "'kafka_timeout_seconds': Input should be a valid integer, not 1.5: write a "
                                     "whole number"),
    ({"audit": {"every": "1h", "verify_sample": True}}, "'audit.verify_sample': Input should be a valid integer, "
                                                        "not true (a boolean)"),
    ({"mirror_consumer_group": 0}, "'mirror_consumer_group': Input should be a valid boolean, not 0: write true or "
                                   "false"),
    ({"maintenance": {"optimize_every": "1h", "vacuum_retain": 168}}, "'maintenance.vacuum_retain': 168 has no unit"),
    ({"freshness_sla": "2.5"}, "'freshness_sla': 2.5 has no unit (seconds? hours?): write it with one, 30s, 15m"),
    ({"freshness_alert": {"callback": "json.decoder.nope.run"}}, "'json.decoder' is a module, not a package"),
])
def test_a_value_of_the_wrong_type_is_refused_with_how_to_write_it(keys, message):
    with pytest.raises(ConfigError) as refused:
        pipeline(**keys)
    assert message in str(refused.value)


def test_a_callback_module_beside_the_pipelines_folder_is_found_without_importing_it_or_its_package(tmp_path,
                                                                                                     monkeypatch):
    """The DAGs folder (the pipelines folder's parent) is on Airflow's sys.path, not on the CLI's: it counts
    too. Nothing is imported: a package's __init__ may import Airflow, or fail outside it."""
    dags = tmp_path / "dags"
    (dags / "pipelines").mkdir(parents=True)
    (dags / "team_alerts").mkdir()
    (dags / "team_alerts" / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (dags / "team_alerts" / "paging.py").write_text("raise RuntimeError('imported')\n")
    monkeypatch.setenv("TIDEMARK_PIPELINES_DIR", str(dags / "pipelines"))
    config = pipeline(freshness_alert={"callback": "team_alerts.paging.page_oncall"})
    assert config.freshness_alert.callback == "team_alerts.paging.page_oncall"
    assert "team_alerts" not in sys.modules
    with pytest.raises(ConfigError, match=r"no module 'team_alerts.pagin' can be found \(did you mean "
                                          r"'team_alerts.paging'\?\)"):
        pipeline(freshness_alert={"callback": "team_alerts.pagin.page_oncall"})


def test_find_module_reads_namespace_packages_and_already_imported_modules(tmp_path):
    for portion in ("a", "b"):  # one namespace package in two folders, as provider distributions install them
        (tmp_path / portion / "acme" / "notify").mkdir(parents=True)
    (tmp_path / "b" / "acme" / "notify" / "pager.py").write_text("")
    roots = [str(tmp_path / "a"), str(tmp_path / "b"), *(p or os.getcwd() for p in sys.path)]
    assert find_module("acme.notify.pager", roots) is None
    assert find_module("acme.notify.pagr", roots) == ("no module 'acme.notify.pagr' can be found (did you mean "
                                                       "'acme.notify.pager'?)")
    assert find_module("os.path", roots) is None  # os is a module; os.path is set up by it
