"""Generated keyed-table cases against the real broker, Spark and Delta, compared with the reference model of
tests/keyed_model.py after every batch: the table's rows (payload, Kafka coordinates, batch id; Debezium's cdc_*
columns) and the rows the ledger says the batch inserted, updated and deleted; at the end, the audit (no key
twice, every offset accounted for) and its keyed Kafka sample over every key.

Each case is one topic (1 or 3 partitions, each key on partition ``key % partitions``) holding dozens of keys,
each its own stream of changes over up to 3 batches (Hypothesis: ``tests.keyed_model.cases``): one case exercises
dozens of combinations for the price of a handful of Spark batches. The three modes (Kafka position,
``order_by``, Debezium) on 1 and 3 partitions are six parametrizations; ``make test`` runs one case of two of
them (``order_by`` on 3 partitions, Debezium on 1), the soak all six.

Environment (``make soak-keyed``, scripts/soak_keyed.sh, sets them): ``KEYED_CASES`` (default 2) cases in all,
spread over the parametrizations (all six when it is set); ``KEYED_SEED`` (default 20241201) the seed, the
parametrization's index added; ``KEYED_SHRINK`` (default 1) 0 leaves Hypothesis's shrinking out;
``KEYED_BATCHES`` (default 3) the most batches of a case; ``KEYED_KEYS`` (default 40) the most keys.

A failing case names the seed and every key that differs, with its whole change stream, the model's row and the
table's. The case Hypothesis reports is then reduced against Spark (``reduced``: the differing keys alone,
halves of them down to one key, then that key without each change it can do without; some 10-20 small runs) and
the smallest case that still differs is printed too, above Hypothesis's own shrunk case (a line per key).
Hypothesis's shrinking runs Spark for every candidate and stops after 5 minutes; to spend them on the keys that
matter, a candidate holding a key whose changes (the same, in the same batches) already differed in a case that
ran is taken as failing without running it (the keys are independent streams); the case Hypothesis finally
reports always runs.

test_history_generated.py drives its cases the same way, with its own ``differences``: ``knobs_from_env``,
``run_generated`` (the case loop, shrinking and ``reduced``), ``batch_by_batch`` and ``produce_and_run`` (produce,
plan and run each batch)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import os
import random
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, Phase, assume, given, note, seed, settings
from hypothesis.control import current_build_context

from tests import helpers
from tests.integration.test_keyed_tables import ledger_changes, props
from tests.keyed_model import MODES, Case, KeyedModel, Record, cases, columns, compact, pipeline_dict, schedule
from tidemark import settings as tidemark_settings
from tidemark.audit.keyed_sample import verify_keys
from tidemark.audit.live_table import audit_tables
from tidemark.batch.execute import execute_batch
from tidemark.batch.prepare import prepare_batch
from tidemark.config.pipeline import parse_pipeline
from tidemark_spark.audit_keys import compare_keys

pytestmark = pytest.mark.integration


@dataclasses.dataclass(frozen=True)
class Knobs:
    """A generated test's environment, read under its prefix (``KEYED``, ``HISTORY``) by ``knobs_from_env``."""

    prefix: str
    all_params: list[tuple[str, int]]  # (mode, partitions): every parametrization, whose index makes its seed
    params: list[tuple[str, int]]  # the parametrizations run: all of them when <PREFIX>_CASES is set
    seed: int
    shrink: bool
    max_batches: int
    max_keys: int
    per_parametrization: int


def knobs_from_env(prefix: str, modes, default_params: list[tuple[str, int]], default_cases: int,
                   default_seed: int) -> Knobs:
    """``<PREFIX>_CASES`` (default ``default_cases``) spread over the parametrizations (all of them, each mode on 1
    and 3 partitions, when it is set; ``default_params`` when not), ``<PREFIX>_SEED`` (default ``default_seed``),
    ``<PREFIX>_SHRINK`` (default 1), ``<PREFIX>_BATCHES`` (default 3), ``<PREFIX>_KEYS`` (default 40)."""
    env = os.environ
    all_params = [(mode, partitions) for mode in modes for partitions in (1, 3)]
    params = all_params if f"{prefix}_CASES" in env else default_params
    count = int(env.get(f"{prefix}_CASES", str(default_cases)))
    return Knobs(prefix, all_params, params, seed=int(env.get(f"{prefix}_SEED", str(default_seed))),
                 shrink=env.get(f"{prefix}_SHRINK", "1") != "0", max_batches=int(env.get(f"{prefix}_BATCHES", "3")),
                 max_keys=int(env.get(f"{prefix}_KEYS", "40")),
                 per_parametrization=max(1, math.ceil(count / len(params))))


