#!/usr/bin/env bash
# `make soak-keyed`: tests/integration/test_keyed_generated.py with many generated cases (keyed tables against the
# reference model of tests/keyed_model.py) on a fresh private broker (port SOAK_KEYED_KAFKA_PORT, default 19692),
# stopped afterwards. KEYED_CASES (500) cases spread over the six parametrizations (three modes, 1 and 3
# partitions); KEYED_SEED (default: a random one, printed; give it again to repeat a run); KEYED_BATCHES (4) the
# most batches of a case; KEYED_SHRINK=1 shrinks a failing case (against Spark: minutes), left out by default.
# A failing case prints the seed, each key that differs with its changes, and the case. Extra arguments go to
# pytest (-k debezium, say). Prints the count, the seed and the time taken, pass or fail.
set -euo pipefail
cd "$(dirname "$0")/.."
export KEYED_CASES=${KEYED_CASES:-500}
export KEYED_SEED=${KEYED_SEED:-$(( (RANDOM << 15) | RANDOM ))}
export KEYED_BATCHES=${KEYED_BATCHES:-4}
export KEYED_SHRINK=${KEYED_SHRINK:-0}
echo "tidemark: keyed soak: KEYED_CASES=$KEYED_CASES KEYED_SEED=$KEYED_SEED KEYED_BATCHES=$KEYED_BATCHES" \
  "KEYED_SHRINK=$KEYED_SHRINK"
# The run's module time would order the next `make test` by a soak's duration (tests/module_order.py): kept aside
durations=.cache/test-durations.json
kept=
if [ -f "$durations" ]; then kept=$(mktemp); cp -p "$durations" "$kept"; fi
start=$(date +%s)
status=0
# One pytest (one Spark session) per parametrization, on one broker: a session's memory then serves a sixth of the
# cases (tests/integration/test_keyed_generated.py, forget_tables)
scripts/with_broker.sh soak-keyed "${SOAK_KEYED_KAFKA_PORT:-19692}" bash -c '
  for id in position-1p position-3p order_by-1p order_by-3p debezium-1p debezium-3p; do
    echo "tidemark: keyed soak: $id ($(( (KEYED_CASES + 5) / 6 )) cases)"
    code=0
    .venv/bin/python -m pytest -q -p no:cacheprovider -x \
      "tests/integration/test_keyed_generated.py::test_generated_changes_leave_the_table_and_ledger_the_model_computes[$id]" \
      "$@" || code=$?
    [ "$code" -eq 0 ] || [ "$code" -eq 5 ] || exit "$code"  # 5: deselected by the extra arguments (-k ...)
  done' soak "$@" || status=$?
elapsed=$(( $(date +%s) - start ))
if [ -n "$kept" ]; then mv "$kept" "$durations"; else rm -f "$durations"; fi
if [ "$status" -eq 0 ]; then verdict=passed; else verdict="FAILED (exit $status)"; fi
echo "tidemark: keyed soak: $KEYED_CASES cases, KEYED_SEED=$KEYED_SEED, ${elapsed} s: $verdict"
exit "$status"
