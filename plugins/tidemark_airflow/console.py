"""The Tidemark page in Airflow's UI: a FastAPI app that the plugin (``tidemark_airflow.plugin``) mounts
on the api-server at ``/tidemark``, and JSON endpoints behind it. Imported on the api-server's first
request only (the plugin mounts a lazy app), so processes that load plugins for other reasons (every
task) do not pay for FastAPI.

Read-only by construction: it has only GET routes and calls only the run's readers
(``PipelineRun.overview``, ``history``, ``recent_entries``), which read the ledger with delta-rs and
Kafka's offsets with a bounded timeout; it never starts Spark and cannot change offsets. Each request
opens its own run (no state is shared between requests), so requests are served concurrently. Every
route requires Airflow's login (the api-server's JWT, as a cookie from the UI or a bearer token):
without it the answer is 401.

Routes (``/tidemark`` + ...):
  /                                  every pipeline: status, total lag, last batch and its age (HTML)
  /pipelines/{name}                  one pipeline: partitions, charts per batch (inline SVG), recent ledger
                                     entries, links to runs (HTML)
  /dags/{dag_id}                     the DAG page's tab: redirects to its pipeline's page
  /api/pipelines                     the overview as JSON
  /api/pipelines/{name}              one pipeline as JSON (overview, partitions, recent entries)
  /api/pipelines/{name}/offsets      the ``tidemark offsets show --json`` rows
  /api/pipelines/{name}/history      the ``tidemark offsets history --json`` rows (``?limit=N``, default 50)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from urllib.parse import quote

from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi.responses import HTMLResponse, RedirectResponse

from tidemark_airflow.naming import CONSOLE_URL_PREFIX, REPLAY_PREFIX, ingest_dag_id, pipeline_of

KAFKA_TIMEOUT_SECONDS = 3.0
"""How long the page waits for Kafka before showing the ledger's numbers alone."""
RECENT_ENTRIES = 20

LastRunFailed = Callable[[str], bool]
log = logging.getLogger(__name__)

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


def _open(name: str):
    """The pipeline's run (404 for an unknown pipeline, 503 when its storage connection cannot be read).
    Each request opens its own: nothing is shared between requests, so they are served concurrently."""
    from tidemark.errors import ConfigError
    from tidemark_airflow.resolver import open_run, pipelines_folder

    try:
        from tidemark.config.pipeline import find_pipeline

        config = find_pipeline(name, pipelines_folder())
    except ConfigError as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from None
    try:
        return open_run(config)
    except ConfigError as exc:  # e.g. its storage connection is missing
        raise HTTPException(status_code=503, detail=str(exc)) from None


def pipeline_overview(run, failed: LastRunFailed) -> dict:
    view = run.overview(timeout_seconds=min(KAFKA_TIMEOUT_SECONDS, run.config.kafka_timeout_seconds),
                        last_run_failed=failed(ingest_dag_id(run.name)))
    view["dag_id"] = ingest_dag_id(run.name)
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


def all_pipelines(failed: LastRunFailed) -> dict:
    """Every pipeline's overview, and the errors of those that cannot be shown (broken files, say)."""
    from tidemark.config.pipeline import load_all
    from tidemark.errors import TidemarkError
    from tidemark_airflow.resolver import open_run, pipelines_folder

    good, bad = load_all(pipelines_folder())
    errors = {path: str(e) for path, e in bad.items()}
    views = []
    for name in sorted(good):
        try:  # one pipeline that cannot be read (its store's connection, say) leaves the others shown
            views.append(pipeline_overview(open_run(good[name]), failed))
        except TidemarkError as exc:
            errors[name] = str(exc)
    return {"pipelines": views, "errors": errors}


def _pipeline(name: str, failed: LastRunFailed, count: int):
    """The run, its overview and its newest ``count`` ledger entries, each linked to the run that wrote it."""
    run = _open(name)
    view = pipeline_overview(run, failed)
    entries = run.recent_entries(count)
    for entry in entries:
        entry["run_link"] = run_link(entry["kind"], entry["owner"], run.name)
    return run, view, entries


def one_pipeline(name: str, failed: LastRunFailed) -> dict:
    """One pipeline: its overview and recent ledger entries, each linked to the run that wrote it."""
    _, view, entries = _pipeline(name, failed, RECENT_ENTRIES)
    return {**view, "entries": entries}


def pipeline_page(name: str, failed: LastRunFailed) -> dict:
    """What the pipeline's HTML page shows: ``one_pipeline`` and the charts of its newest CHART_ENTRIES
    ledger entries (``tidemark_airflow.charts``), from one read of the ledger."""
    from tidemark_airflow.charts import CHART_ENTRIES, charts

    run, view, entries = _pipeline(name, failed, max(RECENT_ENTRIES, CHART_ENTRIES))
    return {"view": {**view, "entries": entries[:RECENT_ENTRIES]}, "charts_entries": CHART_ENTRIES,
            "charts": charts(entries, run.config.max_offsets_per_run)}


def create_app(failed: LastRunFailed = last_run_failed) -> FastAPI:
    """The app. ``failed`` tells whether a DAG's newest run failed (Airflow's DB by default)."""
    # Airflow's own authentication dependency: the JWT from the UI's cookie or an Authorization header.
    from airflow.api_fastapi.core_api.security import get_user

    from tidemark_airflow.console_html import render

    app = FastAPI(title="Tidemark", dependencies=[Depends(get_user)], docs_url=None, redoc_url=None, openapi_url=None)

    def pipelines() -> dict:
        return all_pipelines(failed)

    def pipeline(name: str) -> dict:
        return one_pipeline(name, failed)

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
        return _open(name).history(limit)

    @app.get("/", response_class=HTMLResponse)
    def page_pipelines() -> str:
        return render("pipelines.html", **pipelines())

    @app.get("/pipelines/{name}", response_class=HTMLResponse)
    def page_pipeline(name: str) -> str:
        return render("pipeline.html", **pipeline_page(name, failed))

    @app.get("/dags/{dag_id}")
    def page_dag(dag_id: str):
        name = pipeline_of(dag_id)
        if name is None:
            return HTMLResponse(render("not_tidemark.html", dag_id=dag_id))
        return RedirectResponse(f"{CONSOLE_URL_PREFIX}/pipelines/{quote(name, safe='')}", status_code=307)

    return app
