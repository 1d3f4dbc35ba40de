"""Pipeline configuration: one YAML file per pipeline, validated by a typed model that rejects
unknown keys. Errors name the file, the field and what is accepted."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from tidemark import settings
from tidemark.config.alerting import FreshnessAlert, LagSettings
from tidemark.config.audit_schedule import AuditSchedule
from tidemark.config.error_messages import describe_error
from tidemark.config.keyed_tables import KeyedConfig, spec
from tidemark.config.maintenance_settings import MaintenanceConfig
from tidemark.config.transforms import TransformSql
from tidemark.config.value_settings import check_value_settings, reads_registry, schema_in_data
from tidemark.config.value_types import Count, Duration, Flag
from tidemark.errors import ConfigError
from tidemark.formats.record_format import RecordFormat
from tidemark.formats.records import BATCH_COLUMNS, DATE_COLUMN, KAFKA_COLUMNS, parse_field_type

NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$"


class PipelineConfig(BaseModel):
    """One pipeline: Kafka topics into one Delta table. Only ``name``, ``topics`` or ``topic_pattern``, ``table``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME_PATTERN)
    """Pipeline name: letters, digits, ``_ . -``. Plays the role of a Kafka consumer group id."""

    topics: list[str] = Field(default_factory=list)
    """Kafka topics to ingest; give ``topics`` or ``topic_pattern``."""

    topic_pattern: str | None = None
    """A regular expression: every topic whose whole name matches it, resolved at each plan."""

    table: str = Field(min_length=1)
    """Output Delta table: relative to ``TIDEMARK_LAKE_ROOT``, or an absolute path or URI."""

    description: str = ""
    """Free text shown in the DAG's documentation."""

    kafka_conn_id: str = "kafka_default"
    """Airflow Connection holding Kafka client properties in ``extra``."""

    spark_conn_id: str = "spark_default"
    """Airflow Connection of the Spark master (``local[2]``, ``spark://host:7077``, ...)."""

    storage_conn_id: str = "aws_default"
    """Airflow Connection of type ``aws`` for tables on ``s3://`` / ``s3a://`` (docs/CONFIGURATION.md); without
    ``aws_default``, credentials come from the default AWS chain (an instance role, say)."""

    starting_offsets: str = "earliest"
    """Where a partition with no committed offset starts: ``earliest``, ``latest``, or an ISO-8601
    date-time (the first offset at or after it; the latest offset when no record is that new)."""

    partition_by: list[str] = Field(default_factory=list)
    """Output partition columns: any output column, or ``kafka_date`` (the UTC date of ``kafka_timestamp``)."""

    on_data_loss: Literal["fail", "skip"] = "fail"
    """What to do when the committed offset has been deleted by retention."""

    isolation_level: Literal["read_committed", "read_uncommitted"] = "read_committed"
    """Kafka isolation level for planning and reading; ``read_committed`` hides aborted records."""

    max_offsets_per_run: Count | None = Field(
        default=None, validation_alias=AliasChoices("max_offsets_per_run", "max_records_per_run"))
    """Cap on the offsets (not records) planned per run, shared fairly across partitions; none by default.
    ``max_records_per_run``, its name before 0.2, is still accepted."""

    schedule: str | None = "@hourly"
    """Airflow schedule (cron or preset); ``null`` for manual runs only."""

    spark_conf: dict[str, str] = Field(default_factory=dict)
    """Extra Spark configuration for the ingest job."""

    kafka_timeout_seconds: Count = 30
    """How long planning waits for Kafka before failing with a clear error (Airflow then retries)."""

    max_offsets_per_spark_task: Count | None = None
    """When set, a partition's range longer than this is read by several Spark tasks (``minPartitions``);
    what is read does not change. Off by default (bench/results/skew.json)."""

    mirror_consumer_group: Flag = True
    """After each committed batch, also commit the offsets to the consumer group named after the pipeline,
    for kafka-consumer-groups and lag monitors (the ledger stays the truth)."""

    value_format: Literal["raw", "json", "avro", "protobuf"] = "raw"
    """``raw`` keeps the value bytes in a ``value`` column; ``json`` parses them into typed columns; ``avro`` and
    ``protobuf`` decode the Confluent wire format with schemas from a Schema Registry into typed columns."""

    value_schema: dict[str, str] | None = None
    """For ``json``: field name -> Spark SQL type (``bigint``, ``double``, ``string``, ``timestamp``,
    ``decimal(10,2)``, ...); a trailing ``?`` makes a field optional."""

    schema_registry_conn_id: str = "schema_registry_default"
    """For ``avro``: Airflow Connection of the Schema Registry's Confluent-compatible API (host: its URL;
    optional login and password for basic auth). Read by the plan task only."""

    value_subject: str | None = None
    """For ``avro``: the registry subject of the values; default ``<topic>-value`` (one topic only)."""

    value_schema_version: Count | None = None
    """For ``avro``: pin the reader schema to this version of the subject; default: its latest version."""

    key_format: Literal["raw", "avro"] = "raw"
    """``raw`` keeps the key bytes in ``kafka_key`` only; ``avro`` also decodes them into a ``key`` column."""

    key_subject: str | None = None
    """For ``key_format: avro``: the registry subject of the keys; default ``<topic>-key``."""

    schema_changes: Literal["additive", "lenient"] = "additive"
    """When the value schema no longer matches the output table: ``additive`` adds new fields and widens
    types (``tidemark.formats.type_changes``), refusing any other change at plan time; ``lenient`` also keeps a removed
    field's column and writes a retyped field into the column's type where the value stays the same."""

    max_value_bytes: Count | None = None
    """Values larger than this are bad records."""

    on_bad_record: Literal["dead_letter", "fail"] = "dead_letter"
    """Bad records go to the dead-letter table within the same batch, or fail it before anything is written."""

    dead_letter_table: str | None = None
    """Dead-letter Delta table; default ``<table>_dead_letters``."""

    retries: int = Field(default=2, ge=0, le=20, strict=True)
    """Airflow retries per task (a retry of the ingest task reads the same frozen ranges)."""

    retry_delay_seconds: Count = 20
    """First retry delay; doubles on each retry (exponential back-off, at most 10 minutes)."""

    lag: LagSettings = Field(default_factory=LagSettings)
    """``hold_warning_after`` (default ``15m``): warn when an open transaction holds records back longer."""

    freshness_sla: Duration | None = Field(default=None, gt=dt.timedelta(0))
    """When set (``2h``): an Airflow Deadline Alert on each run calls ``freshness_alert`` when the output's
    newest record is older than this (``tidemark_airflow.alerts``)."""

    freshness_alert: FreshnessAlert = Field(default_factory=FreshnessAlert)
    """The callback of a missed ``freshness_sla``: ``callback`` (dotted path) and its ``kwargs``."""

    audit: AuditSchedule | None = None
    """The scheduled audit (DAG ``tidemark_audit__<name>``): ``every`` (its schedule) and ``verify_sample``; none
    by default (``tidemark.config.audit_schedule``)."""

    keyed: KeyedConfig | None = None
    """Records upsert or delete the row of their key (``tidemark.config.keyed_tables``); none: append."""

    transform: TransformSql | None = None
    """One Spark SQL SELECT over ``records`` (the batch's decoded records), applied before the write
    (``tidemark.config.transforms``); none: records land as decoded."""

    maintenance: MaintenanceConfig | None = None
    """Table maintenance by the DAG ``tidemark_maintenance__<name>``: ``optimize_every`` (its schedule),
    ``zorder_by`` and ``vacuum_retain`` (at least 168h); none by default (``tidemark.config.maintenance_settings``)."""

    @field_validator("topics")
    @classmethod
    def _topics_are_distinct_names(cls, topics: list[str]) -> list[str]:
        for topic in topics:
            if not topic or len(topic) > 249 or not all(c.isalnum() or c in "._-" for c in topic):
                raise ValueError(f"'{topic}' is not a valid Kafka topic name (letters, digits, . _ -)")
        if len(set(topics)) != len(topics):
            raise ValueError("topics are listed more than once")
        return topics

    @field_validator("value_schema", mode="before")
    @classmethod
    def _no_type_split_at_a_comma(cls, schema: object) -> object:
        """``{id: bigint, amount: decimal(22,2)}`` in YAML's flow style splits at the comma into ``amount:
        'decimal(22'`` and ``'2)': null``: say so, instead of pydantic's 'value_schema.2): a valid string'."""
        if isinstance(schema, dict):
            split = [(n, t) for n, t in schema.items() if isinstance(t, str) and t.count("(") > t.count(")")]
            if split:
                name, kind = split[0]
                raise ValueError(f"field '{name}' has the type '{kind}', cut at a comma: in YAML's flow style "
                                 f"({{a: x, b: y}}) a comma ends the entry, so a type that holds one must be quoted, "
                                 f"{name}: '{kind},...)' (for example amount: 'decimal(22,2)')")
        return schema

    @field_validator("schedule")
    @classmethod
    def _schedule_is_cron(cls, schedule: str | None) -> str | None:
        from croniter import croniter

        if schedule is not None and not croniter.is_valid(schedule):
            raise ValueError(f"'{schedule}' is not a cron expression or preset (for example '*/15 * * * *', "
                             "'@hourly', '@daily'); use null for manual runs only")
        return schedule

    @field_validator("topic_pattern")
    @classmethod
    def _pattern_compiles(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"'{pattern}' is not a valid regular expression ({exc})") from None
        return pattern

    @field_validator("starting_offsets")
    @classmethod
    def _start_is_known(cls, value: str) -> str:
        if value not in ("earliest", "latest"):
            try:
                dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                raise ValueError(f"'{value}' is not 'earliest', 'latest' or an ISO-8601 date-time "
                                 "(for example 2026-01-31T00:00:00Z)") from None
        return value

    @model_validator(mode="after")
    def _topics_or_pattern(self) -> PipelineConfig:
        if bool(self.topics) == bool(self.topic_pattern):
            raise ValueError("give exactly one of 'topics' (a list of names) or 'topic_pattern' (a regular "
                             "expression)")
        return self

    @model_validator(mode="after")
    def _partition_columns_exist(self) -> PipelineConfig:
        payload = ["value"] if self.value_format == "raw" else list(self.value_schema or {})
        allowed = [*KAFKA_COLUMNS, *payload, *BATCH_COLUMNS, DATE_COLUMN]
        planned = self.value_format in ("avro", "protobuf") or self.transform or schema_in_data(self)
        for column in self.partition_by:
            if column not in allowed and not planned:  # else the columns are known when a batch is planned
                raise ValueError(f"partition_by: '{column}' is not an output column (one of {', '.join(allowed)})")
        if len(set(self.partition_by)) != len(self.partition_by):
            raise ValueError("partition_by lists a column more than once")
        return self

    @model_validator(mode="after")
    def _tables_are_distinct(self) -> PipelineConfig:
        """Output, dead letters and ledger are three tables: one written as another would break the markers."""
        locations = (self.table_uri, self.dead_letter_uri, settings.ledger_uri())
        output, dead, ledger = (settings.same_location(u) for u in locations)
        if dead == output:
            raise ValueError(f"dead_letter_table resolves to the output table ({self.table_uri}); give the dead "
                             f"letters a location of their own, or leave dead_letter_table out (default: "
                             f"{self.table.rstrip('/')}_dead_letters)")
        if ledger in (output, dead):
            field = "table" if ledger == output else "dead_letter_table"
            raise ValueError(f"{field} resolves to the offset ledger ({settings.ledger_uri()}); choose another "
                             f"location")
        named = {"table": output, "dead_letter_table": dead, "the offset ledger": ledger}
        for inner, inner_uri in named.items():
            for outer, outer_uri in named.items():
                if inner_uri.startswith(outer_uri + "/"):
                    raise ValueError(f"{inner} ({inner_uri}) lies inside {outer} ({outer_uri}): the maintenance "
                                     f"VACUUM of one table would delete the other's files; give each a location "
                                     f"outside the others")
        return self

    @model_validator(mode="after")
    def _maintenance_fits(self) -> PipelineConfig:
        if self.maintenance is not None:
            payload = ["value"] if self.value_format == "raw" else list(self.value_schema or {})
            fixed = self.value_format in ("avro", "protobuf") or self.transform or schema_in_data(self)  # at plan
            columns = None if fixed else [*KAFKA_COLUMNS, *payload, *BATCH_COLUMNS]
            self.maintenance.check(self.name, self.partition_by, columns)
        return self

    @property
    def start_time(self) -> dt.datetime | None:
        """``starting_offsets`` as a UTC date-time, when it is one."""
        if self.starting_offsets in ("earliest", "latest"):
            return None
        when = dt.datetime.fromisoformat(self.starting_offsets.replace("Z", "+00:00"))
        return when if when.tzinfo else when.replace(tzinfo=dt.UTC)

    def select_topics(self, available: set[str]) -> list[str]:
        """The listed topics (checked by the caller), or every topic whose whole name matches ``topic_pattern``."""
        if self.topics:
            return list(self.topics)
        pattern = re.compile(self.topic_pattern or "")
        return sorted(t for t in available if pattern.fullmatch(t) and not t.startswith("__"))

    @property
    def topics_label(self) -> str:
        return ", ".join(self.topics) if self.topics else f"topics matching /{self.topic_pattern}/"

    @model_validator(mode="after")
    def _schema_goes_with_json(self) -> PipelineConfig:
        check_value_settings(self)
        return self

    @property
    def record_format(self) -> RecordFormat:
        fields = tuple(parse_field_type(n, t) for n, t in (self.value_schema or {}).items())
        return RecordFormat(self.value_format, fields, self.max_value_bytes, self.on_bad_record,
                            keyed=spec(self.keyed) if self.keyed else None, transform=self.transform,
                            schema_changes=self.schema_changes)

    @property
    def uses_registry(self) -> bool:
        """Whether batches freeze schemas from a Schema Registry (Avro values or keys, JSON Schema values)."""
        return self.key_format == "avro" or reads_registry(self.value_format, self.value_subject)

    @property
    def dead_letter_uri(self) -> str:
        return settings.resolve_table_uri(self.dead_letter_table or f"{self.table.rstrip('/')}_dead_letters")

    @property
    def locations(self) -> list[str]:
        """Every Delta table the pipeline touches: output, dead letters, ledger."""
        return [self.table_uri, self.dead_letter_uri, settings.ledger_uri()]

    @property
    def table_uri(self) -> str:
        """The output table's absolute location."""
        return settings.resolve_table_uri(self.table)


