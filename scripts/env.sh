# Sourced by the make targets: the environment Tidemark's local stack runs in.
# Every value can be overridden from the caller's environment.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$root/.venv/bin:$PATH"
export KAFKA_PORT=${KAFKA_PORT:-9092}
export TIDEMARK_LAKE_ROOT=${TIDEMARK_LAKE_ROOT:-$root/lake}
export TIDEMARK_PIPELINES_DIR=${TIDEMARK_PIPELINES_DIR:-$root/dags/pipelines}
export TIDEMARK_JAR_CACHE=${TIDEMARK_JAR_CACHE:-$root/.cache/jars}
export AIRFLOW_HOME=${AIRFLOW_HOME:-$root/.cache/airflow}
export AIRFLOW__CORE__DAGS_FOLDER=${AIRFLOW__CORE__DAGS_FOLDER:-$root/dags}
export AIRFLOW__CORE__PLUGINS_FOLDER=${AIRFLOW__CORE__PLUGINS_FOLDER:-$root/plugins}
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__UNIT_TEST_MODE=${AIRFLOW__CORE__UNIT_TEST_MODE:-False}
export AIRFLOW__LOGGING__LOGGING_LEVEL=${AIRFLOW__LOGGING__LOGGING_LEVEL:-INFO}
export AIRFLOW_CONN_KAFKA_DEFAULT=${AIRFLOW_CONN_KAFKA_DEFAULT:-"{\"conn_type\": \"kafka\", \"extra\": {\"bootstrap.servers\": \"127.0.0.1:$KAFKA_PORT\"}}"}
spark_submit_connection='{"conn_type": "spark", "host": "local[2]"}'  # the default (scripts/airflow.sh reads it too)
export AIRFLOW_CONN_SPARK_DEFAULT=${AIRFLOW_CONN_SPARK_DEFAULT:-$spark_submit_connection}
export SPARK_HOME=${SPARK_HOME:-$("$root/.venv/bin/python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')}
export PYSPARK_PYTHON=${PYSPARK_PYTHON:-$root/.venv/bin/python}
