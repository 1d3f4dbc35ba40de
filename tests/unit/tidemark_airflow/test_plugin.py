"""The Airflow plugin (tidemark_airflow.plugin)."""

from __future__ import annotations

import importlib
import sys

import tidemark_airflow


def test_the_plugin_mounts_the_page_lazily_and_adds_the_navigation_and_dag_views(monkeypatch):
    """Every Airflow process loads plugins, each task's included: loading this one must not import
    FastAPI (about 0.7 s); the app is built on the api-server's first request. Loaded here again with FastAPI
    made unimportable (in-process: a new interpreter would spend seconds importing Airflow first)."""
    monkeypatch.setitem(sys.modules, "fastapi", None)  # `import fastapi` now raises ImportError
    monkeypatch.delitem(sys.modules, "tidemark_airflow.plugin", raising=False)
    monkeypatch.setattr(tidemark_airflow, "plugin", getattr(tidemark_airflow, "plugin", None), raising=False)
    plugin = importlib.import_module("tidemark_airflow.plugin").TidemarkPlugin
    assert type(plugin.fastapi_apps[0]["app"]).__name__ == "LazyApp" and plugin.fastapi_apps[0]["app"]._app is None
    assert plugin.fastapi_apps[0]["url_prefix"] == "/tidemark"
    assert sorted((v["destination"], v["href"]) for v in plugin.external_views) == [
        ("dag", "/tidemark/dags/{DAG_ID}"), ("nav", "/tidemark/")]
