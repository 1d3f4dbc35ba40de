#!/usr/bin/env bash
# `make lint` (also the first step of `make test`): ruff, then the import contracts in pyproject.toml
# ([tool.importlinter]: the core imports no adapter and no Airflow; no two modules of a package import
# each other, directly or through others) checked by import-linter.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
echo "tidemark: lint (ruff, import contract)"
.venv/bin/ruff check plugins spark_jobs dags tests scripts bench devkit
if ! report=$(PYTHONPATH="$root/plugins${PYTHONPATH:+:$PYTHONPATH}" .venv/bin/lint-imports --no-cache 2>&1); then
  echo "$report"
  exit 1
fi
echo "$report" | grep -E "^(Contracts|The |Only |No )" || true
