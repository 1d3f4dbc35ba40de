"""Connection arguments for an Airflow whose api-server, scheduler and dag-processor share one SQLite
file (the native-backfill and console tests). Airflow reads them through
``AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS=devkit.airflow_sqlite.CONNECT_ARGS``: a writer waits up
to a minute for another process's write lock instead of failing after SQLite's default 5 s with
"database is locked" (seen in CI when `airflow backfill create` raced the scheduler)."""

CONNECT_ARGS = {"timeout": 60}
