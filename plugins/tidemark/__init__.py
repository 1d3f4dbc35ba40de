"""Tidemark: exactly-once batch ingestion from Apache Kafka into Delta Lake.

The core package. It is imported by the Airflow DAGs, by the Spark ingest job and by the
``tidemark`` CLI, and it never imports Airflow or Spark at module level.
"""

from __future__ import annotations

__version__ = "0.1.0"
