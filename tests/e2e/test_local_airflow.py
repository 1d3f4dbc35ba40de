"""`make airflow` (scripts/airflow.sh) and the tests against it: a real Airflow 3 (api-server, scheduler
with the LocalExecutor, dag-processor, triggerer) on a private PostgreSQL, its ingest jobs on the Spark Connect
server `up` starts (the warm path, `make airflow`'s default), driven by the scheduler, by
Airflow's native backfill (`airflow backfill create`), by the REST API and, for the operator's side, by
Debian's chromium through chromedriver (scripts/browser.sh).

The stack is started once for the module, on free ports and a private home, with the session's broker,
two pipelines (one for the browser, one for the native backfill and the example DAG scheduled on its
table) and an admin and a viewer login, and stopped at the end (`scripts/airflow.sh down`).
Screenshots of the Tidemark page (its charts too) and the trigger form go to .cache/screenshots/; the README's
trigger form, in docs/screenshots/, was made with TIDEMARK_SCREENSHOTS=docs/screenshots (a test run then leaves
the checkout as it was). The README's Tidemark page shows the demo pipeline instead (scripts/screenshots.py).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import tempfile
import uuid
from pathlib import Path

import pytest
import yaml

from devkit import localstack
from tests import helpers
from tests.e2e import airflow_stack
from tests.e2e.airflow_stack import AirflowStack
from tests.e2e.browser import screenshot
from tests.e2e.conftest import ROOT
from tests.e2e.statsd_listener import StatsdListener

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SCRIPT = ROOT / "scripts" / "airflow.sh"
CACHE_SHOTS = ROOT / ".cache" / "screenshots"
SHOTS = Path(os.environ.get("TIDEMARK_SCREENSHOTS", CACHE_SHOTS))
# Two records per partition inside the backfill window, one before it and one after.
TIMES = ["2025-06-01T08:00", "2025-06-02T09:30", "2025-06-02T17:45", "2025-06-04T12:00"]
WINDOW = ("2025/06/02", "00:00", "2025/06/03", "00:00")
# The native backfill's records (two per partition would be enough; these cover the window's edges) and the
# window its two daily data intervals cover.
BACKFILL_TIMES = ["2025-05-31T23:00", "2025-06-01T00:00", "2025-06-01T12:00", "2025-06-01T23:59:59",
                  "2025-06-02T00:00", "2025-06-02T18:00", "2025-06-03T00:00", "2025-06-03T05:00"]
BACKFILL_WINDOW = (dt.datetime(2025, 6, 1, tzinfo=dt.UTC), dt.datetime(2025, 6, 3, tzinfo=dt.UTC))
VIEWER = "watcher"
# The freshness alert's callback, as a user writes one: a function called with the context and the kwargs.
ALERT_SINK = '''import json, pathlib
def record(context, channel):
    line = {"channel": channel, "tidemark": context["tidemark"], "run_id": context["dag_run"]["dag_run_id"]}
    with open(pathlib.Path(__file__).with_name("alerts.jsonl"), "a") as out:
        out.write(json.dumps(line) + "\\n")
'''


class LocalAirflow(AirflowStack):
    def __init__(self, env: dict[str, str], home: Path, url: str, user: str, password: str, pipeline: str,
                 backfill_pipeline: str, lake: Path):
        super().__init__(env, home, url, user, password)
        self.pipeline, self.dag_id = pipeline, f"tidemark_ingest__{pipeline}"
        self.backfill_pipeline, self.lake = backfill_pipeline, lake
        self.logs = home / "logs" / "services"  # each service's log, as scripts/airflow.sh writes them

    def login(self, user: str) -> str:
        """The generated password of one of this Airflow's logins."""
        return json.loads((self.home / "passwords.json").read_text())[user]

    def runs(self, dag_id: str | None = None) -> list[dict]:
        return self.api("GET", f"/dags/{dag_id or self.dag_id}/dagRuns", params={"order_by": "run_after"})["dag_runs"]

    def is_parsed(self, dag_id: str) -> bool:
        return any(d["dag_id"] == dag_id for d in self.api("GET", "/dags", params={"dag_id_pattern": dag_id})["dags"])

    def wait_for(self, what: str, check, timeout: float = 300):
        """``helpers.wait_until`` whose failure also shows the end of each service's log."""
        return helpers.wait_until(check, timeout, lambda: f"{what}\n{self.service_logs()}", interval=1)

    def service_logs(self) -> str:
        """The end of each service's log: what a failed assertion about the scheduler's work shows."""
        return "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in sorted(self.logs.glob("*.log")))

    def finished_run(self, run_id: str) -> dict:
        def done():
            run = self.api("GET", f"/dags/{self.dag_id}/dagRuns/{run_id}")
            return run if run["state"] in ("success", "failed") else None
        return self.wait_for(f"run {run_id}", done)


