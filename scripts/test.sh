#!/usr/bin/env bash
# `make test`: lint, then the unit, integration and end-to-end tests against a fresh broker of
# their own (port TEST_KAFKA_PORT, default 19092), stopped afterwards. Extra arguments go to pytest
# instead of the default `tests` (for example: scripts/test.sh -q tests/integration -k replay).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if [ "${1:-}" != "--inside" ]; then
  port=${TEST_KAFKA_PORT:-19092}
  exec scripts/with_broker.sh "test-$port" "$port" scripts/test.sh --inside "$@"
fi
shift
scripts/lint.sh
echo "tidemark: tests (unit, integration, e2e) against the broker on 127.0.0.1:$KAFKA_PORT"
if [ $# -eq 0 ]; then set -- tests; fi
.venv/bin/python -m pytest "$@"
