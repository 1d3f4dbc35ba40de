"""The Tidemark page in Airflow's UI: a FastAPI app that the plugin (``tidemark_airflow.plugin``) mounts
on the api-server at ``/tidemark``, and JSON endpoints behind it. Imported on the api-server's first
request only (the plugin mounts a lazy app), so processes that load plugins for other reasons (every
task) do not pay for FastAPI.

Read-only by construction: it has only GET routes and calls only the core's readers
(``tidemark.batch.status``), which read the ledger with delta-rs and Kafka's offsets with a bounded
timeout; it never starts Spark and cannot change offsets. Every route requires Airflow's login (the
api-server's JWT, as a cookie from the UI or a bearer token): without it the answer is 401.

Routes (``/tidemark`` + ...):
  /                                  every pipeline: status, total lag, last batch and its age (HTML)
  /pipelines/{name}                  one pipeline: partitions, recent ledger entries, links to runs (HTML)
  /dags/{dag_id}                     the DAG page's tab: redirects to its pipeline's page
  /api/pipelines                     the overview as JSON
  /api/pipelines/{name}              one pipeline as JSON (overview, partitions, recent entries)
  /api/pipelines/{name}/offsets      the ``tidemark offsets show --json`` rows
  /api/pipelines/{name}/history      the ``tidemark offsets history --json`` rows (``?limit=N``, default 50)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from urllib.parse import quote

from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi.responses import HTMLResponse, RedirectResponse

from tidemark_airflow.naming import CONSOLE_URL_PREFIX, INGEST_PREFIX, REPLAY_PREFIX, ingest_dag_id

KAFKA_TIMEOUT_SECONDS = 3.0
"""How long the page waits for Kafka before showing the ledger's numbers alone."""
RECENT_ENTRIES = 20

LastRunFailed = Callable[[str], bool]
log = logging.getLogger(__name__)

# Storage settings (an S3 connection's credentials) are per process in the core: one request at a time
# configures and reads, so two pipelines on different stores never mix their settings.
_lock = threading.Lock()


def last_run_failed(dag_id: str) -> bool:
    """Whether the newest run of a DAG failed, from Airflow's metadata DB (False when unknown)."""
    try:
        from airflow.models.dagrun import DagRun
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            state = session.scalar(select(DagRun.state).where(DagRun.dag_id == dag_id)
                                   .order_by(DagRun.run_after.desc()).limit(1))
    except Exception as exc:
        log.warning("Tidemark page: could not read the newest run of %s from Airflow's DB (%s: %s); the status "
                    "leaves it out", dag_id, type(exc).__name__, exc)
        return False
    return str(state) in {"failed", "DagRunState.FAILED"}


def _pipeline(name: str):
    from tidemark.config import find_pipeline
    from tidemark.errors import ConfigError

    try:
        config = find_pipeline(name)
    except ConfigError as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from None
    try:
        return _with_storage(config)
    except ConfigError as exc:  # e.g. its storage connection is missing
        raise HTTPException(status_code=503, detail=str(exc)) from None


def _with_storage(config):
    from tidemark_airflow.connections import configure_storage

    configure_storage(config)
    return config


def _kafka_properties(config) -> dict[str, str] | str:
    """The pipeline's Kafka properties, or why they cannot be had (a missing connection is shown as a
    Kafka error on the page, not a failed page)."""
    from tidemark.errors import TidemarkError
    from tidemark_airflow.connections import kafka_properties

    try:
        return kafka_properties(config.kafka_conn_id, config.name)
    except TidemarkError as exc:
        return str(exc)


def pipeline_overview(config, failed: LastRunFailed) -> dict:
    from tidemark.batch import overview

    properties = _kafka_properties(config)
    view = overview(config, properties, timeout_seconds=min(KAFKA_TIMEOUT_SECONDS, config.kafka_timeout_seconds),
                    last_run_failed=failed(ingest_dag_id(config.name)))
    view["dag_id"] = ingest_dag_id(config.name)
    return view


def run_link(kind: str, owner: str | None, pipeline: str) -> str | None:
    """The Airflow UI address of the run that wrote a ledger entry (None for CLI runs): batches, backfills
    and gaps are owned by an ingest DAG run, resets by ``<replay dag>/<run id>``."""
    if not owner or owner.startswith("cli:"):
        return None
    if kind == "reset":
        dag_id, _, run_id = owner.partition("/")
        if not run_id or not dag_id.startswith(REPLAY_PREFIX):
            return None
    else:
        dag_id, run_id = ingest_dag_id(pipeline), owner
    return f"/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"


def create_app(failed: LastRunFailed = last_run_failed) -> FastAPI:
    """The app. ``failed`` tells whether a DAG's newest run failed (Airflow's DB by default)."""
    # Airflow's own authentication dependency: the JWT from the UI's cookie or an Authorization header.
    from airflow.api_fastapi.core_api.security import get_user

    from tidemark_airflow.console_html import render

    app = FastAPI(title="Tidemark", dependencies=[Depends(get_user)], docs_url=None, redoc_url=None, openapi_url=None)

    def pipelines() -> dict:
        from tidemark.config import load_all
        from tidemark.errors import TidemarkError

        good, bad = load_all()
        errors = {path: str(e) for path, e in bad.items()}
        views = []
        with _lock:
            for name in sorted(good):
                try:  # one pipeline that cannot be read (its store's connection, say) leaves the others shown
                    views.append(pipeline_overview(_with_storage(good[name]), failed))
                except TidemarkError as exc:
                    errors[name] = str(exc)
        return {"pipelines": views, "errors": errors}

    def pipeline(name: str) -> dict:
        from tidemark.batch import recent_entries

        with _lock:
            config = _pipeline(name)
            view = pipeline_overview(config, failed)
            entries = recent_entries(config.name, RECENT_ENTRIES)
        for entry in entries:
            entry["run_link"] = run_link(entry["kind"], entry["owner"], config.name)
        return {**view, "entries": entries}

    @app.get("/api/pipelines")
    def api_pipelines() -> dict:
        return pipelines()

    @app.get("/api/pipelines/{name}")
    def api_pipeline(name: str) -> dict:
        return pipeline(name)

    @app.get("/api/pipelines/{name}/offsets")
    def api_offsets(name: str) -> list[dict]:
        return pipeline(name)["partitions"]

    @app.get("/api/pipelines/{name}/history")
    def api_history(name: str, limit: int = Query(50, ge=1, le=10_000)) -> list[dict]:
        from tidemark.batch import history

        with _lock:
            return history(_pipeline(name).name, limit)

    @app.get("/", response_class=HTMLResponse)
    def page_pipelines() -> str:
        return render("pipelines.html", **pipelines())

    @app.get("/pipelines/{name}", response_class=HTMLResponse)
    def page_pipeline(name: str) -> str:
        return render("pipeline.html", view=pipeline(name))

    @app.get("/dags/{dag_id}")
    def page_dag(dag_id: str):
        if not dag_id.startswith((INGEST_PREFIX, REPLAY_PREFIX)):
            return HTMLResponse(render("not_tidemark.html", dag_id=dag_id))
        name = dag_id.removeprefix(INGEST_PREFIX).removeprefix(REPLAY_PREFIX)
        return RedirectResponse(f"{CONSOLE_URL_PREFIX}/pipelines/{quote(name, safe='')}", status_code=307)

    return app
