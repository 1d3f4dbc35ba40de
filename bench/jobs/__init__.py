"""PySpark scripts of the Spark baselines, submitted with the same spark-submit command as
Tidemark's ingest job (bench.contenders.spark_submit_base)."""
