"""Generated history-table cases (``keyed: {history: scd2}``) against the real broker, Spark and Delta, compared with
the reference model of tests/history_model.py after every batch: every row of the table (payload, Kafka
coordinates, batch id, Debezium's cdc_* columns, ``valid_from``, ``valid_to``, ``is_current``), the rows the ledger
says the batch inserted, updated and deleted, and its dead letters (an ``order_by`` tombstone carries no ordering:
a bad record); at the end, the audit as ``tidemark audit --verify-sample`` runs it (``audit_pipeline``: no Kafka
coordinate twice, no key with two current versions, and every key's current version compared with its newest
change in Kafka).

The cases are keyed_model's (``tests.keyed_model.cases``: dozens of keys, each its own stream of upserts, late and
equal-ordering ones, deletes, tombstones, Debezium's redeliveries, over up to 3 batches), in the two modes a
history table allows (``order_by``, Debezium) on 1 and 3 partitions: four parametrizations. ``make test`` runs
one case of ``order_by`` on 3 partitions; with ``HISTORY_CASES`` set, that many cases spread over all four.

Environment, as test_keyed_generated's ``KEYED_*``: ``HISTORY_CASES`` (default 1) cases in all;
``HISTORY_SEED`` (default 20250101) the seed, the parametrization's index added; ``HISTORY_SHRINK`` (default 1)
0 leaves Hypothesis's shrinking out; ``HISTORY_BATCHES`` (default 3) the most batches of a case;
``HISTORY_KEYS`` (default 40) the most keys.

A failing case names the seed and every key whose rows differ, with its whole change stream, the model's rows and
the table's; it is then reduced against Spark as test_keyed_generated reduces its cases (``reduced``)."""

from __future__ import annotations

import datetime as dt

import pytest

from tests import helpers
from tests.history_model import MODES, HistoryModel, history_columns, history_pipeline_dict, ordering_of
from tests.integration.test_keyed_generated import (
    batch_by_batch,
    knobs_from_env,
    ledger_problems,
    normalized,
    run_generated,
    stream,
    table_rows,
)
from tests.integration.test_keyed_tables import props
from tests.keyed_model import Case, Record
from tidemark import settings as tidemark_settings
from tidemark.audit.pipeline_audit import audit_pipeline
from tidemark.batch.status import recent_entries
from tidemark.config.pipeline import parse_pipeline
from tidemark_spark.audit_keys import compare_keys

pytestmark = pytest.mark.integration

# HISTORY_CASES set: all four parametrizations; unset: one case of order_by on 3 partitions (CI's time budget)
KNOBS = knobs_from_env("HISTORY", MODES, [("order_by", 3)], default_cases=1, default_seed=20250101)
PARAMS = KNOBS.params


@pytest.mark.parametrize(("mode", "partitions"), PARAMS, ids=[f"{m}-{p}p" for m, p in PARAMS])
def test_generated_changes_leave_the_history_and_ledger_the_model_computes(kafka_bootstrap, spark, lake, mode,
                                                                           partitions):
    run_generated(spark, mode, partitions, KNOBS, differences)


def differences(spark, case: Case) -> tuple[dict[int, str], list[str]]:
    """Produce the case batch by batch, run each batch in this process, and compare the table, the ledger and the
    dead letters with the model after each, then the audit; at the first that differs, the keys that differ
    (key: what) and every difference."""
    topic = helpers.create_topic(helpers.unique(f"history-gen-{case.mode}"), partitions=case.partitions)
    config = parse_pipeline(history_pipeline_dict(case.mode, topic), "test")
    model = HistoryModel(case.mode, topic)

    def after_batch(batch_id: int, records: list[Record]) -> tuple[dict[int, str], list[str]]:
        counts = model.apply_batch(records, batch_id)
        differing = table_problems(case, model, table_rows(config))
        problems = [*differing.values(), *ledger_problems(topic, batch_id, counts,
                                                          f"versions (key, ordering) {model.last_changes}")]
        dead = next((e["dead_letters"] for e in recent_entries(topic, 50) if e["batch_id"] == batch_id), None)
        if dead != model.last_bad:
            problems.append(f"the ledger says the batch wrote {dead} dead letters, the model {model.last_bad} (the "
                            f"order_by tombstones)")
        return differing, problems

    return batch_by_batch(spark, case, topic, config, after_batch,
                          lambda: audit_problems(spark, config, case, model))


def table_problems(case: Case, model: HistoryModel, rows: list[dict]) -> dict[int, str]:
    """Each key whose rows differ from the model's (all of them, oldest first by the ordering): the key's whole
    stream, the model's rows, the table's."""
    wanted = history_columns(case.mode)
    held: dict[int, list[dict]] = {}
    for row in rows:
        held.setdefault(row["id"], []).append({c: normalized(row.get(c, "<no such column>")) for c in wanted})
    expected = model.table()
    problems = {}
    for key in sorted(set(held) | set(expected)):
        want, have = expected.get(key, []), sorted(held.get(key, []), key=lambda r: _order(case.mode, r))
        if have != want:
            problems[key] = (f"key {key} (partition {case.partition_of(key)}): {stream(case, key)}\n"
                             f"    model: {_rows(want, wanted)}\n    table: {_rows(have, wanted)}")
    return problems


def _order(mode: str, row: dict) -> tuple:
    """A table row's ordering, sortable even when a value is missing or null (then last)."""
    return tuple((v is None or isinstance(v, str), v if isinstance(v, dt.datetime | int) else 0)
                 for v in ordering_of(mode, row))


def _rows(rows: list[dict], wanted: tuple[str, ...]) -> str:
    """Rows one a line, their columns in the same order (the id and the topic left out: the key's line says them)."""
    if not rows:
        return "no row"
    return "\n           ".join("{" + ", ".join(f"{c}={_shown(row.get(c))}" for c in wanted if c not in (
        "id", "kafka_topic")) + "}" for row in rows)


def _shown(value) -> str:
    if isinstance(value, dt.datetime):
        return value.isoformat(timespec="milliseconds" if value.microsecond else "seconds").replace("+00:00", "Z")
    return repr(value)


def audit_problems(spark, config, case: Case, model: HistoryModel) -> tuple[dict[int, str], list[str]]:
    """The audit as ``tidemark audit --verify-sample N`` runs it, N every key (``audit_pipeline``, its Spark job in
    this session): no Kafka coordinate twice, no key with two current versions, every key's current version
    compared with its newest change in Kafka, no key current whose newest change is a delete. The keys that
    differ, and every problem."""
    keys = len(case.keys)
    report = audit_pipeline(config, props, tidemark_settings.ledger_uri(), None, verify_sample=keys,
                            values=lambda check: compare_keys(spark, check, props()))
    sample = report.sample or {}
    differing = {m["key"]["id"]: (f"audit sample: key {m['key']['id']}: {m['reason']} (its newest change: "
                                  f"{m['change']} at offset {m['offset']} of partition {m['partition']}); "
                                  f"{stream(case, m['key']['id'])}") for m in report.sample_mismatches}
    problems = [] if report.ok else [f"audit: {report.to_dict()}"]
    with_events = len(model.events)  # keys with an upsert or an ordered delete (a tombstone alone is bad)
    if (sample.get("keys_read"), sample.get("verified")) != (with_events, with_events):
        problems.append(f"audit sample: read {sample.get('keys_read')} keys and verified {sample.get('verified')}, "
                        f"not {with_events} (the keys with a change that is not a dead letter): {sample}")
    return differing, problems
