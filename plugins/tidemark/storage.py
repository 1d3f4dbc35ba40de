"""Where tables live: the local disk, or object storage (``s3://`` and ``s3a://``, AWS S3 or an
S3-compatible store such as MinIO).

Credentials and the endpoint of object storage come from an Airflow connection of type ``aws``
(``storage_conn_id``, default ``aws_default``), following the Amazon provider: the access key in
``login``, the secret in ``password``, ``endpoint_url``, ``region_name`` and ``aws_session_token``
in ``extra``. A connection without keys leaves credentials to the default AWS chain (an instance
role, say). The run (``tidemark.run``) reads the connection once; every Delta table the core
opens with delta-rs is opened with the store it is handed (``open_table(uri, store)``,
``Ledger(uri, store)``): there is no process-wide setting, so two pipelines on different stores can
be served side by side. Nothing here puts a secret on a command line: the Spark job receives the
same settings in an environment variable.

Safe commits: delta-rs commits with a conditional PUT (``If-None-Match: *``) on S3, which AWS S3
and MinIO honour, so two writers can never both take one table version. Settings that turn that
off are refused (``check_safe_commits``).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from tidemark.connections import Connection, ConnectionResolver
from tidemark.errors import ConfigError, StorageLocationError, StorageUnavailableError, TidemarkError

log = logging.getLogger(__name__)

OBJECT_STORE_SCHEMES = ("s3://", "s3a://")
ENV_VAR = "TIDEMARK_STORAGE_OPTIONS"
"""How the Spark job receives the object-store settings (JSON), like TIDEMARK_KAFKA_PROPERTIES."""

DEFAULT_CONN_ID = "aws_default"

# delta-rs options that would let two writers take the same table version on S3.
_UNSAFE = {"conditional_put": "disabled", "aws_conditional_put": "disabled"}

LOG_STORE = "io.tidemark.delta.S3ConditionalPutLogStore"
"""Tidemark's Delta log store for Spark on S3 (jvm/logstore, built by ``make jars``): every commit
file is created with S3's conditional PUT (``If-None-Match: *``), so two writers can never both
take one table version."""
SAFE_LOG_STORES = {LOG_STORE, "io.delta.storage.S3DynamoDBLogStore"}
"""Delta log stores for Spark that give mutual exclusion on S3. Delta's default for ``s3a://``
(``S3SingleDriverLogStore``) is safe only with a single writer, which a retried or stale driver
next to a new run is not."""


def is_object_store(uri: str | None) -> bool:
    """Whether a table location is on object storage."""
    return bool(uri) and uri.lower().startswith(OBJECT_STORE_SCHEMES)


def delta_rs_uri(uri: str) -> str:
    """The spelling delta-rs uses: ``s3a://`` (Hadoop's name) becomes ``s3://``; the same objects."""
    return "s3://" + uri[len("s3a://"):] if uri.lower().startswith("s3a://") else uri


def spark_uri(uri: str) -> str:
    """The spelling Spark's S3A filesystem uses: ``s3://`` becomes ``s3a://``."""
    return "s3a://" + uri[len("s3://"):] if uri.lower().startswith("s3://") else uri


@dataclass(frozen=True)
class ObjectStore:
    """The settings of one object store, from an ``aws`` connection."""

    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    region: str = "us-east-1"
    endpoint_url: str | None = None
    """None for AWS S3 itself; ``http://host:port`` for MinIO or another S3-compatible store."""

    @classmethod
    def from_connection(cls, conn: Connection) -> ObjectStore:
        extra = dict(conn.extra or {})
        known = {"endpoint_url", "region_name", "aws_session_token"}
        if conn.conn_type not in (None, "aws"):
            raise ConfigError(f"connection '{conn.conn_id}' is of type '{conn.conn_type}'; object storage needs a "
                              f"connection of type 'aws' (access key in login, secret in password, endpoint_url "
                              f"and region_name in extra)")
        if bool(conn.login) != bool(conn.password):
            half = "an access key but no secret" if conn.login else "a secret but no access key"
            raise ConfigError(f"connection '{conn.conn_id}' has {half}: set both (login, password), or neither to "
                              f"use the default AWS credential chain")
        unknown = sorted(set(extra) - known)
        if unknown:
            raise ConfigError(f"connection '{conn.conn_id}': unknown extra field(s) {', '.join(unknown)} "
                              f"(accepted: {', '.join(sorted(known))})")
        endpoint = extra.get("endpoint_url") or None
        if endpoint is not None and not str(endpoint).startswith(("http://", "https://")):
            raise ConfigError(f"connection '{conn.conn_id}': endpoint_url '{endpoint}' needs a scheme: "
                              f"http://{endpoint} (or https://)")
        return cls(conn.login or None, conn.password or None, extra.get("aws_session_token") or None,
                   str(extra.get("region_name") or "us-east-1"), endpoint)

    def delta_rs_options(self) -> dict[str, str]:
        """Storage options for delta-rs (``DeltaTable(..., storage_options=...)``)."""
        options = {"AWS_REGION": self.region}
        if self.endpoint_url:
            options["AWS_ENDPOINT_URL"] = self.endpoint_url
            if self.endpoint_url.startswith("http://"):
                options["AWS_ALLOW_HTTP"] = "true"
        if self.access_key_id:
            options["AWS_ACCESS_KEY_ID"] = self.access_key_id
            options["AWS_SECRET_ACCESS_KEY"] = self.secret_access_key or ""
        if self.session_token:
            options["AWS_SESSION_TOKEN"] = self.session_token
        options["conditional_put"] = "etag"  # put-if-absent commits (delta-rs' default, stated)
        return options

    def secrets(self) -> list[str]:
        return [s for s in (self.secret_access_key, self.session_token) if s]

    def to_json(self) -> str:
        return json.dumps({"access_key_id": self.access_key_id, "secret_access_key": self.secret_access_key,
                           "session_token": self.session_token, "region": self.region,
                           "endpoint_url": self.endpoint_url})

    @classmethod
    def from_json(cls, text: str) -> ObjectStore:
        return cls(**json.loads(text))


