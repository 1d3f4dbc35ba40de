#!/usr/bin/env bash
# Run a command beside a private local service, stopped afterwards whatever happens:
#   scripts/with_service.sh SERVICE PORT COMMAND [ARGS...]
# SERVICE is storage (S3_PORT), registry (REGISTRY_PORT; its SCHEMA_REGISTRY_URL exported to the command) or
# connect (CONNECT_PORT; its SPARK_CONNECT_URL exported): scripts/SERVICE.sh on PORT, stopped first in case
# an earlier run left it behind. Used by the benchmarks and the soak (with scripts/with_broker.sh inside).
set -euo pipefail
cd "$(dirname "$0")/.."
service=$1 port=$2
shift 2
case $service in
  storage) export S3_PORT=$port ;;
  registry) export REGISTRY_PORT=$port ;;
  connect) export CONNECT_PORT=$port ;;
  *) echo "usage: $0 storage|registry|connect PORT COMMAND [ARGS...]" >&2; exit 2 ;;
esac
scripts/$service.sh down >/dev/null 2>&1 || true
trap 'scripts/$service.sh down >/dev/null 2>&1 || true' EXIT
scripts/$service.sh up
if [ "$service" != storage ]; then export "$(scripts/$service.sh env)"; fi
"$@"