@pytest.fixture(scope="module")
def local_airflow(tmp_path_factory, kafka_bootstrap):
    base = tmp_path_factory.mktemp("local_airflow")
    pipelines, lake, home = base / "pipelines", base / "lake", base / "home"
    pipelines.mkdir()
    pipeline, backfill_pipeline = f"ui_{uuid.uuid4().hex[:8]}", f"nbf_{uuid.uuid4().hex[:8]}"
    # The freshness test's pipeline: manual runs, a 1 s SLA, its callback in a module the services import.
    alerting, callbacks = f"fresh_{uuid.uuid4().hex[:8]}", base / "callbacks"
    callbacks.mkdir()
    (callbacks / "tidemark_alert_sink.py").write_text(ALERT_SINK)
    alert = {"callback": "tidemark_alert_sink.record", "kwargs": {"channel": "#data-oncall"}}
    # Backfills need the records to still be there: no time-based retention on these topics.
    for name, options in ((pipeline, {"schedule": "@yearly", "retries": 0}),
                          (backfill_pipeline, {"schedule": "@daily"}),
                          (alerting, {"schedule": None, "retries": 0, "freshness_sla": "1s",
                                      "freshness_alert": alert})):
        helpers.create_topic(name, partitions=2, configs={"retention.ms": "-1"})
        (pipelines / f"{name}.yaml").write_text(yaml.safe_dump({"name": name, "topics": [name], "table": name,
                                                                **options}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TIDEMARK_"))}
    # PostgreSQL runs as 'nobody' when the tests run as root: its folder must be reachable, and neither
    # pytest's nor a checkout in a private folder (`mktemp -d`) is: a folder of its own under the system's
    # temporary folder, which every user can traverse.
    pg_home = Path(tempfile.mkdtemp(prefix=f"tidemark-postgres-{pipeline}-"))
    pg_home.chmod(0o755)
    airflow_port, pg_port, connect_port = helpers.free_ports(3)
    env.update(AIRFLOW_LOCAL_HOME=str(home), PG_HOME=str(pg_home), AIRFLOW_PORT=str(airflow_port),
               PG_PORT=str(pg_port),
               KAFKA_PORT=os.environ["KAFKA_PORT"], TIDEMARK_LAKE_ROOT=str(lake),
               TIDEMARK_PIPELINES_DIR=str(pipelines), AIRFLOW_USER="operator", AIRFLOW_VIEWERS=VIEWER,
               TIDEMARK_EXAMPLE_UPSTREAM=backfill_pipeline,  # the example DAG scheduled on its table
               TIDEMARK_JAR_CACHE=os.environ.get("TIDEMARK_JAR_CACHE", str(ROOT / ".cache" / "jars")),
               AIRFLOW_CONN_AWS_DEFAULT=helpers.aws_connection())  # the last test moves a table to S3
    # Its ingest jobs on the warm path as `make airflow` gives it: `up` starts a Spark Connect server of its own
    # (no Spark connection given), here on a free port, with the settings and keys of a lake on the local S3 server
    # (docs/OPERATIONS.md, "The warm path"), and `down` stops it.
    env.update(CONNECT_PORT=str(connect_port), CONNECT_CONF=localstack.connect_conf(),
               AWS_ACCESS_KEY_ID=localstack.S3_ACCESS_KEY, AWS_SECRET_ACCESS_KEY=localstack.S3_SECRET_KEY)
    # Airflow's metrics (and so Tidemark's) to a StatsD listener of the test; the alert callback's module
    statsd = StatsdListener()
    env.update(AIRFLOW__METRICS__STATSD_ON="True", AIRFLOW__METRICS__STATSD_HOST="127.0.0.1",
               AIRFLOW__METRICS__STATSD_PORT=str(statsd.port), PYTHONPATH=str(callbacks),
               **airflow_stack.TEST_SETTINGS)
    with airflow_stack.started(SCRIPT, env, home, pg_home) as (out, url, user, password):
        assert "using the broker" in out  # the session's broker, not a second one
        assert f"spark:     the Spark Connect server at sc://127.0.0.1:{env['CONNECT_PORT']}" in out, out
        airflow = LocalAirflow(env, home, url, user, password, pipeline, backfill_pipeline, lake)
        airflow.statsd, airflow.alerting, airflow.alerts = statsd, alerting, callbacks / "alerts.jsonl"
        yield airflow
    statsd.close()
    import socket

    with socket.socket() as probe:  # `down` stopped the Spark Connect server `up` started
        assert probe.connect_ex(("127.0.0.1", int(env["CONNECT_PORT"]))) != 0, "the stack's Connect server still runs"


def test_make_airflow_runs_scheduled_runs_by_the_scheduler_on_postgres(local_airflow):
    import psycopg2

    airflow = local_airflow
    # Unpaused at creation: the scheduler runs the latest @yearly interval on its own (a yearly schedule:
    # no other scheduled run comes during the module and takes the place of the newest run).
    run = airflow.wait_for("the scheduler's first run", lambda: next(
        (r for r in airflow.runs() if r["run_type"] == "scheduled" and r["state"] in ("success", "failed")), None))
    assert run["state"] == "success", f"{run}\n{airflow.service_logs()}"
    # The metadata DB is the PostgreSQL cluster of scripts/postgres.sh.
    with psycopg2.connect(host="127.0.0.1", port=int(airflow.env["PG_PORT"]), user="airflow", password="airflow",
                          dbname="airflow") as db, db.cursor() as cursor:
        cursor.execute("SELECT run_type, state FROM dag_run WHERE dag_id = %s AND run_id = %s",
                       (airflow.dag_id, run["dag_run_id"]))
        assert cursor.fetchall() == [("scheduled", "success")]
    # The scheduler started once the api-server answered (a task queued earlier fails without running).
    stamps = re.compile(r"^(\d{4}-\d\d-\d\dT[\d:.]+)Z", re.M)
    answering = re.search(r"^(\S+)Z .*Uvicorn running on http://127\.0\.0\.1",
                          (airflow.logs / "api-server.log").read_text(), re.M).group(1)
    assert stamps.search((airflow.logs / "scheduler.log").read_text()).group(1) > answering
    status = airflow.shell("scripts/airflow.sh status")
    assert all(f"{s}: running" in status for s in ("api-server", "scheduler", "dag-processor", "triggerer"))
    # The warm path by default: the Spark Connect server `up` started is one of the stack's services, and the
    # spark_default connection of every service points at it (the native backfill's runs check their jobs ran there).
    port = airflow.env["CONNECT_PORT"]
    assert f"connect: running at sc://127.0.0.1:{port}" in status, status
    assert (f"export AIRFLOW_CONN_SPARK_DEFAULT='{{\"conn_type\": \"spark_connect\", \"host\": \"127.0.0.1\", "
            f"\"port\": {port}}}'") in (airflow.home / "env.sh").read_text()
    # Airflow's default pool holds as many tasks as the executor runs: Airflow 3.3's LocalExecutor does not
    # hold [core] parallelism itself, and the tasks beyond it stalled the scheduler (OPERATIONS.md).
    parallelism = int(re.search(r"^export AIRFLOW__CORE__PARALLELISM=(\d+)$",
                                (airflow.home / "env.sh").read_text(), re.M).group(1))
    assert airflow.api("GET", "/pools/default_pool")["slots"] == parallelism == 4


@pytest.fixture(scope="module")
def browser(local_airflow):
    from tests.e2e.browser import chrome, log_in

    driver = chrome()
    try:
        log_in(driver, local_airflow.url, local_airflow.user, local_airflow.password)
        yield driver
    finally:
        driver.quit()


def leave_page(browser) -> None:
    """An empty page (the login stays in the browser's cookies). On a Dag's page Airflow's UI asks the API
    again every [api] auto_refresh_interval (3 s) while a run of the Dag is queued or running: the api-server
    and chromium spend CPU on a page nobody reads while a test waits for its run or the next tests run
    without the browser."""
    browser.switch_to.default_content()
    browser.get("about:blank")


@pytest.fixture(autouse=True)
def _browser_left_idle(request):
    """After each test that used the browser, ``leave_page``."""
    yield
    if (driver := request.node.funcargs.get("browser")) is not None:
        leave_page(driver)


def open_tidemark_page(browser, airflow: LocalAirflow, pipeline: str) -> None:
    """Browse -> Tidemark, as an operator would (Airflow embeds the page in a frame), until the pipeline's
    row is shown; leaves the driver inside the frame."""
    browser.get(f"{airflow.url}/plugin/tidemark")
    frame = airflow.wait_for("the Tidemark page in the UI", lambda: browser.find_elements("css selector", "iframe"))
    browser.switch_to.frame(frame[0])
    airflow.wait_for("the pipeline's row", lambda: browser.find_elements(
        "css selector", f'tr[data-pipeline="{pipeline}"] a'))


def open_pipeline_page(browser, airflow: LocalAirflow, shot: Path | None = None, pipeline: str | None = None) -> None:
    """The Tidemark page (``open_tidemark_page``), then the pipeline's (the browser's pipeline by default);
    leaves the driver inside the frame."""
    pipeline = pipeline or airflow.pipeline
    open_tidemark_page(browser, airflow, pipeline)
    if shot:
        browser.switch_to.default_content()
        screenshot(browser, shot)
        browser.switch_to.frame(browser.find_element("css selector", "iframe"))
    browser.find_element("css selector", f'tr[data-pipeline="{pipeline}"] a').click()
    airflow.wait_for("the pipeline's partitions",
                     lambda: browser.find_elements("css selector", "#partitions tr[data-topic]"))


def test_the_tidemark_page_in_the_browser_shows_what_the_cli_shows(local_airflow, browser):
    from tests.e2e.browser import page_numbers

    airflow = local_airflow
    helpers.produce_at_times(airflow.pipeline, TIMES)
    open_pipeline_page(browser, airflow, shot=CACHE_SHOTS / "tidemark-page.png")
    shown = page_numbers(browser)
    browser.switch_to.default_content()
    cli = airflow.tidemark("offsets", "show", airflow.pipeline)
    assert shown == {(r["topic"], r["partition"]): (r["committed_offset"], r["latest_offset"], r["lag"]) for r in cli}
    assert {v[1] for v in shown.values()} == {len(TIMES)}  # the records just produced are counted as lag


def test_a_window_backfill_from_the_trigger_form(local_airflow, browser):
    from tests.e2e.browser import open_trigger_form, set_datetime, set_select, submit_trigger_form

    airflow = local_airflow
    before = {r["dag_run_id"] for r in airflow.runs()}
    open_trigger_form(browser, airflow.url, airflow.dag_id)
    set_select(browser, "Run mode", "backfill_window")
    set_datetime(browser, "Window start", *WINDOW[:2])
    set_datetime(browser, "Window end", *WINDOW[2:])
    screenshot(browser, SHOTS / "trigger-form.png")
    submit_trigger_form(browser)
    [run_id] = airflow.wait_for("the triggered run", lambda: [r["dag_run_id"] for r in airflow.runs()
                                                              if r["dag_run_id"] not in before] or None)
    leave_page(browser)  # the run is Airflow's now: no Dag page polling while it runs
    run = airflow.finished_run(run_id)
    assert run["state"] == "success", f"{run}\n{airflow.service_logs()}"
    assert run["conf"]["mode"] == "backfill_window"
    assert [dt.datetime.fromisoformat(run["conf"][k]) for k in ("window_start", "window_end")] == [
        dt.datetime(2025, 6, 2, tzinfo=dt.UTC), dt.datetime(2025, 6, 3, tzinfo=dt.UTC)]
    # Exactly offsets 1 and 2 of each partition (the records of 2025-06-02), as one backfill batch.
    history = [r for r in airflow.tidemark("offsets", "history", airflow.pipeline) if r["dag_run_id"] == run_id]
    assert {(r["kind"], r["status"], r["partition"], r["start_offset"], r["end_offset"]) for r in history} == {
        ("backfill", "committed", 0, 1, 3), ("backfill", "committed", 1, 1, 3)}
    # The pipeline's page lists the backfill with its records and a link to the run.
    open_pipeline_page(browser, airflow)
    entry = browser.find_element("css selector", "#history tr[data-batch]")
    assert "backfill" in entry.text and run_id in entry.text
    browser.switch_to.default_content()
    screenshot(browser, CACHE_SHOTS / "tidemark-pipeline.png")


def test_a_bad_form_value_is_refused_and_writes_nothing(local_airflow, browser):
    from tests.e2e.browser import open_trigger_form, set_datetime, set_select, submit_trigger_form

    airflow = local_airflow
    ledger_before = airflow.tidemark("offsets", "history", airflow.pipeline)
    before = {r["dag_run_id"] for r in airflow.runs()}
    open_trigger_form(browser, airflow.url, airflow.dag_id)
    set_select(browser, "Run mode", "backfill_window")
    set_datetime(browser, "Window start", *WINDOW[2:])  # start after end
    set_datetime(browser, "Window end", *WINDOW[:2])
    submit_trigger_form(browser)
    [run_id] = airflow.wait_for("the triggered run", lambda: [r["dag_run_id"] for r in airflow.runs()
                                                              if r["dag_run_id"] not in before] or None)
    leave_page(browser)  # the run is Airflow's now: no Dag page polling while it runs
    assert airflow.finished_run(run_id)["state"] == "failed"
    tries = airflow.api("GET", f"/dags/{airflow.dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]
    assert {t["task_id"]: t["state"] for t in tries}["plan"] == "failed"
    assert all(t["state"] != "success" for t in tries if t["task_id"] == "ingest"), tries
    assert airflow.tidemark("offsets", "history", airflow.pipeline) == ledger_before
    # The page reads the newest run's state from Airflow's DB: the pipeline is now failing.
    import httpx

    view = httpx.get(f"{airflow.url}/tidemark/api/pipelines/{airflow.pipeline}", timeout=30,
                     headers={"Authorization": f"Bearer {airflow.token}"}).json()
    assert view["status"] == "failing", view


def test_native_backfill_over_two_past_days_ingests_exactly_those_windows(local_airflow):
    """Airflow 3's native backfill (`airflow backfill create`): each backfill run maps its data interval to
    a time window of Kafka records; the committed position does not move."""
    airflow, pipeline = local_airflow, local_airflow.backfill_pipeline
    dag_id, downstream = f"tidemark_ingest__{pipeline}", f"tidemark_example_downstream__{pipeline}"
    airflow.wait_for("the dag-processor to parse the DAGs",
                     lambda: airflow.is_parsed(dag_id) and airflow.is_parsed(downstream))
    # Unpaused at creation: the schedule's latest interval runs first; nothing in the topic yet, so no Spark.
    airflow.wait_for("the scheduled run", lambda: [r for r in airflow.runs(dag_id) if r["state"] == "success"])

    helpers.produce_at_times(pipeline, BACKFILL_TIMES)
    airflow.shell(f"airflow backfill create --dag-id {dag_id} --from-date 2025-06-01 --to-date 2025-06-02 "
                  "--max-active-runs 1")

    def backfills_done():
        runs = [r for r in airflow.runs(dag_id) if r["run_type"] == "backfill"]
        return runs if len(runs) == 2 and all(r["state"] in ("success", "failed") for r in runs) else None

    runs = airflow.wait_for("the two backfill runs", backfills_done, timeout=600)
    assert {(r["run_type"], r["state"]) for r in runs} == {("backfill", "success")}, f"{runs}\n{airflow.service_logs()}"
    # Their ingest jobs ran on the Spark Connect server `up` started (make airflow's default launcher).
    for run in runs:
        log = "".join(p.read_text() for p in airflow.home.glob(
            f"logs/dag_id={dag_id}/run_id={run['dag_run_id']}/task_id=ingest/attempt=*.log"))
        assert f"on the Spark Connect server sc://127.0.0.1:{airflow.env['CONNECT_PORT']}" in log, log[-3000:]
        assert "Spark-Submit cmd" not in log

    # Exactly the records of [2025-06-01, 2025-06-03): offsets 1..5 of each partition, once each.
    table = str(airflow.lake / pipeline)
    rows = helpers.query(table, "SELECT kafka_partition AS p, kafka_offset AS o, kafka_timestamp AS ts FROM t "
                                "ORDER BY p, o")
    assert [(r["p"], r["o"]) for r in rows] == [(p, o) for p in (0, 1) for o in range(1, 6)]
    assert all(BACKFILL_WINDOW[0] <= r["ts"] < BACKFILL_WINDOW[1] for r in rows)

    # One backfill batch per data interval, none of them moves the committed position.
    history = airflow.tidemark("offsets", "history", pipeline)
    by_run = {}
    for row in history:
        assert row["kind"] == "backfill" and row["status"] == "committed", row
        by_run.setdefault(row["dag_run_id"], set()).add((row["partition"], row["start_offset"], row["end_offset"]))
    assert by_run == {"backfill__2025-06-02T00:00:00+00:00": {(0, 1, 4), (1, 1, 4)},
                      "backfill__2025-06-03T00:00:00+00:00": {(0, 4, 6), (1, 4, 6)}}
    show = airflow.tidemark("offsets", "show", pipeline)
    assert {p["partition"]: p["committed_offset"] for p in show} == {0: None, 1: None}

    # Each committed backfill batch was an event of the table's asset; the scheduler ran the example
    # DAG scheduled on it (dags/tidemark_downstream_example.py), which returns what arrived.
    batches = {row["dag_run_id"]: row["batch_id"] for row in history}

    def what_arrived(run_id: str) -> list[dict]:
        value = airflow.api("GET", f"/dags/{downstream}/dagRuns/{run_id}/taskInstances/what_arrived/xcomEntries/"
                                   "return_value")["value"]
        return json.loads(value) if isinstance(value, str) else value

    def downstream_done():
        runs = airflow.runs(downstream)
        if not runs or any(r["state"] not in ("success", "failed") for r in runs):
            return None
        arrived = [batch for r in runs if r["state"] == "success" for batch in what_arrived(r["dag_run_id"])]
        return (runs, arrived) if len(arrived) >= len(batches) or any(r["state"] == "failed" for r in runs) else None

    runs, arrived = airflow.wait_for("the downstream example DAG's runs", downstream_done, timeout=300)
    assert {(r["run_type"], r["state"]) for r in runs} == {("asset_triggered", "success")}, runs
    assert sorted((b["batch_id"], b["kind"], b["table"], b["records"], b["dead_letters"],
                   tuple((r["partition"], r["start"], r["end"], r["records"]) for r in b["ranges"]))
                  for b in arrived) == sorted(
        (batches[run_id], "backfill", table, sum(end - start for _, start, end in ranges), 0,
         tuple(sorted((p, start, end, end - start) for p, start, end in ranges)))
        for run_id, ranges in by_run.items())
    assert all(isinstance(b["delta_version"], int) for b in arrived), arrived


def ledger_entries(airflow: LocalAirflow, pipeline: str) -> dict[int, dict]:
    """The committed batches and backfills in ``tidemark offsets history``: batch id -> kind, offsets and
    records written (dead letters apart)."""
    entries: dict[int, dict] = {}
    for row in airflow.tidemark("offsets", "history", pipeline):
        if row["status"] == "committed" and row["kind"] in ("batch", "backfill"):
            entry = entries.setdefault(row["batch_id"], {"kind": row["kind"], "offsets": 0, "records": 0})
            entry["offsets"] += row["end_offset"] - row["start_offset"]
            entry["records"] += (row["record_count"] or 0) - (row["dead_letter_count"] or 0)
    return entries


def test_a_pipeline_with_backfills_only_shows_no_batch_and_its_last_backfill_in_the_browser(local_airflow, browser):
    """Issue 28: the native backfills' pipeline has committed backfills and no batch. The overview says it
    has committed nothing (a backfill does not move the committed offsets) and names its last backfill; its
    page charts the backfills' records, and no lag."""
    from tests.e2e.browser import chart_marks

    airflow, pipeline = local_airflow, local_airflow.backfill_pipeline
    ledger = ledger_entries(airflow, pipeline)
    assert {e["kind"] for e in ledger.values()} == {"backfill"} and len(ledger) == 2, ledger
    open_tidemark_page(browser, airflow, pipeline)
    row = browser.find_element("css selector", f'tr[data-pipeline="{pipeline}"]')
    cells = {c.get_attribute("data-field"): c.text for c in row.find_elements("css selector", "td[data-field]")}
    assert cells["last_batch_id"] == "-", cells
    assert cells["committed"] == "never (backfills only: they do not move the committed offsets)", cells
    assert re.fullmatch(rf"{max(ledger)}, \d+ (s|min) ago", cells["last_backfill"]), cells
    browser.find_element("css selector", f'tr[data-pipeline="{pipeline}"] a').click()
    airflow.wait_for("the pipeline's charts", lambda: browser.find_elements("css selector", "#chart-records"))
    assert browser.find_element("css selector", "#backfills [data-field=last_backfill_id]").text == str(max(ledger))
    assert "No committed batch yet" in browser.find_element("css selector", "#chart-lag").text
    marks = chart_marks(browser, "chart-records")
    assert {b: (kind, value) for b, (kind, value, _) in marks.items()} == {
        b: ("backfill", e["records"]) for b, e in ledger.items()}
    assert all(tip.startswith(f"backfill {b}: {ledger[b]['records']:,} records, committed ")
               for b, (_, _, tip) in marks.items()), marks
    browser.switch_to.default_content()


def test_the_tidemark_page_on_the_api_server_needs_a_login_and_shows_what_the_cli_shows(local_airflow):
    """The plugin's page, mounted by the real api-server (tidemark_airflow.plugin): 401 without a login,
    403 with a forged token, and for a logged-in viewer the same numbers as the CLI."""
    import httpx

    airflow, pipeline = local_airflow, local_airflow.backfill_pipeline
    api = f"{airflow.url}/tidemark/api/pipelines/{pipeline}"
    assert httpx.get(f"{api}/offsets", timeout=30).status_code == 401
    assert httpx.get(f"{airflow.url}/tidemark/", timeout=30).status_code == 401
    assert httpx.get(f"{api}/offsets", headers={"Authorization": "Bearer forged"}, timeout=30).status_code == 403

    login = httpx.post(f"{airflow.url}/auth/token", json={"username": VIEWER, "password": airflow.login(VIEWER)},
                       timeout=30)
    assert login.status_code == 201, login.text
    token = login.json()["access_token"]
    with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        assert client.get(f"{api}/offsets").json() == airflow.tidemark("offsets", "show", pipeline)
        assert client.get(f"{api}/history").json() == airflow.tidemark("offsets", "history", pipeline)
        [view] = [p for p in client.get(f"{airflow.url}/tidemark/api/pipelines").json()["pipelines"]
                  if p["pipeline"] == pipeline]
        assert view["kafka_error"] is None and view["dag_id"] == f"tidemark_ingest__{pipeline}"
        [plugin] = [p for p in client.get(f"{airflow.url}/api/v2/plugins").json()["plugins"] if p["name"] == "tidemark"]
        assert {(v["destination"], v["href"]) for v in plugin["external_views"]} == {
            ("nav", "/tidemark/"), ("dag", "/tidemark/dags/{DAG_ID}")}
        # A viewer sees, never triggers.
        refused = client.post(f"{airflow.url}/api/v2/dags/tidemark_ingest__{pipeline}/dagRuns",
                              json={"logical_date": None})
        assert refused.status_code == 403, refused.text
    # The UI's iframe sends the login cookie, not a header.
    page = httpx.get(f"{airflow.url}/tidemark/pipelines/{pipeline}", cookies={"_token": token}, timeout=30)
    assert page.status_code == 200 and f'data-topic="{pipeline}"' in page.text


def test_a_table_moved_to_s3_under_the_scheduler_keeps_its_asset_and_continues_exactly_once(local_airflow):
    """Issue 24: the pipeline's table moves from the local disk to the local S3 server between two runs
    of the running stack (scheduler, dag-processor, LocalExecutor); the ingest task's outlet stays a valid
    asset (before, Airflow refused it as inactive) and the run writes only the records after the committed
    position, once. Last in the module: the other tests use the table on the disk."""
    from tidemark import storage

    airflow = local_airflow
    moved = f"{helpers.s3_lake(airflow.pipeline)}/{airflow.pipeline}"
    (Path(airflow.env["TIDEMARK_PIPELINES_DIR"]) / f"{airflow.pipeline}.yaml").write_text(yaml.safe_dump(
        {"name": airflow.pipeline, "topics": [airflow.pipeline], "table": moved, "schedule": "@yearly",
         "retries": 0}))
    helpers.produce(airflow.pipeline, 10, start=1000)
    committed = {r["partition"]: r["committed_offset"] or 0 for r in airflow.tidemark("offsets", "show",
                                                                                   airflow.pipeline)}
    expected = sum(end - committed.get(p, 0) for p, end in helpers.end_offsets(airflow.pipeline).items())
    run_id = airflow.api("POST", f"/dags/{airflow.dag_id}/dagRuns", json={"logical_date": None})["dag_run_id"]
    run = airflow.finished_run(run_id)
    assert run["state"] == "success", f"{run}\n{airflow.service_logs()}"
    assert "inactive assets" not in airflow.service_logs()
    rows = helpers.query(storage.delta_rs_uri(moved), "SELECT COUNT(*) AS n, COUNT(DISTINCT kafka_partition || ':' "
                                                       "|| kafka_offset) AS d FROM t")
    assert rows == [{"n": expected, "d": expected}]  # what the disk table had not taken yet, once


def test_the_charts_in_the_browser_match_the_ledger(local_airflow, browser):
    """Issue 28: the pipeline page's charts, read in the browser after the module's runs (the window
    backfill, then the batch that followed the table's move), against ``tidemark offsets history``: the lag
    chart has each committed batch at the offsets it found waiting and no backfill; the records chart has
    both, each with its kind, value, tooltip and batch id under the axis. Reads the ledger only."""
    from tests.e2e.browser import chart_marks

    airflow = local_airflow
    ledger = ledger_entries(airflow, airflow.pipeline)
    batches = {b: e for b, e in ledger.items() if e["kind"] == "batch"}
    assert batches and len(ledger) > len(batches), ledger  # at least a batch and a backfill
    open_pipeline_page(browser, airflow)
    airflow.wait_for("the pipeline's charts", lambda: browser.find_elements("css selector", "#chart-lag svg"))
    lag = chart_marks(browser, "chart-lag")
    assert {b: (kind, value) for b, (kind, value, _) in lag.items()} == {
        b: ("batch", e["offsets"]) for b, e in batches.items()}
    records = chart_marks(browser, "chart-records")
    assert {b: (kind, value) for b, (kind, value, _) in records.items()} == {
        b: (e["kind"], e["records"]) for b, e in ledger.items()}
    assert all(tip.startswith(f"{ledger[b]['kind']} {b}: {ledger[b]['records']:,} records, committed ")
               and tip.endswith(" UTC") for b, (_, _, tip) in records.items()), records
    labels = [t.text for t in browser.find_elements("css selector", "#chart-records svg text.batch-label")]
    assert labels == [str(b) for b in sorted(ledger)]
    # The history's times as people read them: to the second, in UTC, with how long ago.
    when = browser.find_element("css selector", "#history tr[data-batch] td.when").text
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \d+ (s|min) ago", when), when
    browser.switch_to.default_content()
    screenshot(browser, CACHE_SHOTS / "tidemark-charts.png")


def test_metrics_reach_statsd_and_a_missed_freshness_deadline_calls_the_pipelines_callback(local_airflow):
    """Issue 28: the stack's Airflow sends StatsD to the test's listener ([metrics] statsd_on): a real run's
    batch, lag and freshness metrics arrive under their documented names. The pipeline's freshness_sla is
    1 s and its output has no record yet, so its first run's deadline is its creation + 1 s: the run
    takes longer, the scheduler marks the deadline missed, and the executor calls the pipeline's callback."""
    import json

    airflow, pipeline = local_airflow, local_airflow.alerting
    dag_id = f"tidemark_ingest__{pipeline}"
    helpers.produce(pipeline, 6)  # its topic: two partitions, made with the others'
    airflow.wait_for(f"{dag_id} parsed", lambda: airflow.is_parsed(dag_id))
    run_id = airflow.api("POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": None})["dag_run_id"]

    def done():
        state = airflow.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")
        return state if state["state"] in ("success", "failed") else None
    finished = airflow.wait_for(f"run {run_id}", done)
    assert finished["state"] == "success", f"{finished}\n{airflow.service_logs()}"

    name = f"airflow.tidemark.{{}}.{pipeline}"
    airflow.wait_for("the batch's metrics", lambda: airflow.statsd.values(name.format("batch_duration")))
    assert airflow.statsd.values(name.format("batch_records")) == ["6"]
    assert airflow.statsd.values(name.format("batch_dead_letters")) == ["0"]
    assert float(airflow.statsd.values(name.format("batch_duration"))[0]) > 0
    assert airflow.statsd.values(name.format("total_lag")) == ["0"]
    assert [airflow.statsd.values(f"{name.format('partition_lag')}.{pipeline}.{p}") for p in (0, 1)] == [["0"], ["0"]]
    assert airflow.statsd.values(name.format("held_by_open_transactions")) == ["0"]
    assert float(airflow.statsd.values(name.format("freshness_seconds"))[0]) >= 0
    assert "airflow.tidemark.total_lag:0|g" in airflow.statsd.lines()  # the tagged name too

    def deadline_lines() -> str:  # what the services logged of deadlines and callbacks, for a failure
        return "\n".join(line[:600] for path in sorted((airflow.home / "logs").rglob("*.log"))
                         for line in path.read_text(errors="replace").splitlines()
                         if re.search(r"(?i)deadline|callback|freshness|tidemark_alert", line))

    [alert] = helpers.wait_until(lambda: airflow.alerts.exists() and [
        json.loads(line) for line in airflow.alerts.read_text().splitlines()], 300,
        lambda: f"the freshness callback's alert; the logs say:\n{deadline_lines()[-8000:]}", interval=1)
    assert alert["run_id"] == run_id and alert["channel"] == "#data-oncall"
    assert alert["tidemark"]["pipeline"] == pipeline and alert["tidemark"]["sla_seconds"] == 1.0
    # missed while the batch ran (no record yet: age unknown) or after (its newest record, over 1 s old)
    assert alert["tidemark"]["freshness_seconds"] is None or alert["tidemark"]["freshness_seconds"] > 1.0
    assert alert["tidemark"]["message"].startswith(f"Tidemark pipeline '{pipeline}' is stale")
