"""The ingest job, as the script spark-submit runs (the operator and `tidemark run` submit this file in
a checkout and in the Docker image):

    spark-submit --jars ... --py-files <tidemark core zip> spark_jobs/ingest.py --plan '<frozen plan JSON>'

It runs ``tidemark_spark.ingest_job.run_and_exit``: parse arguments -> build the session -> call the core. A wheel
install, which has no spark_jobs/, submits the installed module ``tidemark_spark/ingest.py`` instead
(``tidemark_spark.submit.INGEST_SCRIPT``).
"""

from tidemark_spark.ingest_job import run_and_exit

if __name__ == "__main__":
    run_and_exit()
