"""Helpers for tests against the real broker and real Delta tables: the local stack's tools in
`devkit.localstack`, shared with the soak."""

from devkit.localstack import (  # noqa: F401
    S3_ACCESS_KEY,
    S3_SECRET_KEY,
    StandaloneCluster,
    at_ms,
    aws_connection,
    bootstrap,
    create_topic,
    describe_group,
    end_offsets,
    free_port,
    past_ms,
    produce,
    produce_at_times,
    produce_values,
    query,
    query_or_none,
    s3_endpoint,
    s3_lake,
    service_env,
    start_holding_run,
    table_version,
    txn_version,
    unique,
)