def parse_pipeline(data: object, source: str) -> PipelineConfig:
    """Validate already-parsed YAML; ``source`` names the file in error messages."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of keys (name, topics, table), got {type(data).__name__}")
    if "max_offsets_per_run" in data and "max_records_per_run" in data:
        raise ConfigError(f"{source}: 'max_records_per_run' is the old name of 'max_offsets_per_run': give only "
                          f"max_offsets_per_run")
    try:
        return PipelineConfig.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(describe_error(e, PipelineConfig) for e in exc.errors())
        raise ConfigError(f"{source}: {problems}") from None


def load_pipeline(path: Path) -> PipelineConfig:
    """Read and validate one pipeline file."""
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc.strerror}") from None
    config = parse_pipeline(data, str(path))
    if config.name != path.stem:
        raise ConfigError(f"{path}: 'name' is '{config.name}' but the file is named '{path.name}'; "
                          f"name the file '{config.name}.yaml'")
    return config


def pipeline_files(folder: Path | None = None) -> list[Path]:
    """The pipeline YAML files in the folder, sorted."""
    folder = folder or settings.pipelines_dir()
    return sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")])


def load_all(folder: Path | None = None) -> tuple[dict[str, PipelineConfig], dict[str, ConfigError]]:
    """Every pipeline in the folder: the valid ones by name, and the errors by file. Pipelines that write
    one table (output or dead letters) are all errors of their own files: which one owns the data is for
    the user to say, and either would break the other's markers and counts."""
    good: dict[str, tuple[Path, PipelineConfig]] = {}
    bad: dict[str, ConfigError] = {}
    for path in pipeline_files(folder):
        try:
            config = load_pipeline(path)
        except ConfigError as exc:
            bad[str(path)] = exc
            continue
        good[config.name] = (path, config)
    writers: dict[str, list[str]] = {}
    for name, (_, config) in good.items():
        for uri in dict.fromkeys(settings.same_location(u) for u in (config.table_uri, config.dead_letter_uri)):
            writers.setdefault(uri, []).append(name)
    for uri, names in writers.items():
        for name in names if len(names) > 1 else []:
            entry = good.pop(name, None)
            if entry is not None:
                path, others = entry[0], ", ".join(f"'{n}'" for n in names if n != name)
                bad[str(path)] = ConfigError(f"{path}: writes the table {uri}, which pipeline(s) {others} write too; "
                                             f"give each pipeline tables of its own (they would share one table's "
                                             f"markers and counts)", pipeline=name)
    return {name: config for name, (_, config) in good.items()}, bad


def find_pipeline(name: str, folder: Path | None = None) -> PipelineConfig:
    """The pipeline called ``name``, or a ConfigError that lists the known ones."""
    folder = folder or settings.pipelines_dir()
    for path in pipeline_files(folder):
        if path.stem == name:
            return load_pipeline(path)
    known = ", ".join(p.stem for p in pipeline_files(folder)) or "none"
    raise ConfigError(f"no pipeline '{name}' in {folder} (known: {known})")