def spark_conf(store: ObjectStore | None, *, secrets: bool) -> dict[str, str]:
    """Spark configuration for tables on object storage: the S3A filesystem for both spellings,
    Tidemark's put-if-absent log store, the endpoint and region and, with ``secrets``, the keys.
    The secrets are set only inside the job's own session builder (never on a command line); Spark
    redacts them in its UI and event log (``spark.redaction.regex``)."""
    store = store or ObjectStore()
    conf = {"spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
            "spark.delta.logStore.s3a.impl": LOG_STORE, "spark.delta.logStore.s3.impl": LOG_STORE,
            "spark.hadoop.fs.s3a.endpoint.region": store.region}
    if store.endpoint_url:
        conf["spark.hadoop.fs.s3a.endpoint"] = store.endpoint_url
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"  # MinIO and most S3-compatible stores
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(store.endpoint_url.startswith("https://")).lower()
    if secrets and store.access_key_id:
        conf["spark.hadoop.fs.s3a.access.key"] = store.access_key_id
        conf["spark.hadoop.fs.s3a.secret.key"] = store.secret_access_key or ""
        if store.session_token:
            conf["spark.hadoop.fs.s3a.session.token"] = store.session_token
            conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = (
                "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider")
    return conf


def check_spark_commits(conf: Mapping[str, str | None], uris: Iterable[str | None], where: str) -> None:
    """Refuse a Spark configuration that would commit to a Delta table on object storage with a log
    store that is not put-if-absent (Delta's default single-driver store, say): two drivers of one
    batch could then both commit it."""
    for uri in uris:
        if not is_object_store(uri):
            continue
        for scheme in ("s3a", "s3"):
            store = conf.get(f"spark.delta.logStore.{scheme}.impl")
            if store not in SAFE_LOG_STORES:
                raise ConfigError(
                    f"{where}: table {uri} is on object storage, but Spark's Delta log store for {scheme}:// is "
                    f"{store or 'Delta default (S3SingleDriverLogStore, safe for one writer only)'}; a retried or "
                    f"stale driver could then commit the same batch twice. Remove "
                    f"spark.delta.logStore.{scheme}.impl from spark_conf (Tidemark sets {LOG_STORE}) or set it "
                    f"to io.delta.storage.S3DynamoDBLogStore")


def check_safe_commits(options: Mapping[str, str], where: str) -> None:
    """Refuse delta-rs settings under which two writers could both commit one table version."""
    for key, bad in _UNSAFE.items():
        if str(options.get(key, "")).lower() == bad:
            raise ConfigError(f"{where}: '{key}: {bad}' turns off put-if-absent commits on object storage, and "
                              f"exactly-once rests on them; remove it (delta-rs then commits with a conditional PUT)")
    if str(options.get("AWS_S3_ALLOW_UNSAFE_RENAME", "")).lower() == "true":
        raise ConfigError(f"{where}: AWS_S3_ALLOW_UNSAFE_RENAME lets two writers overwrite each other's commits; "
                          f"remove it")


def object_store(resolver: ConnectionResolver, conn_id: str = DEFAULT_CONN_ID,
                 pipeline: str | None = None) -> ObjectStore:
    """The object store of an ``aws`` connection, its secrets registered with the resolver's masker.
    Without the default connection (``aws_default``), credentials come from the default AWS chain
    (environment, instance role), as the Amazon provider does; a named connection must exist."""
    try:
        conn = resolver.get(conn_id, pipeline)
    except ConfigError:
        if conn_id != DEFAULT_CONN_ID:
            raise
        log.warning("no connection '%s': object storage credentials come from the default AWS chain (AWS_* "
                    "variables, an instance role); the endpoint is AWS S3", conn_id)
        return ObjectStore(region=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
                           or "us-east-1")
    try:
        store = ObjectStore.from_connection(conn)
    except ConfigError as exc:
        raise ConfigError(exc.detail, pipeline=pipeline) from None
    resolver.mask(store.secrets())
    return store


