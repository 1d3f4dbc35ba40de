#!/usr/bin/env bash
# `make soak-keyed` / `make soak-history`: the generated cases of tests/integration/test_keyed_generated.py (keyed
# tables against the reference model of tests/keyed_model.py) or, with `history` as the first argument, of
# tests/integration/test_history_generated.py (history tables against tests/history_model.py), many of them, on a
# fresh private broker (port SOAK_KEYED_KAFKA_PORT, default 19692), stopped afterwards.
# Keyed: KEYED_CASES (500) cases spread over six parametrizations (three modes, 1 and 3 partitions); history:
# HISTORY_CASES (200) over four (order_by and Debezium, 1 and 3 partitions). <PREFIX>_SEED (default: a random one,
# printed; give it again to repeat a run); <PREFIX>_BATCHES (4) the most batches of a case; <PREFIX>_SHRINK=1
# shrinks a failing case (against Spark: minutes), left out by default. A failing case prints the seed, each key that
# differs with its changes, and the case. Further arguments go to pytest (-k debezium, say). Prints the count, the
# seed and the time taken, pass or fail.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = history ]; then
  shift
  kind=history prefix=HISTORY default_cases=200 ids="order_by-1p order_by-3p debezium-1p debezium-3p"
  test=tests/integration/test_history_generated.py::test_generated_changes_leave_the_history_and_ledger_the_model_computes
else
  kind=keyed prefix=KEYED default_cases=500 ids="position-1p position-3p order_by-1p order_by-3p debezium-1p debezium-3p"
  test=tests/integration/test_keyed_generated.py::test_generated_changes_leave_the_table_and_ledger_the_model_computes
fi
cases_var=${prefix}_CASES seed_var=${prefix}_SEED batches_var=${prefix}_BATCHES shrink_var=${prefix}_SHRINK
export "$cases_var=${!cases_var:-$default_cases}"
export "$seed_var=${!seed_var:-$(( (RANDOM << 15) | RANDOM ))}"
export "$batches_var=${!batches_var:-4}"
export "$shrink_var=${!shrink_var:-0}"
echo "tidemark: $kind soak: $cases_var=${!cases_var} $seed_var=${!seed_var} $batches_var=${!batches_var}" \
  "$shrink_var=${!shrink_var}"
# The run's module time would order the next `make test` by a soak's duration (tests/module_order.py): kept aside
durations=.cache/test-durations.json
kept=
if [ -f "$durations" ]; then kept=$(mktemp); cp -p "$durations" "$kept"; fi
start=$(date +%s)
status=0
# One pytest (one Spark session) per parametrization, on one broker: a session's memory then serves its share of
# the cases (tests/integration/test_keyed_generated.py, forget_tables)
count=$(wc -w <<<"$ids")
scripts/with_broker.sh "soak-$kind" "${SOAK_KEYED_KAFKA_PORT:-19692}" bash -c '
  kind=$1 test=$2 ids=$3 cases=$4 count=$5
  shift 5
  for id in $ids; do
    echo "tidemark: $kind soak: $id ($(( (cases + count - 1) / count )) cases)"
    code=0
    .venv/bin/python -m pytest -q -p no:cacheprovider -x "$test[$id]" "$@" || code=$?
    [ "$code" -eq 0 ] || [ "$code" -eq 5 ] || exit "$code"  # 5: deselected by the extra arguments (-k ...)
  done' soak "$kind" "$test" "$ids" "${!cases_var}" "$count" "$@" || status=$?
elapsed=$(( $(date +%s) - start ))
if [ -n "$kept" ]; then mv "$kept" "$durations"; else rm -f "$durations"; fi
if [ "$status" -eq 0 ]; then verdict=passed; else verdict="FAILED (exit $status)"; fi
echo "tidemark: $kind soak: ${!cases_var} cases, $seed_var=${!seed_var}, ${elapsed} s: $verdict"
exit "$status"