# The soak (KEYED_CASES set): all six parametrizations; make test: the two ordered modes, where tombstones and
# delete markers act (CI's time budget)
KNOBS = knobs_from_env("KEYED", MODES, [("order_by", 3), ("debezium", 1)], default_cases=2, default_seed=20241201)
PARAMS = KNOBS.params

Differences = Callable[[object, Case], tuple[dict[int, str], list[str]]]
"""``differences(spark, case)``: the keys that differ from the model (key: what) and every difference."""


@pytest.mark.parametrize(("mode", "partitions"), PARAMS, ids=[f"{m}-{p}p" for m, p in PARAMS])
def test_generated_changes_leave_the_table_and_ledger_the_model_computes(kafka_bootstrap, spark, lake, mode,
                                                                         partitions):
    run_generated(spark, mode, partitions, KNOBS, differences)


def run_generated(spark, mode: str, partitions: int, knobs: Knobs, differences: Differences) -> None:
    """The parametrization's generated cases, each compared by ``differences`` (Delta's cached table states let go
    afterwards), a failing one reduced; a candidate of Hypothesis's shrinking holding a key that already differed
    is taken as failing without running it."""
    case_seed = knobs.seed + knobs.all_params.index((mode, partitions))
    phases = [Phase.explicit, Phase.generate, *([Phase.shrink] if knobs.shrink else [])]
    failed = FailedKeys()

    @seed(case_seed)
    @settings(max_examples=knobs.per_parametrization, database=None, deadline=None, phases=phases,
              print_blob=True, report_multiple_bugs=False, suppress_health_check=list(HealthCheck))
    @given(case=cases(mode, partitions, max_keys=knobs.max_keys, max_batches=knobs.max_batches))
    def agrees(case: Case) -> None:
        assume(len(case.changes) >= 2)  # the simplest case (one upsert) first: skipped without running Spark
        where = (f"{knobs.prefix}_SEED={knobs.seed} (this parametrization's seed {case_seed}, {mode}, {partitions} "
                 f"partitions)")
        note(where)
        final = getattr(current_build_context(), "is_final", True)  # the case Hypothesis reports: always run
        if not final:
            check(failed.known(case), where, "not run: these keys' changes failed before, in a case that ran")
        differing, problems = forgetting(spark, case, differences)
        failed.add(case, differing)
        if problems and final:
            problems += reduced(spark, case, differing, differences)
        check(problems, where, "")

    agrees()


@dataclasses.dataclass
class FailedKeys:
    """The change streams of keys that differed from the model in a case that ran, by ``signature``."""

    problems: dict[tuple, str] = dataclasses.field(default_factory=dict)

    @staticmethod
    def signature(case: Case, key: int) -> tuple:
        """A key's changes, batches included, without what depends on the key's number (its id, name and
        quantity are made from it, and shrinking renumbers the keys)."""
        return (case.mode, case.partitions, tuple(
            dataclasses.replace(c, key=0, name=c.name and c.name.split(".", 1)[-1],
                                qty=None if c.qty is None else c.qty - 10 * c.key) for c in case.stream(key)))

    def known(self, case: Case) -> list[str]:
        return [f"key {k}: {self.problems[self.signature(case, k)]}" for k in case.keys
                if self.signature(case, k) in self.problems]

    def add(self, case: Case, differing: dict[int, str]) -> None:
        for key, problem in differing.items():
            if key in case.keys:
                self.problems[self.signature(case, key)] = problem


def forgetting(spark, case: Case, differences: Differences) -> tuple[dict[int, str], list[str]]:
    """``differences(spark, case)``, Delta's cached table states let go afterwards (``forget_tables``)."""
    try:
        return differences(spark, case)
    finally:
        forget_tables(spark)


