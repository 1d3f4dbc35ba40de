"""The Airflow plugin (tidemark_airflow.plugin)."""

from __future__ import annotations


def test_the_plugin_mounts_the_page_lazily_and_adds_the_navigation_and_dag_views():
    """Every Airflow process loads plugins, each task's included: loading this one must not import
    FastAPI (about 0.7 s); the app is built on the api-server's first request."""
    import subprocess
    import sys

    code = ("import sys; from tidemark_airflow.plugin import TidemarkPlugin as P; "
            "print('fastapi' in sys.modules, type(P.fastapi_apps[0]['app']).__name__, P.fastapi_apps[0]['url_prefix'], "
            "sorted((v['destination'], v['href']) for v in P.external_views))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.strip() == ("False LazyApp /tidemark [('dag', '/tidemark/dags/{DAG_ID}'), ('nav', '/tidemark/')]")
