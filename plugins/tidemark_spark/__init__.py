"""The Spark adapter: the ingest job Spark runs (``ingest``) and the spark-submit command line that
launches it outside Airflow (``submit``). Both are thin; the protocol lives in ``tidemark.batch``."""
