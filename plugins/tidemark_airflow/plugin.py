"""The Airflow plugin: mounts the Tidemark page (``console``) on the api-server at ``/tidemark`` and adds
it to the navigation and to each DAG's page. Registered through the ``airflow.plugins`` entry point
(pyproject.toml), so it loads wherever the package is installed.

Every Airflow process loads plugins, each task's included; the page's app is therefore built on its
first request (``LazyApp``), not when the plugin loads, and FastAPI is imported only where it serves."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from tidemark_airflow.alerts import NewestRecordReference
from tidemark_airflow.naming import CONSOLE_URL_PREFIX


class LazyApp:
    """An ASGI app that builds the real one (``console.create_app``) on its first call."""

    def __init__(self) -> None:
        self._app = None

    async def __call__(self, scope, receive, send) -> None:
        if self._app is None:
            from tidemark_airflow.console import create_app

            self._app = create_app()
        await self._app(scope, receive, send)


class TidemarkPlugin(AirflowPlugin):
    name = "tidemark"
    deadline_references = [NewestRecordReference]  # freshness_sla's Deadline Alerts (tidemark_airflow.alerts)
    fastapi_apps = [{"app": LazyApp(), "url_prefix": CONSOLE_URL_PREFIX, "name": "Tidemark"}]
    external_views = [
        {"name": "Tidemark", "href": f"{CONSOLE_URL_PREFIX}/", "destination": "nav", "url_route": "tidemark",
         "category": "browse"},
        # Airflow shows a DAG tab on every DAG's page; for other DAGs the page says it is not Tidemark's.
        {"name": "Tidemark", "href": f"{CONSOLE_URL_PREFIX}/dags/{{DAG_ID}}", "destination": "dag",
         "url_route": "tidemark_dag"},
    ]
