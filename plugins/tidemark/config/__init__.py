"""The pipeline model: one YAML file per pipeline, validated by typed models that reject unknown keys, and the
process settings read from the environment. Pure: no I/O beyond reading the files, no Kafka, no Spark. Errors name
the file, the key and what is accepted (``ConfigError``).

- ``pipeline``: ``PipelineConfig`` and loading the files (``load_pipeline``, ``load_all``);
- ``value_types``: the strict value types of a file (durations, counts, flags, import paths);
- ``error_messages``: what a validation error says;
- ``value_settings``, ``keyed_tables``, ``transforms``, ``maintenance_settings``, ``audit_schedule``,
  ``alerting``: the blocks of a file and the rules between them.

What a setting does lives with its concept (``tidemark.batch`` for a batch's shape, ``tidemark.operations`` for
maintenance); this package only says what a valid file is.
"""

__all__ = ["alerting", "audit_schedule", "error_messages", "keyed_tables", "maintenance_settings", "pipeline",
           "transforms", "value_settings", "value_types"]
