#!/usr/bin/env bash
# A local S3-compatible server (moto's server, from the venv) on 127.0.0.1, with the bucket `lake`.
#   scripts/storage.sh up | down | status | wait | env
# The same port also speaks DynamoDB (moto serves every AWS API on one endpoint).
# Environment: S3_PORT (9000), S3_HOME (.cache/s3-<port>: logs, pid, spooled object data),
# S3_BUCKET (lake), S3_ACCESS_KEY (tidemark) / S3_SECRET_KEY (tidemark-local) / S3_REGION
# (us-east-1): fixed local values, not secrets. moto accepts any signed request; clients must
# still sign (SigV4) with some key pair and use the same region, since DynamoDB tables are per region.
# State lives in the server's memory: `down` (or a crash) empties every bucket and table.
# `up` is idempotent: a live server is left alone, a stale pid file is cleared.
#
# Why a launcher instead of plain `moto_server`: moto checks `If-None-Match: *` (S3) and
# `ConditionExpression` (DynamoDB) and then writes, in two steps, on a threaded server. Two racing
# writers can then both "win", which real S3 and DynamoDB never allow and which exactly-once
# commits rest on. The launcher runs moto's own WSGI app but lets one state-changing request
# (any method but GET/HEAD/OPTIONS; every DynamoDB call is a POST) run at a time.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
port=${S3_PORT:-9000}
home=${S3_HOME:-$root/.cache/s3-$port}
bucket=${S3_BUCKET:-lake}
access_key=${S3_ACCESS_KEY:-tidemark}
secret_key=${S3_SECRET_KEY:-tidemark-local}
region=${S3_REGION:-us-east-1}
py=${VENV:-$root/.venv}/bin/python
pidfile=$home/server.pid
endpoint=http://127.0.0.1:$port

read -r -d '' launcher <<'PY' || true
import os, signal, sys, threading
from werkzeug.serving import run_simple
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app

app = DomainDispatcherApplication(create_backend_app)
writes = threading.Lock()
READS = {"GET", "HEAD", "OPTIONS"}

def serialized(environ, start_response):
    if environ.get("REQUEST_METHOD") in READS:
        return app(environ, start_response)
    with writes:  # check-and-write as one step, as on AWS
        return list(app(environ, start_response))

signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
run_simple("127.0.0.1", int(sys.argv[1]), serialized, threaded=True, request_handler=MotoRequestHandler)
PY

is_running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

aws_call() {  # aws_call PYTHON_SNIPPET: run boto3 code with `s3` and `ddb` clients bound to the server
  AWS_ACCESS_KEY_ID=$access_key AWS_SECRET_ACCESS_KEY=$secret_key "$py" - "$endpoint" "$region" "$bucket" <<PY
import sys, boto3
from botocore.config import Config
endpoint, region, bucket = sys.argv[1:4]
cfg = Config(connect_timeout=2, read_timeout=10, retries={"max_attempts": 1}, s3={"addressing_style": "path"})
s3 = boto3.client("s3", endpoint_url=endpoint, region_name=region, config=cfg)
$1
PY
}

wait_ready() {  # until the server answers an S3 call, or fail loudly
  local deadline=$((SECONDS + ${S3_START_TIMEOUT:-60}))
  while [ $SECONDS -lt $deadline ]; do
    if ! is_running; then
      echo "storage: the server exited during start-up; last log lines:" >&2
      tail -30 "$home/logs/server.log" 2>/dev/null >&2
      return 1
    fi
    if aws_call 's3.list_buckets()' >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.5
  done
  echo "storage: the server did not answer on $endpoint within ${S3_START_TIMEOUT:-60}s; see $home/logs" >&2
  return 1
}

ensure_bucket() {
  aws_call "
try:
    s3.head_bucket(Bucket=bucket)
except s3.exceptions.ClientError:
    s3.create_bucket(Bucket=bucket)
" >"$home/logs/bucket.log" 2>&1 \
    || { echo "storage: creating the bucket '$bucket' failed; see $home/logs/bucket.log" >&2; tail -5 "$home/logs/bucket.log" >&2; return 1; }
}

print_env() {
  cat <<ENV
AWS_ENDPOINT_URL=$endpoint
AWS_ACCESS_KEY_ID=$access_key
AWS_SECRET_ACCESS_KEY=$secret_key
AWS_REGION=$region
S3_BUCKET=$bucket
ENV
}

up() {
  if is_running; then
    echo "storage: already running on $endpoint (pid $(cat "$pidfile")), bucket '$bucket'"
    return 0
  fi
  rm -f "$pidfile"
  "$py" -c 'import moto.moto_server.werkzeug_app, boto3' 2>/dev/null \
    || { echo "storage: moto[server] or boto3 is missing from the venv ($py); run make setup" >&2; exit 1; }
  if "$py" - "$port" <<'PY' 2>/dev/null; then
import socket, sys
s = socket.socket(); s.settimeout(1)
sys.exit(0 if s.connect_ex(("127.0.0.1", int(sys.argv[1]))) == 0 else 1)
PY
    echo "storage: something else already listens on 127.0.0.1:$port; set S3_PORT to a free port" >&2
    exit 1
  fi
  mkdir -p "$home/logs" "$home/tmp"
  # moto spools large object bodies to temporary files: keep them under .cache, not /tmp.
  TMPDIR="$home/tmp" MOTO_PORT=$port nohup "$py" -c "$launcher" "$port" >"$home/logs/server.log" 2>&1 &
  echo $! >"$pidfile"
  wait_ready
  ensure_bucket
  echo "storage: S3-compatible server (moto) ready on $endpoint (pid $(cat "$pidfile"), logs in $home/logs)"
  echo "storage: bucket '$bucket', region $region, access key '$access_key', secret key '$secret_key' (local values; DynamoDB on the same endpoint)"
}

down() {
  if ! is_running; then echo "storage: not running"; rm -f "$pidfile"; return 0; fi
  local pid; pid=$(cat "$pidfile")
  kill "$pid"
  for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  rm -f "$pidfile"
  rm -rf "$home/tmp"
  echo "storage: stopped (its buckets and tables were in memory and are gone)"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) if is_running; then echo "storage: running on $endpoint (pid $(cat "$pidfile"))"; else echo "storage: not running"; exit 1; fi ;;
  wait) wait_ready ;;
  env) print_env ;;
  *) echo "usage: $0 up|down|status|wait|env" >&2; exit 2 ;;
esac
