"""docker-compose.yaml cannot be run here (no Docker engine); check its structure instead."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())
SERVICES = COMPOSE["services"]
AIRFLOW = ["airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"]


def test_every_component_is_a_service():
    assert set(SERVICES) == {"postgres", "kafka", "minio", "minio-init", "spark-master", "spark-worker",
                             "airflow-init", *AIRFLOW}


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_images_are_pinned(name):
    image = SERVICES[name]["image"]
    assert re.fullmatch(r"[\w./-]+:(\d|RELEASE\.\d)[\w.-]*", image), \
        f"{name}: image '{image}' is not pinned to a version"


@pytest.mark.parametrize("name", sorted(set(SERVICES) - {"airflow-init", "minio-init"}))
def test_long_running_services_have_health_checks(name):
    assert SERVICES[name]["healthcheck"]["test"]


def test_tidemark_image_is_built_from_the_lock_file():
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert "requirements.lock" in dockerfile and "fetch_jars.sh" in dockerfile and "openjdk-17" in dockerfile
    assert SERVICES["airflow-scheduler"]["build"]["dockerfile"] == "docker/Dockerfile"


@pytest.mark.parametrize("name", AIRFLOW)
def test_airflow_mounts_the_code_and_wires_connections_by_environment(name):
    service = SERVICES[name]
    mounts = {m.split(":")[1] for m in service["volumes"]}
    assert {"/opt/tidemark/dags", "/opt/tidemark/plugins", "/opt/tidemark/spark_jobs"} <= mounts
    env = service["environment"]
    kafka = json.loads(env["AIRFLOW_CONN_KAFKA_DEFAULT"])
    assert kafka["extra"]["bootstrap.servers"] == "kafka:9092"
    spark = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert spark["conn_type"] == "spark" and spark["host"] == "spark://spark-master"
    assert "postgres" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert service["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert service["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"


def test_the_scheduler_starts_once_the_execution_api_answers():
    # A task the scheduler queues before the api-server answers fails without running (scripts/airflow.sh
    # orders its services the same way).
    assert SERVICES["airflow-scheduler"]["depends_on"]["airflow-apiserver"]["condition"] == "service_healthy"
    assert "airflow-apiserver" not in SERVICES["airflow-apiserver"]["depends_on"]


def test_kafka_is_a_single_kraft_node():
    env = SERVICES["kafka"]["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == 1


def test_the_lake_is_on_minio_through_the_aws_default_connection():
    for name in AIRFLOW:
        env = SERVICES[name]["environment"]
        assert env["TIDEMARK_LAKE_ROOT"].startswith("s3a://lake/")
        aws = json.loads(env["AIRFLOW_CONN_AWS_DEFAULT"])
        assert aws["conn_type"] == "aws" and aws["extra"]["endpoint_url"] == "http://minio:9000"
        assert (aws["login"], aws["password"]) == (SERVICES["minio"]["environment"]["MINIO_ROOT_USER"],
                                                   SERVICES["minio"]["environment"]["MINIO_ROOT_PASSWORD"])
        assert SERVICES[name]["depends_on"]["minio-init"]["condition"] == "service_completed_successfully"
    assert "mb --ignore-existing local/lake" in SERVICES["minio-init"]["command"][0]
    assert not [m for m in SERVICES["spark-worker"]["volumes"] if "lake" in m], "workers share no lake folder"


def test_the_documented_login_is_the_one_airflow_reads():
    """Without a passwords file, Airflow's simple auth manager generates a password inside the
    container and the README's admin/admin fails. The file is mounted into every Airflow service
    and holds the password of each configured login."""
    env = SERVICES["airflow-apiserver"]["environment"]
    target = env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]
    for name in AIRFLOW:
        sources = {v.split(":")[1]: v.split(":")[0] for v in SERVICES[name]["volumes"]}
        assert target in sources, f"{name} does not mount the passwords file at {target}"
    passwords = json.loads((ROOT / sources[target]).read_text())
    logins = [u.split(":")[0] for u in env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"].split(",")]
    assert logins == ["admin"] and passwords == {"admin": "admin"}
    assert "http://localhost:8080 (admin/admin" in (ROOT / "README.md").read_text()
