#!/usr/bin/env bash
# Run a command against a fresh private Kafka broker, stopped afterwards whatever happens:
#   scripts/with_broker.sh NAME PORT COMMAND [ARGS...]
# The broker's data lives in .cache/kafka-NAME and is wiped first; a broker that cannot start
# fails the command. Used by `make test` and `make soak`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export KAFKA_HOME=$root/.cache/kafka-$1
export KAFKA_PORT=$2
shift 2
source scripts/env.sh
scripts/kafka.sh down >/dev/null 2>&1 || true
rm -rf "$KAFKA_HOME"
scripts/kafka.sh up
trap 'scripts/kafka.sh down >/dev/null 2>&1 || true' EXIT
"$@"
