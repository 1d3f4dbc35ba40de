"""The Tidemark page (tidemark_airflow.console) on a real delta-rs ledger, in-process. Kafka is a closed
port here, so these tests also cover the page's promise to show the ledger's numbers when Kafka is
unreachable: one test really bootstraps from the closed port (``real_closed_port``); the others get the same
error at once, so that no unit test waits on a network timeout. The page against a running api-server and a
live broker is tested in tests/e2e/test_local_airflow.py."""

from __future__ import annotations

import datetime as dt
import json
import socket

import pytest

from tidemark.batch import history, recent_entries
from tidemark.batch.status import GAP_RECORDED
from tidemark.kafka.offsets import OffsetRange, TopicPartition
from tidemark.ledger.store import COMMITTED, PLANNED, Ledger, LedgerRow, gap_rows, planned_rows
from tidemark.settings import ledger_uri
from tidemark_airflow import console
from tidemark_airflow.console import create_app, run_link


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def real_closed_port(monkeypatch):
    """The test asks kafka-python to bootstrap from the closed port itself, and waits for it: 0.6 s per pipeline and
    request instead of the page's 3 s (the shortest kafka-python takes: its request timeout must be longer than its
    fetch_max_wait_ms, 500 ms). Without this fixture, the closed port fails at once (``kafka_fails_at_once``)."""
    monkeypatch.setattr(console, "KAFKA_TIMEOUT_SECONDS", 0.6)


@pytest.fixture(autouse=True)
def kafka_fails_at_once(request, monkeypatch):
    """What the page gets from an unreachable Kafka, without waiting for a network timeout (a unit test waits on
    none): the same KafkaUnavailableError, raised at once. The real closed port: ``real_closed_port``."""
    if "real_closed_port" in request.fixturenames:
        return
    from tidemark.batch import status
    from tidemark.errors import KafkaUnavailableError

    def unreachable(config, kafka_properties, *args, **kwargs):
        raise KafkaUnavailableError(f"cannot reach Kafka at {kafka_properties['bootstrap.servers']} (a closed port)",
                                    pipeline=config.name)

    monkeypatch.setattr(status, "partition_status", unreachable)


@pytest.fixture
def console_lake(lake, tmp_path, monkeypatch):
    """Pipeline 'orders' with a history: batch 1 committed, a gap, a reset by a replay run, batch 4
    committed by a CLI run, batch 5 frozen and not committed; Kafka unreachable (a closed port)."""
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    (pipelines / "orders.yaml").write_text("name: orders\ntopics: [orders]\ntable: orders\nkafka_timeout_seconds: 1\n")
    monkeypatch.setenv("TIDEMARK_PIPELINES_DIR", str(pipelines))
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": f"127.0.0.1:{closed_port()}"}}))
    ledger = Ledger(ledger_uri())
    p0, p1 = TopicPartition("orders", 0), TopicPartition("orders", 1)

    def commit(batch_id, ranges, owner, counts):
        ledger.append(planned_rows("orders", batch_id, ranges, owner), expected=ledger.state("orders").fingerprint)
        assert ledger.mark_committed("orders", batch_id, counts)

    commit(1, [OffsetRange("orders", 0, 0, 10), OffsetRange("orders", 1, 0, 7)], "scheduled__2026-11-24T10:00:00",
           {p0: (10, 1), p1: (7, 0)})
    ledger.append(gap_rows("orders", 2, [OffsetRange("orders", 1, 7, 9)], "scheduled__2026-11-24T11:00:00"),
                  expected=ledger.state("orders").fingerprint)
    at = dt.datetime.now(dt.UTC)
    ledger.append([LedgerRow("orders", 3, "reset", COMMITTED, "orders", 0, 10, 8, dag_run_id=
                             "tidemark_replay__orders/manual__2026-11-24T11:30:00", reason="replay the last two",
                             planned_at=at, committed_at=at)], expected=ledger.state("orders").fingerprint)
    commit(4, [OffsetRange("orders", 0, 8, 12)], "cli:host:123:1", {p0: (4, 0)})
    ledger.append(planned_rows("orders", 5, [OffsetRange("orders", 0, 12, 20)], "manual__x"),
                  expected=ledger.state("orders").fingerprint)
    return ledger


