"""The ingest operator: SparkSubmitOperator with the frozen plan from the plan task and the Kafka
credentials passed in the environment (never on the command line or in rendered templates)."""

from __future__ import annotations

import json
import os
import sys

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from tidemark.commit import BatchPlan
from tidemark.submit import INGEST_SCRIPT, local_spark_env
from tidemark_airflow.connections import kafka_properties


class TidemarkIngestOperator(SparkSubmitOperator):
    """Runs ``spark_jobs/ingest.py`` for the batch the ``plan`` task froze."""

    ui_color = "#e8f4fd"

    def __init__(self, *, kafka_conn_id: str, isolation_level: str, plan_task_id: str = "plan",
                 **kwargs) -> None:
        super().__init__(application=INGEST_SCRIPT, **kwargs)
        self.kafka_conn_id = kafka_conn_id
        self.isolation_level = isolation_level
        self.plan_task_id = plan_task_id

    def execute(self, context):
        plan = BatchPlan.from_json(context["ti"].xcom_pull(task_ids=self.plan_task_id))
        self.log.info("ingesting batch %d of pipeline '%s': %d offsets over %d partitions%s",
                      plan.batch_id, plan.pipeline, plan.total_offsets, len(plan.ranges),
                      " (recovered batch, same frozen ranges)" if plan.recovered else "")
        os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
        self.application_args = ["--plan", plan.to_json(), "--isolation-level", self.isolation_level]
        self.env_vars = {**local_spark_env(), **(self.env_vars or {}),
                         "TIDEMARK_KAFKA_PROPERTIES": json.dumps(kafka_properties(self.kafka_conn_id, plan.pipeline))}
        return super().execute(context)
