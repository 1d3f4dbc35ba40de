"""`make chaos` (issue 26): a soak of at least CHAOS_FAULTS (100) random faults into a stream of DAG runs on
the CeleryExecutor stack (`make airflow EXECUTOR=celery`: two Celery workers, Redis, PostgreSQL), a Spark
standalone cluster (a master, two workers) and the lake on the local S3 server, with records produced
before every run, then exactly-once checked on every output table against everything produced and against
the ledger.

- soak.py: the pipelines, the stream of runs (back to back on every pipeline) and the fault loop;
- faults.py: the fault kinds (Celery worker, Spark driver, Spark worker, S3 endpoint, PostgreSQL, Kafka);
- phase.py: the phase of the run a fault hit (how it is decided);
- audit.py: the exactly-once verdict; report.py: bench/results/chaos.json and docs/chaos.png;
- stack.py: the stack's REST API and processes; proxy.py: the restartable S3 endpoint.
"""