def forget_tables(spark) -> None:
    """Drop Delta's cache of table logs (each entry's cached state with it) and Spark's cached data: a soak makes
    two tables a case, and a session that kept them all (Delta keeps a log for an hour after its last use) ran out
    of execution memory after some 175 cases (``UNABLE_TO_ACQUIRE_MEMORY`` in the MERGE's sort)."""
    spark.catalog.clearCache()
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()


def differences(spark, case: Case) -> tuple[dict[int, str], list[str]]:
    """Produce the case batch by batch, run each batch in this process as test_keyed_tables.run does, and compare
    table and ledger with the model after each, then the audit; at the first that differs, the keys that differ
    (key: what) and every difference."""
    topic = helpers.create_topic(helpers.unique(f"keyed-gen-{case.mode}"), partitions=case.partitions)
    config = parse_pipeline(pipeline_dict(case.mode, topic), "test")
    model = KeyedModel(case.mode, topic)

    def after_batch(batch_id: int, records: list[Record]) -> tuple[dict[int, str], list[str]]:
        counts = model.apply_batch(records, batch_id)
        differing = table_problems(case, model, table_rows(config))
        return differing, [*differing.values(), *ledger_problems(topic, batch_id, counts,
                                                                  f"keys {model.last_changes}")]

    return batch_by_batch(spark, case, topic, config, after_batch, lambda: audit_problems(spark, config, case))


def batch_by_batch(spark, case: Case, topic: str, config, after_batch, audit) -> tuple[dict[int, str], list[str]]:
    """Each batch of the case produced and run (``produce_and_run``), then ``after_batch(batch_id, records)``;
    after the last, ``audit()``. Each returns the keys that differ and every difference; the first that differs
    ends the case."""
    for batch_id, records in enumerate(schedule(case), start=1):
        produce_and_run(spark, topic, config, case, records, batch_id)
        differing, problems = after_batch(batch_id, records)
        if problems:
            return differing, [f"after batch {batch_id} of {case.batches}:", *problems]
    differing, problems = audit()
    return differing, (["the audit after the last batch:", *problems] if problems else [])


def produce_and_run(spark, topic: str, config, case: Case, records: list[Record], batch_id: int) -> None:
    """Produce one batch's records to their partitions, plan the batch (it must freeze exactly those offsets, as
    ``batch_id``) and run it in this process."""
    for p in range(case.partitions):
        pairs = [(r.key, r.value) for r in records if r.partition == p]
        if pairs:
            helpers.produce_pairs(topic, pairs, partition=p)
    plan = prepare_batch(config, props())
    expected = {}
    for r in records:
        expected[r.partition] = (expected.get(r.partition, (r.offset,))[0], r.offset + 1)
    frozen = {r.partition: (r.start, r.end) for r in plan.ranges if r.end > r.start}
    assert (plan.batch_id, frozen) == (batch_id, expected), f"the harness: batch {batch_id} froze {frozen}"
    execute_batch(spark, plan, props())


def table_rows(config) -> list[dict]:
    return helpers.query_or_none(config.table_uri, "SELECT * FROM t") or []


def ledger_problems(topic: str, batch_id: int, counts: tuple[int, int, int], changed: str) -> list[str]:
    """The ledger's (inserted, updated, deleted) of the batch when it is not the model's ``counts``, with what
    the model changed (``changed``)."""
    ledger = ledger_changes(topic).get(batch_id)
    return [] if ledger == counts else [f"the ledger says (inserted, updated, deleted) = {ledger}, the model "
                                        f"{counts}: {changed}"]


def only(case: Case, keys: list[int] | None = None, without: int | None = None) -> Case:
    """The case with only ``keys`` (same numbers, so the same partitions), or without its change at index
    ``without``; its batches renumbered where one is left empty."""
    kept = [c for i, c in enumerate(case.changes) if (keys is None or c.key in keys) and i != without]
    return Case(case.mode, case.partitions, compact(kept))


