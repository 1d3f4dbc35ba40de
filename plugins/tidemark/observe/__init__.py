"""What operators watch, computed without Airflow: metrics of a batch and of a pipeline (``measurements``), how
long open transactions have held a partition back and how fresh the output is (``freshness``, read from Kafka and
Delta). The Airflow adapter hands them to Airflow's metrics and alerts; nothing here changes a table.
"""

__all__ = ["freshness", "measurements"]