@pytest.fixture
def client(console_lake):
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.testclient import TestClient

    app = create_app(failed=lambda dag_id: False)
    app.dependency_overrides[get_user] = lambda: "tester"
    return TestClient(app)


def test_the_overview_shows_the_ledgers_numbers_and_says_kafka_is_unreachable(real_closed_port, client):
    response = client.get("/api/pipelines")
    assert response.status_code == 200
    [view] = response.json()["pipelines"]
    assert view["pipeline"] == "orders" and view["dag_id"] == "tidemark_ingest__orders"
    assert view["last_batch_id"] == 4 and view["pending_batch_id"] == 5 and view["batches"] == 2
    assert view["gaps"] == 1 and view["status"] == GAP_RECORDED
    assert view["total_lag"] is None and "127.0.0.1" in view["kafka_error"]
    assert {(r["partition"], r["committed_offset"], r["latest_offset"], r["lag"]) for r in view["partitions"]} == {
        (0, 12, None, None), (1, 9, None, None)}


def test_the_offsets_and_history_endpoints_are_the_clis_json(client, capsys):
    from tidemark_cli.main import main

    assert main(["offsets", "history", "orders", "--json", "--limit", "4"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert client.get("/api/pipelines/orders/history", params={"limit": 4}).json() == cli
    assert [r["batch_id"] for r in cli] == [5, 4, 3, 2]
    assert history("orders", 100) == client.get("/api/pipelines/orders/history", params={"limit": 100}).json()
    offsets = client.get("/api/pipelines/orders/offsets").json()
    assert [(r["topic"], r["partition"], r["committed_offset"], r["last_batch_id"]) for r in offsets] == [
        ("orders", 0, 12, 4), ("orders", 1, 9, 2)]


def test_a_pipelines_entries_have_counts_durations_and_links_to_the_runs(client):
    view = client.get("/api/pipelines/orders").json()
    entries = {e["batch_id"]: e for e in view["entries"]}
    assert list(entries) == [5, 4, 3, 2, 1]
    assert (entries[1]["records"], entries[1]["dead_letters"], entries[1]["offsets"]) == (16, 1, 17)
    assert entries[1]["duration_seconds"] >= 0 and entries[5]["status"] == PLANNED
    assert entries[1]["run_link"] == "/dags/tidemark_ingest__orders/runs/scheduled__2026-11-24T10%3A00%3A00"
    assert entries[3]["run_link"] == "/dags/tidemark_replay__orders/runs/manual__2026-11-24T11%3A30%3A00"
    assert entries[3]["reason"] == "replay the last two" and entries[4]["run_link"] is None
    assert recent_entries("orders", 2) == [{k: v for k, v in e.items() if k != "run_link"} for e in view["entries"][:2]]


def test_the_html_pages_render_the_same_numbers(client):
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert 'data-pipeline="orders"' in page.text and "Kafka unreachable" in page.text
    detail = client.get("/pipelines/orders").text
    assert '<td class="num" data-field="committed_offset">12</td>' in detail
    assert '<th>Held by open transactions</th>' in detail and 'id="held"' not in detail  # Kafka's numbers unknown
    assert "Kafka is unreachable" in detail and "replay the last two" in detail
    assert 'href="/dags/tidemark_replay__orders/runs/manual__2026-11-24T11%3A30%3A00" target="_top"' in detail


def test_the_dag_tab_leads_to_the_pipeline_or_says_the_dag_is_not_tidemarks(client):
    moved = client.get("/dags/tidemark_ingest__orders", follow_redirects=False)
    assert moved.status_code == 307 and moved.headers["location"] == "/tidemark/pipelines/orders"
    assert "Not a Tidemark DAG" in client.get("/dags/someone_elses_dag").text


def test_a_pipeline_that_cannot_be_read_is_named_and_the_others_are_shown(client, tmp_path, monkeypatch):
    pipelines = tmp_path / "pipelines"
    (pipelines / "on_s3.yaml").write_text("name: on_s3\ntopics: [t]\ntable: s3a://lake/on_s3\n"
                                          "storage_conn_id: no_such_store\n")
    body = client.get("/api/pipelines").json()
    assert [v["pipeline"] for v in body["pipelines"]] == ["orders"]
    assert "no_such_store" in body["errors"]["on_s3"]
    detail = client.get("/api/pipelines/on_s3")
    assert detail.status_code == 503 and "no_such_store" in detail.json()["detail"]
    assert "Cannot show on_s3" in client.get("/").text


def test_an_unknown_pipeline_is_404_naming_it(client):
    response = client.get("/api/pipelines/nope")
    assert response.status_code == 404 and "nope" in response.json()["detail"]


def test_the_page_cannot_change_anything(client, console_lake):
    before = console_lake.version()
    for path in ("/api/pipelines/orders", "/api/pipelines/orders/offsets", "/pipelines/orders"):
        assert client.post(path).status_code == 405
        assert client.delete(path).status_code == 405
    assert console_lake.version() == before


def test_without_a_login_every_route_is_401(console_lake):
    """Airflow's own login dependency guards every route (a forged token, which needs the api-server's auth
    manager, is tested against the real api-server in tests/e2e)."""
    from fastapi.testclient import TestClient

    client = TestClient(create_app(failed=lambda dag_id: False))
    for path in ("/", "/pipelines/orders", "/api/pipelines", "/api/pipelines/orders/history", "/dags/x"):
        assert client.get(path).status_code == 401, path


@pytest.mark.parametrize(("kind", "owner", "link"), [
    ("batch", "manual__2026-11-24T10:00:00+00:00",
     "/dags/tidemark_ingest__p/runs/manual__2026-11-24T10%3A00%3A00%2B00%3A00"),
    ("gap", "scheduled__x", "/dags/tidemark_ingest__p/runs/scheduled__x"),
    ("batch", "cli:host:1:2", None),
    ("reset", "cli:alice@host", None),
    ("reset", "tidemark_replay__p/manual__y", "/dags/tidemark_replay__p/runs/manual__y"),
    ("batch", None, None),
])
def test_run_links(kind, owner, link):
    assert run_link(kind, owner, "p") == link


def test_the_page_answers_parallel_requests_each_with_its_own_pipelines_store(console_lake, tmp_path, monkeypatch):
    """Requests are served at the same time (a barrier that every request must reach before any may go
    on would break if they were served one after the other), and each opens its pipeline's own store:
    two pipelines on two object stores never see each other's settings."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.testclient import TestClient

    from tidemark.run import PipelineRun

    pipelines = tmp_path / "pipelines"
    for name, bucket in (("east", "lake-east"), ("west", "lake-west")):
        (pipelines / f"{name}.yaml").write_text(f"name: {name}\ntopics: [{name}]\ntable: s3://{bucket}/{name}\n"
                                                f"storage_conn_id: aws_{name}\nkafka_timeout_seconds: 1\n")
        monkeypatch.setenv(f"AIRFLOW_CONN_AWS_{name.upper()}", json.dumps(
            {"conn_type": "aws", "login": f"key-{name}", "password": f"secret-{name}",
             "extra": {"endpoint_url": f"http://{name}.invalid:9000"}}))
    requests = ["/api/pipelines/orders", "/api/pipelines/east", "/api/pipelines/west"] * 2
    barrier = threading.Barrier(len(requests), timeout=60)
    seen: list[tuple[str, str | None]] = []
    overview = PipelineRun.overview

    def meeting(self, **kwargs):
        seen.append((self.name, self.store.access_key_id if self.store else None))
        barrier.wait()  # BrokenBarrierError (a 500) if the requests were served one at a time
        return overview(self, **kwargs)

    monkeypatch.setattr(PipelineRun, "overview", meeting)
    app = create_app(failed=lambda dag_id: False)
    app.dependency_overrides[get_user] = lambda: "tester"
    client = TestClient(app)
    with ThreadPoolExecutor(len(requests)) as pool:
        answers = list(pool.map(client.get, requests))
    assert [a.status_code for a in answers] == [200] * len(requests)
    assert [a.json()["pipeline"] for a in answers] == [r.rsplit("/", 1)[1] for r in requests]
    assert sorted(seen) == sorted([("orders", None), ("east", "key-east"), ("west", "key-west")] * 2)


def test_the_page_warns_when_open_transactions_hold_offsets_back():
    from tidemark_airflow.console_html import render

    def row(partition, lag, held):
        return {"topic": "orders", "partition": partition, "committed_offset": 10, "latest_offset": 10 + lag,
                "lag": lag, "last_batch_id": 3, "held_by_open_transactions": held}

    view = {"pipeline": "orders", "status": "healthy", "topics": "orders", "table": "orders", "dag_id": "d",
            "held_by_open_transactions": 308, "partitions": [row(0, 0, 154), row(1, 0, 154), row(2, 5, 0)],
            "total_lag": 5, "last_batch_id": 3, "pending_batch_id": None, "gaps": 0, "entries": []}
    page = render("pipeline.html", view=view)
    assert '<td class="num" data-field="held_by_open_transactions">154</td>' in page
    assert '<td class="num" data-field="held_by_open_transactions">0</td>' in page
    assert "308 offset(s) are held back by open transactions (orders:0 154, orders:1 154):" in page
    assert 'id="held"' not in render("pipeline.html", view={**view, "held_by_open_transactions": 0})


def test_the_pipeline_page_draws_its_charts_from_the_ledger(client):
    import re

    detail = client.get("/pipelines/orders").text

    def marks(chart: str) -> dict[int, str]:
        svg = detail.split(f'id="{chart}"', 1)[1].split("</figure>", 1)[0]
        return {int(b): v for b, v in re.findall(r'data-batch="(\d+)" data-kind="\w+" data-value="([\d.]+)"', svg)}

    assert marks("chart-lag") == {1: "17", 4: "4"}  # the committed batches' offsets; no reset, gap, pending batch
    assert marks("chart-records") == {1: "16", 4: "4"}
    assert "<script" not in detail and "http" not in detail.split("<svg", 1)[1].split("</svg>", 1)[0].replace(
        "http://www.w3.org/2000/svg", "")  # drawn on the server, nothing fetched


def test_the_history_prints_times_to_the_second_and_folds_long_range_lists(client):
    import re

    detail = client.get("/pipelines/orders").text
    shown = r"<time datetime=\"[^\"]+\">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</time> <span class=\"sub\">\d+ s ago"
    assert re.search(shown, detail)
    assert not re.search(r">\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+", detail)  # no raw ISO with microseconds shown
    assert "<details><summary>2 partitions of orders</summary>" in detail  # batch 1's two ranges, folded


def test_a_pipeline_with_backfills_only_has_committed_no_batch_and_shows_its_last_backfill(client, console_lake,
                                                                                           tmp_path):
    (tmp_path / "pipelines" / "replays.yaml").write_text("name: replays\ntopics: [replays]\ntable: replays\n"
                                                          "kafka_timeout_seconds: 1\n")
    for batch_id in (1, 2):
        console_lake.append(planned_rows("replays", batch_id, [OffsetRange("replays", 0, 0, 5)], "backfill__x",
                                         kind="backfill"), expected=console_lake.state("replays").fingerprint)
        assert console_lake.mark_committed("replays", batch_id, {TopicPartition("replays", 0): (5, 0)})
    [view] = [v for v in client.get("/api/pipelines").json()["pipelines"] if v["pipeline"] == "replays"]
    assert (view["last_batch_id"], view["last_committed_at"], view["batches"]) == (None, None, 0)
    assert (view["last_backfill_id"], view["backfills"]) == (2, 2) and view["last_backfill_age_seconds"] >= 0
    row = client.get("/").text.split('data-pipeline="replays"', 1)[1].split("</tr>", 1)[0]
    assert '<td class="num" data-field="last_batch_id">-</td>' in row
    assert "never <span class=\"sub\">(backfills only: they do not move the committed offsets)" in row
    assert '<span data-field="last_backfill_id">2</span>' in row
    detail = client.get("/pipelines/replays").text
    assert 'Last backfill: <span data-field="last_backfill_id">2</span>' in detail
    assert "this pipeline has committed no batch yet" in detail and "No committed batch yet" in detail
    # The orders pipeline's last batch stays its last batch (4), its 'last backfill' absent.
    [orders] = [v for v in client.get("/api/pipelines").json()["pipelines"] if v["pipeline"] == "orders"]
    assert orders["last_batch_id"] == 4 and orders["last_backfill_id"] is None


def test_an_unfinished_reprocess_entry_is_shown_as_one_not_as_a_pending_batch(client, console_lake, tmp_path):
    """Issue 42: a reprocess entry whose run died (or is running) is no frozen batch: it holds no run back, so
    neither 'In flight' as a batch nor 'failing' as a stuck one; the page says what it is and what finishes it."""
    (tmp_path / "pipelines" / "fixed.yaml").write_text("name: fixed\ntopics: [fixed]\ntable: fixed\n"
                                                       "kafka_timeout_seconds: 1\n")
    console_lake.append(planned_rows("fixed", 1, [OffsetRange("fixed", 0, 0, 5)], "scheduled__x"),
                        expected=console_lake.state("fixed").fingerprint)
    assert console_lake.mark_committed("fixed", 1, {TopicPartition("fixed", 0): (5, 2)})
    long_ago = dt.datetime.now(dt.UTC) - dt.timedelta(hours=3)
    console_lake.append([LedgerRow("fixed", 2, "reprocess", PLANNED, "fixed", 0, 1, 4, dead_letter_count=2,
                                   dag_run_id="cli:me@host", reason="schema fixed", planned_at=long_ago)],
                        expected=console_lake.state("fixed").fingerprint)
    [view] = [v for v in client.get("/api/pipelines").json()["pipelines"] if v["pipeline"] == "fixed"]
    assert (view["pending_batch_id"], view["unfinished_reprocess_id"], view["status"]) == (None, 2, "healthy")
    row = client.get("/").text.split('data-pipeline="fixed"', 1)[1].split("</tr>", 1)[0]
    assert ">reprocess 2 in progress or unfinished</span></td>" in row
    detail = client.get("/pipelines/fixed").text
    assert "frozen and not yet committed" not in detail
    assert 'Reprocess entry <span data-field="unfinished_reprocess_id">2</span>\nis in progress or unfinished' in detail
    assert "<code>tidemark dead-letters reprocess fixed</code> command finishes it first" in detail
    assert '<td>reprocess</td><td>in progress or unfinished</td>' in detail
    # orders' frozen batch 5 is still a batch in flight
    orders = client.get("/").text.split('data-pipeline="orders"', 1)[1].split("</tr>", 1)[0]
    assert '<td data-field="in_flight">5</td>' in orders


def test_a_keyed_pipeline_shows_the_rows_each_merge_inserted_updated_and_deleted(client, console_lake, tmp_path,
                                                                                  capsys):
    """Issue 39 item 8: a keyed batch's rows inserted, updated and deleted (one set per batch, carried by its first
    row) in the entries, the history (JSON and the CLI's table), the page's history table and its chart; an append
    pipeline's page and table stay as they were."""
    from tidemark.ledger.store import RowChanges
    from tidemark_cli.main import main

    (tmp_path / "pipelines" / "customers.yaml").write_text(
        "name: customers\ntopics: [customers]\ntable: customers\nvalue_format: json\n"
        "value_schema: {id: bigint}\nkeyed: {keys: [id]}\nkafka_timeout_seconds: 1\n")
    c0, c1 = TopicPartition("customers", 0), TopicPartition("customers", 1)
    for batch_id, changes in ((1, RowChanges(3, 0, 0)), (2, RowChanges(1, 2, 1))):
        ranges = [OffsetRange("customers", p, 10 * (batch_id - 1), 10 * batch_id) for p in (1, 0)]
        console_lake.append(planned_rows("customers", batch_id, ranges, f"scheduled__{batch_id}"),
                            expected=console_lake.state("customers").fingerprint)
        assert console_lake.mark_committed("customers", batch_id, {c1: (5, 0), c0: (4, 1)}, changes)

    entries = {e["batch_id"]: e for e in client.get("/api/pipelines/customers").json()["entries"]}
    assert [(b, e["rows_inserted"], e["rows_updated"], e["rows_deleted"]) for b, e in entries.items()] == [
        (2, 1, 2, 1), (1, 3, 0, 0)]  # the batch's totals, once: not once per partition
    history = client.get("/api/pipelines/customers/history").json()
    assert [(r["batch_id"], r["partition"], r["rows_inserted"], r["rows_updated"], r["rows_deleted"])
            for r in history] == [(2, 0, 1, 2, 1), (2, 1, None, None, None), (1, 0, 3, 0, 0), (1, 1, None, None, None)]

    detail = client.get("/pipelines/customers").text
    assert "<th>Rows inserted</th><th>Rows updated</th><th>Rows deleted</th>" in detail
    row = detail.split('<tr data-batch="2">', 1)[1].split("</tr>", 1)[0]
    assert [f'<td class="num" data-field="rows_{c}">{n}</td>' in row
            for c, n in (("inserted", 1), ("updated", 2), ("deleted", 1))] == [True] * 3
    chart = detail.split('id="chart-changes"', 1)[1].split("</figure>", 1)[0]
    assert 'data-batch="2" data-kind="batch" data-value="4"' in chart
    assert "batch 2: 4 rows (1 inserted, 2 updated, 1 deleted), committed" in chart
    orders = client.get("/pipelines/orders").text
    assert "Rows inserted" not in orders and "chart-changes" not in orders

    assert main(["offsets", "history", "customers"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[7:12] == ["RECORD_COUNT", "DEAD_LETTER_COUNT", "ROWS_INSERTED", "ROWS_UPDATED",
                                      "ROWS_DELETED"]
    assert table[1].split()[:12] == ["2", "batch", "committed", "customers", "0", "10", "20", "4", "1", "1", "2", "1"]
    assert table[2].split()[:12] == ["2", "batch", "committed", "customers", "1", "10", "20", "5", "0", "-", "-", "-"]
    assert main(["offsets", "history", "orders"]) == 0
    assert "ROWS_INSERTED" not in capsys.readouterr().out  # an append pipeline's table is unchanged


def test_a_transformed_pipeline_shows_the_records_its_transform_filtered_out(client, console_lake, tmp_path, capsys):
    """Each row's filtered_count in the history (JSON and the CLI's table, a FILTERED column only then), the batch's
    sum in the entries, the page's history table and the records chart's tooltips; the records are those that
    landed. An append pipeline's page and table stay as they were."""
    from tidemark_cli.main import main

    (tmp_path / "pipelines" / "shop.yaml").write_text(
        "name: shop\ntopics: [shop]\ntable: shop\nkafka_timeout_seconds: 1\n"
        "transform: SELECT * FROM records WHERE kafka_offset % 3 <> 0\n")
    s0, s1 = TopicPartition("shop", 0), TopicPartition("shop", 1)
    ranges = [OffsetRange("shop", p, 0, 10) for p in (0, 1)]
    console_lake.append(planned_rows("shop", 1, ranges, "run"), expected=console_lake.state("shop").fingerprint)
    assert console_lake.mark_committed("shop", 1, {s0: (10, 1), s1: (9, 0)}, filtered={s0: 4})

    [entry] = client.get("/api/pipelines/shop").json()["entries"]
    assert (entry["records"], entry["dead_letters"], entry["filtered"]) == (14, 1, 4)  # 19 - 1 - 4
    history = client.get("/api/pipelines/shop/history").json()
    assert [(r["partition"], r["record_count"], r["filtered_count"]) for r in history] == [(0, 10, 4), (1, 9, 0)]
    assert {r["filtered_count"] for r in client.get("/api/pipelines/orders/history").json()} == {None}

    detail = client.get("/pipelines/shop").text
    assert "<th>Filtered</th>" in detail
    assert '<td class="num" data-field="filtered">4</td>' in detail.split('<tr data-batch="1">', 1)[1]
    assert "batch 1: 14 records (4 filtered by the transform), committed" in detail
    assert "<th>Filtered</th>" not in client.get("/pipelines/orders").text

    assert main(["offsets", "history", "shop"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[7:10] == ["RECORD_COUNT", "DEAD_LETTER_COUNT", "FILTERED_COUNT"]
    assert [line.split()[7:10] for line in table[1:]] == [["10", "1", "4"], ["9", "0", "0"]]
    assert main(["offsets", "history", "orders"]) == 0
    assert "FILTERED_COUNT" not in capsys.readouterr().out
    assert main(["offsets", "history", "shop", "--json"]) == 0
    assert [r["filtered_count"] for r in json.loads(capsys.readouterr().out)] == [4, 0]
