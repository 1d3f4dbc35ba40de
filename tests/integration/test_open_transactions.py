"""A producer's open transaction against the real broker, seen through the CLI as a real process: the lag
is measured to the last stable offset, so records held back by a transaction that is neither committed
nor aborted show as ``held_by_open_transactions`` (high watermark minus last stable offset), not as lag."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path

import pytest

from tests import helpers

pytestmark = pytest.mark.integration

HELD = 154
TIDEMARK = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "tidemark")


@pytest.fixture
def cli(kafka_bootstrap, tmp_path):
    """A three-partition topic, its pipeline file, and the ``tidemark`` command pointed at them."""
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    env = helpers.service_env(pipelines, tmp_path / "lake")
    topic = helpers.create_topic(helpers.unique("open_txn"), partitions=3)
    (pipelines / f"{topic}.yaml").write_text(f"name: {topic}\ntopics: [{topic}]\ntable: {topic}\n"
                                             "lag: {hold_warning_after: 1s}\n")

    def run(*args: str) -> str:
        done = subprocess.run([TIDEMARK, *args, topic], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    run.topic = topic
    return run


def shown(cli) -> dict[int, tuple]:
    rows = json.loads(cli("offsets", "show", "--json"))
    return {r["partition"]: (r["committed_offset"], r["latest_offset"], r["lag"], r["held_by_open_transactions"])
            for r in rows}


def test_an_open_transaction_is_shown_as_held_offsets_not_lag_until_it_commits(cli):
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=helpers.bootstrap(), transactional_id=helpers.unique("open_txn"),
                             enable_idempotence=True)
    try:
        producer.init_transactions()
        began = dt.datetime.now(dt.UTC).replace(microsecond=0)
        producer.begin_transaction()
        for i in range(HELD):
            for partition in (0, 1):
                producer.send(cli.topic, value=b"v%d" % i, partition=partition)
        producer.flush()  # in the log, above the last stable offset: no commit, no abort
        assert shown(cli) == {0: (None, 0, 0, HELD), 1: (None, 0, 0, HELD), 2: (None, 0, 0, 0)}
        lag = cli("lag")
        assert f"total lag of '{cli.topic}': 0" in lag and f"held by open transactions: {2 * HELD}" in lag
        table = cli("offsets", "show").splitlines()
        assert "HELD_BY_OPEN_TRANSACTIONS" in table[0] and table[1].split()[-1] == str(HELD)
        # since when: the first held record's timestamp (Kafka keeps it); a warning once over hold_warning_after
        since = {r["partition"]: r["held_since"] for r in json.loads(cli("offsets", "show", "--json"))}
        assert since[2] is None and all(began <= dt.datetime.fromisoformat(since[p]) <= dt.datetime.now(dt.UTC)
                                        for p in (0, 1)), since
        warned = helpers.wait_until(lambda: [line for line in cli("lag").splitlines() if line.startswith("WARNING")],
                                    30, "a hold warning from tidemark lag")
        assert [w.split(" held back")[0] for w in warned] == [
            f"WARNING: pipeline '{cli.topic}': {cli.topic}:{p} has {HELD} offset(s)" for p in (0, 1)]
        assert "(over hold_warning_after, 0m01s)" in warned[0]

        producer.commit_transaction()
        # the commit marker takes one offset; the broker writes the markers after it answers the commit
        committed = {0: (None, HELD + 1, HELD + 1, 0), 1: (None, HELD + 1, HELD + 1, 0), 2: (None, 0, 0, 0)}
        last = {}

        def released():
            last.update(shown(cli))
            return last == committed

        helpers.wait_until(released, 60, lambda: f"the commit to release the held offsets; last seen {last}")
        released_lag = cli("lag")
        assert "held by open transactions: 0" in released_lag and "WARNING" not in released_lag
    finally:
        producer.close()