def store_for(locations: Iterable[str | None], resolver: ConnectionResolver, conn_id: str = DEFAULT_CONN_ID,
              pipeline: str | None = None) -> ObjectStore | None:
    """The object store a pipeline's tables (output, dead letters, ledger) need: read from the storage
    connection when any of them is on object storage, else None (the local disk needs none)."""
    return object_store(resolver, conn_id, pipeline) if any(is_object_store(u) for u in locations) else None


def delta_options(uri: str, store: ObjectStore | None) -> dict[str, str] | None:
    """delta-rs storage options for a table location: None on the local disk. On object storage,
    ``store`` (None: the default AWS chain and endpoint)."""
    if not is_object_store(uri):
        return None
    options = (store or ObjectStore()).delta_rs_options()
    check_safe_commits(options, f"table {uri}")
    return options


def open_table(uri: str, store: ObjectStore | None = None):
    """The Delta table at ``uri`` (delta-rs), or None when there is none. ``store`` is needed for a
    table on object storage. A storage failure is raised as Tidemark's error (``storage_failure``)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(delta_rs_uri(uri), storage_options=delta_options(uri, store))
    except TableNotFoundError:
        return None
    except OSError as exc:
        raise storage_failure(exc, uri, store) from None


def storage_failure(exc: OSError, uri: str, store: ObjectStore | None, pipeline: str | None = None) -> TidemarkError:
    """Tidemark's error for an I/O failure of delta-rs on a table (it raises ``OSError`` for every
    object-store failure): the location is checked again with typed answers (``check_location``), so
    a missing bucket or refused credentials is terminal and names the cause; anything else is
    transient (the store did not answer, or failed one request)."""
    if is_object_store(uri):
        check_location(uri, store, pipeline)  # raises StorageLocationError when the location is wrong
    return StorageUnavailableError(f"object storage failed a request on table {uri} ({type(exc).__name__}); "
                                   f"nothing was committed past the last completed step, and a retry resumes "
                                   f"from there", pipeline=pipeline, location=uri)



def check_location(uri: str | None, store: ObjectStore | None, pipeline: str | None = None) -> None:
    """Refuse a table location on object storage that cannot work, before anything is frozen: a bucket
    that does not exist, credentials the store refuses or that are missing (an endpoint that does not answer
    is transient: StorageUnavailableError). One HEAD
    request per call, whose answer is typed (botocore's error codes); terminal StorageLocationError
    naming the table, the bucket, the endpoint and what to fix. Local paths are not checked."""
    if not is_object_store(uri):
        return
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError, NoCredentialsError

    store = store or ObjectStore()
    bucket = urlsplit(uri).netloc
    endpoint = store.endpoint_url or "AWS S3"
    client = boto3.client("s3", endpoint_url=store.endpoint_url, region_name=store.region,
                          aws_access_key_id=store.access_key_id, aws_secret_access_key=store.secret_access_key,
                          aws_session_token=store.session_token,
                          config=Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 2}))
    try:
        client.head_bucket(Bucket=bucket)
    except ClientError as exc:
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = exc.response.get("Error", {}).get("Code")
        if status == 404 or code in ("NoSuchBucket", "404"):
            cause = (f"bucket '{bucket}' does not exist at {endpoint}. Fix the table's location in the pipeline "
                     f"file (or TIDEMARK_LAKE_ROOT), or create the bucket")
        elif status in (401, 403):
            cause = (f"{endpoint} refused the storage connection's credentials for bucket '{bucket}' ({code}). "
                     f"Fix the access key and secret of the storage connection, or grant them the bucket")
        elif status in (301, 400):  # a signature for another region (AuthorizationHeaderMalformed, PermanentRedirect)
            cause = (f"{endpoint} answered {status} ({code}) for bucket '{bucket}': the storage connection's region "
                     f"({store.region}) is most likely not the bucket's. Set region_name in the storage connection's "
                     f"extra to the bucket's region")
        else:
            raise StorageUnavailableError(f"object storage at {endpoint} answered {status} ({code}) for bucket "
                                          f"'{bucket}' of table {uri}; retry once it answers", pipeline=pipeline,
                                          location=uri) from None
        raise StorageLocationError(f"table {uri}: {cause}. Nothing was frozen or written.", pipeline=pipeline,
                                   location=uri) from None
    except EndpointConnectionError:
        # Indistinguishable, from here, from a store that is restarting: transient, so the task's retries ride
        # out an outage (make chaos), and the message says what to check when it lasts.
        raise StorageUnavailableError(f"table {uri}: the endpoint {endpoint} does not answer; the task retries. If "
                                      f"it keeps failing, check endpoint_url of the storage connection. Nothing was "
                                      f"frozen or written past the last completed step.", pipeline=pipeline,
                                      location=uri) from None
    except NoCredentialsError:
        raise StorageLocationError(f"table {uri}: no credentials were found (storage connection without keys and no "
                                   f"AWS chain). Check the keys of the storage connection. Nothing was frozen or "
                                   f"written.", pipeline=pipeline, location=uri) from None
    except BotoCoreError as exc:
        raise StorageUnavailableError(f"object storage at {endpoint} failed for table {uri} ({type(exc).__name__}); "
                                      f"retry once it answers", pipeline=pipeline, location=uri) from None
