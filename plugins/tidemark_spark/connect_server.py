"""The warm path's Spark Connect server, as ``scripts/connect.sh up`` starts it:

    spark-submit --conf spark.plugins=org.apache.spark.sql.connect.SparkConnectPlugin \
        --conf spark.sql.artifact.isolation.enabled=false ... plugins/tidemark_spark/connect_server.py

A Spark driver that serves Spark Connect through Spark's own plugin, then waits until it is told to stop
(SIGTERM or SIGINT) or its JVM is gone. It imports nothing of Tidemark: the server runs whatever its clients
send; the jobs bring their own code.

Why not Spark's ``SparkConnectServer`` main: it forces ``spark.sql.artifact.isolation.enabled=true``, which gives
every Connect session a class loader of its own, and Spark keys the classes it generates for a plan (the code of a
projection, a scan, an aggregation) by class loader (SPARK-44795). A warm-path batch is a new session, so every
batch compiled again all the code its plan needs: Delta's rebuild of the output table's state, the Kafka read, the
Parquet write. With isolation off, sessions share the driver's class loader and a class is compiled once per
server (docs/BENCHMARKS.md, *Small batches belong on the warm path*). Isolation only concerns what a client uploads
to its session (jars, class files, Python files: ``addArtifacts``); Tidemark's jobs upload nothing, and each session
keeps its own settings, temporary views and operations. A server shared with clients that do upload artifacts should
keep Spark's own main (``$SPARK_HOME/sbin/start-connect-server.sh``): the jobs run there too, compiling per batch.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading

log = logging.getLogger("tidemark.connect_server")

PARENT_POLL_S = 1.0
"""How often the driver looks whether its JVM (spark-submit, its parent) is still there."""


def serve(stopped: threading.Event, parent_alive) -> None:
    """Wait until ``stopped`` is set (a signal) or ``parent_alive()`` turns false (the JVM died: nothing is served
    any more, and the process must not outlive it)."""
    while not stopped.wait(PARENT_POLL_S):
        if not parent_alive():
            log.warning("the Spark Connect server's JVM is gone; its Python driver exits too")
            return


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()  # the plugin starts the Connect service with the SparkContext
    isolation = spark.conf.get("spark.sql.artifact.isolation.enabled")
    log.info("Spark Connect server up (artifact isolation of sessions: %s)", isolation)
    stopped = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopped.set())
    parent = os.getppid()
    serve(stopped, lambda: os.getppid() == parent)
    with contextlib.suppress(Exception):  # the JVM may be shutting down on the same signal
        spark.stop()


if __name__ == "__main__":
    main()
