"""Fixtures of the object-store modules (test_object_store_server*.py): one set of clients for the run."""

from __future__ import annotations

import uuid

import pytest

from tests.integration.object_store import BUCKET, ENDPOINT, PORT, client


@pytest.fixture(scope="session")
def object_store():
    """boto3 S3 and DynamoDB clients on the running server; fails (never skips) when none answers."""
    try:
        s3 = client("s3")
        s3.head_bucket(Bucket=BUCKET)
    except Exception as exc:  # any failure means the same thing here
        pytest.fail(f"no S3-compatible server with the bucket '{BUCKET}' answers at {ENDPOINT} ({exc}); "
                    f"run `make storage-up` (S3_PORT={PORT}) first")
    return {"s3": s3, "dynamodb": client("dynamodb")}


@pytest.fixture
def prefix() -> str:
    return f"tests/{uuid.uuid4().hex[:12]}"


# The change data capture stack (scripts/cdc.sh: PostgreSQL + Kafka Connect with Debezium), started once per
# session: tests/cdc.py.
from tests.cdc import debezium  # noqa: E402, F401
