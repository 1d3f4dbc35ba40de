"""The soak's fault kinds. Each injector takes the target (the pipeline, run and phase picked by the soak) and
returns a short description of what it did, or None when the fault could not land (no such process at that
moment, or that component still down from the last fault: the soak then draws again). A component a fault
takes down comes back by itself after a random outage, as a service manager would bring it back in
production, in a background thread: the soak goes on meanwhile, so outages of different components may
overlap, never two of the same one."""

from __future__ import annotations

import os
import random
import threading
import time

from bench.chaos import chaos_stack

KINDS = ("celery_worker", "spark_driver", "spark_worker", "s3", "postgres", "kafka_broker")
NEEDS_TASK = {"celery_worker": ("plan", "ingest"), "spark_driver": ("ingest",)}  # else: any run in flight
# The phases a kind may aim at (default: all six); a driver exists only while the ingest job runs.
AIMS = {"spark_driver": ("read", "output commit", "dead letters", "ledger commit", "finalize")}


_down: set[str] = set()  # components whose restart is under way: no second fault on them meanwhile


def _outage(component: str, restart, *args) -> None:
    """``restart`` in the background; the component counts as down until it returns."""
    _down.add(component)

    def run():
        try:
            restart(*args)
        except Exception as exc:
            chaos_stack.log(f"{component} did not come back: {exc}")
        finally:
            _down.discard(component)
    threading.Thread(target=run, daemon=True).start()


def celery_worker(target: dict) -> str | None:
    """kill -9 of the Celery worker running the target's task, its whole session (the task's supervisor,
    the task, its Spark driver); it is started again after 2-10 s, in the background."""
    worker = target.get("worker")
    if worker is None or f"celery-{worker}" in _down or not chaos_stack.worker_processes(worker):
        return None
    killed = chaos_stack.kill_worker(worker)
    outage = random.uniform(2, 10)

    def back():
        time.sleep(outage)
        chaos_stack.start_worker(worker)
    _outage(f"celery-{worker}", back)
    return f"worker-{worker}: {killed} processes killed, restarted after {outage:.0f} s"


def spark_driver(target: dict) -> str | None:
    """kill -9 of the target run's Spark driver (the spark-submit JVM in the ingest task)."""
    drivers = chaos_stack.spark_drivers(target["pipeline"])
    for process in drivers:
        try:
            process.kill()
        except Exception:
            pass
    return f"{len(drivers)} driver JVM(s) killed" if drivers else None


_spark_workers_down: set[int] = set()


def spark_worker(target: dict) -> str | None:
    """kill -9 of a Spark standalone worker (its process group: the Worker JVM and its executors); it is
    started again after 3-15 s in the background. Never both workers at once."""
    up = [w for w in chaos_stack.SPARK_WORKERS if w not in _spark_workers_down]
    if len(up) < len(chaos_stack.SPARK_WORKERS):
        return None
    worker = random.choice(up)
    if not chaos_stack.kill_spark_worker(worker):
        return None
    _spark_workers_down.add(worker)
    outage = random.uniform(3, 15)

    def back():
        try:
            time.sleep(outage)
            chaos_stack.start_spark_worker(worker)
        finally:
            _spark_workers_down.discard(worker)
    _outage(f"spark-{worker}", back)
    return f"spark worker-{worker} killed, restarted after {outage:.0f} s"


def s3(target: dict) -> str | None:
    """The S3 endpoint restarted: the proxy killed -9 (open connections reset), 1-12 s with the port closed
    (connections refused), then listening again."""
    if "s3" in _down:
        return None
    chaos_stack.kill_proxy()
    outage = random.uniform(1, 12)

    def back():
        time.sleep(outage)
        chaos_stack.start_proxy()
    _outage("s3", back)
    return f"S3 endpoint down {outage:.1f} s"


def postgres(target: dict) -> str | None:
    """The metadata DB restarted (scripts/postgres.sh down, 1-8 s, up); Airflow's services that exited on
    the lost connection are started again with airflow.sh up, as the runbook says."""
    if "postgres" in _down:
        return None
    pause = random.uniform(1, 8)
    chaos_stack.script("postgres.sh", "down", timeout=120)

    def back():
        time.sleep(pause)
        chaos_stack.script("postgres.sh", "up", timeout=300)
        time.sleep(5)  # the services notice the restart (or exit) within their heartbeats
        chaos_stack.revive()
    _outage("postgres", back)
    return f"PostgreSQL stopped, up again {pause:.0f} s later"


kafka_lock = threading.Lock()  # no record is produced while the broker is away (see soak.produce)


def kafka_broker(target: dict) -> str | None:
    """kill -9 of the single Kafka broker, 1-8 s down, then scripts/kafka.sh up (its log is on disk). No
    record is produced meanwhile (the restart holds kafka_lock)."""
    if "kafka" in _down:
        return None
    pidfile = os.path.join(os.environ["KAFKA_HOME"], "broker.pid")
    try:
        pid = int(open(pidfile).read())
    except (OSError, ValueError):
        return None
    kafka_lock.acquire()
    try:
        os.kill(pid, 9)
    except OSError:
        kafka_lock.release()
        return None
    pause = random.uniform(1, 8)

    def back():
        try:
            started = time.monotonic()
            while _alive(pid) and time.monotonic() - started < 30:
                time.sleep(0.2)
            time.sleep(pause)
            chaos_stack.script("kafka.sh", "up", timeout=300)
        finally:
            kafka_lock.release()
    _outage("kafka", back)
    return f"broker killed, started again {pause:.0f} s later"


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


INJECT = {"celery_worker": celery_worker, "spark_driver": spark_driver, "spark_worker": spark_worker, "s3": s3,
          "postgres": postgres, "kafka_broker": kafka_broker}