def reduced(spark, case: Case, differing: dict[int, str], differences: Differences) -> list[str]:
    """A smaller case that still differs, each candidate compared by ``differences`` against Spark: the differing
    keys alone, then halves of them down to one key, then without each change it can do without (some 10-20 small
    runs, for the case Hypothesis reports only)."""
    smallest, problems = case, []

    def fails(candidate: Case) -> bool:
        nonlocal smallest, problems
        try:
            found = bool(candidate.changes) and forgetting(spark, candidate, differences)[1]
        except Exception:  # noqa: BLE001 - a candidate that fails otherwise is not the same failure
            return False
        if found:
            smallest, problems = candidate, found
        return bool(found)

    if differing and len(differing) < len(case.keys):
        fails(only(case, sorted(differing)))
    while len(smallest.keys) > 1:
        keys = smallest.keys
        if not any(fails(only(smallest, part)) for part in (keys[:len(keys) // 2], keys[len(keys) // 2:])):
            break
    for i in reversed(range(len(smallest.changes)) if len(smallest.keys) == 1 else ()):
        fails(only(smallest, without=i))
    if smallest is case:
        return ["reduced: no smaller case (fewer keys) differs"]
    return ["reduced, against Spark too: the smallest case found that still differs:", *repr(smallest).splitlines(),
            *problems]


def check(problems: list[str], where: str, when: str) -> None:
    """One assertion for every kind of difference (Hypothesis tells failures apart by where they were raised)."""
    assert not problems, f"{where}{', ' if when else ''}{when}\n" + "\n".join(problems)


def normalized(value):
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value


def stream(case: Case, key: int) -> str:
    return " | ".join(map(repr, case.stream(key))) if key in case.keys else "(no change of this key)"


def table_problems(case: Case, model: KeyedModel, rows: list[dict]) -> dict[int, str]:
    """Each key whose rows differ from the model's row: the key's whole stream, the model's row, the table's."""
    wanted = columns(case.mode)
    held: dict[int, list[dict]] = {}
    for row in rows:
        held.setdefault(row["id"], []).append({c: normalized(row.get(c, "<no such column>")) for c in wanted})
    expected = model.table()
    problems = {}
    for key in sorted(set(held) | set(expected)):
        want, have = expected.get(key), held.get(key, [])
        if have != ([want] if want is not None else []):
            problems[key] = (f"key {key} (partition {case.partition_of(key)}): {stream(case, key)}\n"
                             f"    model: {_row(want)}\n    table: {', '.join(map(_row, have)) or 'no row'}")
    return problems


def _row(row: dict | None) -> str:
    if row is None:
        return "no row"
    return "{" + ", ".join(f"{k}={v.isoformat() if isinstance(v, dt.datetime) else repr(v)}"
                           for k, v in row.items() if k not in ("id", "kafka_topic")) + "}"


def audit_problems(spark, config, case: Case) -> tuple[dict[int, str], list[str]]:
    """The audit: no key twice, nothing outside the committed ranges; and the keyed sample over every key, each
    compared with its newest change in Kafka (no mismatch, no deleted key present). The keys that differ, and
    every problem."""
    problems = []
    report = audit_tables(config.name, config.table_uri, config.dead_letter_uri, tidemark_settings.ledger_uri(),
                          keys=["id"])
    if not report.ok:
        problems.append(f"audit_tables: {report.to_dict()}")
    keys = len(case.keys)
    sample = verify_keys(config, props(), tidemark_settings.ledger_uri(), None, count=keys,
                         rng=random.Random(KNOBS.seed), values=lambda check: compare_keys(spark, check, props()))
    differing = {m["key"]["id"]: (f"audit sample: key {m['key']['id']}: {m['reason']} (its newest change: "
                                  f"{m['change']} at offset {m['offset']} of partition {m['partition']}); "
                                  f"{stream(case, m['key']['id'])}") for m in sample["mismatches"]}
    problems += differing.values()
    deleted = {k: v for k, v in sample.items() if "deleted" in k and v}  # once the sample counts deleted keys held
    if deleted:
        problems.append(f"audit sample: {deleted}")
    if (sample["keys_read"], sample["verified"]) != (keys, keys):
        problems.append(f"audit sample: read {sample['keys_read']} keys and verified {sample['verified']}, not "
                        f"{keys}: {sample}")
    return differing, problems
