"""The local S3-compatible server the object-store tests run against (`make storage-up`: moto on
127.0.0.1:$S3_PORT, bucket `lake`): its address and keys, boto3 clients, racing threads, delta-rs options."""

from __future__ import annotations

import os
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PORT = int(os.environ.get("S3_PORT", "9000"))
ENDPOINT = f"http://127.0.0.1:{PORT}"
BUCKET = os.environ.get("S3_BUCKET", "lake")
ACCESS_KEY = os.environ.get("S3_ACCESS_KEY", "tidemark")
SECRET_KEY = os.environ.get("S3_SECRET_KEY", "tidemark-local")
REGION = os.environ.get("S3_REGION", "us-east-1")
RACE_TRIALS, RACERS = 20, 8


def client(service: str):
    import boto3
    from botocore.config import Config

    config = Config(connect_timeout=3, read_timeout=30, retries={"max_attempts": 1},
                    max_pool_connections=RACERS * 2, s3={"addressing_style": "path"})
    return boto3.client(service, endpoint_url=ENDPOINT, region_name=REGION, aws_access_key_id=ACCESS_KEY,
                        aws_secret_access_key=SECRET_KEY, config=config)


def error_code(exc) -> tuple[str, int]:
    return exc.response["Error"]["Code"], exc.response["ResponseMetadata"]["HTTPStatusCode"]


def race(attempt, racers: int = RACERS) -> list:
    """Run ``attempt(i)`` in ``racers`` threads released together; return their results."""
    barrier, results, lock = threading.Barrier(racers), [None] * racers, threading.Lock()

    def run(i: int) -> None:
        barrier.wait()
        outcome = attempt(i)
        with lock:
            results[i] = outcome

    threads = [threading.Thread(target=run, args=(i,)) for i in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def delta_rs_options() -> dict[str, str]:
    """Storage options for deltalake 1.6.6 on this server. Commits are conditional PUTs by default;
    `conditional_put=etag` says so explicitly (and `disabled` makes every commit fail)."""
    return {"AWS_ENDPOINT_URL": ENDPOINT, "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION, "conditional_put": "etag"}
