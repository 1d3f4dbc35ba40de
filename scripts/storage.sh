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
source "$(dirname "$0")/lib/service.sh"
port=${S3_PORT:-9000}
home=${S3_HOME:-$root/.cache/s3-$port}
bucket=${S3_BUCKET:-lake}
access_key=${S3_ACCESS_KEY:-tidemark}
secret_key=${S3_SECRET_KEY:-tidemark-local}
region=${S3_REGION:-us-east-1}
py=${VENV:-$root/.venv}/bin/python
endpoint=http://127.0.0.1:$port
service=storage pidfile=$home/server.pid logfile=$home/logs/server.log where="on $endpoint"
start_timeout=${S3_START_TIMEOUT:-60}

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

answers() { aws_call 's3.list_buckets()'; }

ensure_bucket() {
  aws_call "
try:
    s3.head_bucket(Bucket=bucket)
except s3.exceptions.ClientError:
    s3.create_bucket(Bucket=bucket)
" >"$home/logs/bucket.log" 2>&1 \
    || { echo "storage: creating the bucket '$bucket' failed; see $home/logs/bucket.log" >&2; tail -5 "$home/logs/bucket.log" >&2; return 1; }
}

cmd_env() {
  cat <<ENV
AWS_ENDPOINT_URL=$endpoint
AWS_ACCESS_KEY_ID=$access_key
AWS_SECRET_ACCESS_KEY=$secret_key
AWS_REGION=$region
S3_BUCKET=$bucket
ENV
}

cmd_up() {
  service_already_up && return 0
  "$py" -c 'import moto.moto_server.werkzeug_app, boto3' 2>/dev/null \
    || { echo "storage: moto[server] or boto3 is missing from the venv ($py); run make setup" >&2; exit 1; }
  service_port_free "$port" S3_PORT
  mkdir -p "$home/logs" "$home/tmp"
  # moto spools large object bodies to temporary files: keep them under .cache, not /tmp.
  service_launch "$home" env TMPDIR="$home/tmp" MOTO_PORT="$port" "$py" -c "$launcher" "$port"
  service_await_start
  ensure_bucket
  echo "storage: S3-compatible server (moto) ready on $endpoint (pid $(service_pid), logs in $home/logs)"
  echo "storage: bucket '$bucket', region $region, access key '$access_key', secret key '$secret_key' (local values; DynamoDB on the same endpoint)"
}

cmd_down() {
  service_down "(its buckets and tables were in memory and are gone)"
  rm -rf "$home/tmp"
}

service_main "up|down|status|wait|env" "$@"
