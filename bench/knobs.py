"""The benchmark's knobs (environment variables) and where it keeps its files."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / ".venv" / "bin"
RESULTS = Path(os.environ.get("BENCH_RESULTS", str(ROOT / "bench" / "results")))
"""BENCH_RESULTS: another folder for the results of a trial run (the committed ones stay the measurements)."""


def save_result(name: str, out: dict) -> Path:
    """Write one benchmark's results to bench/results/<name> (or BENCH_RESULTS/<name>), indented JSON."""
    import json

    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / name
    path.write_text(json.dumps(out, indent=2, default=str) + "\n")
    return path


def _int(name: str, default: int) -> int:
    return int(os.environ.get(name, str(default)).replace("_", "").replace(",", ""))


@dataclass(frozen=True)
class BenchSettings:
    records: int
    record_bytes: int
    partitions: int
    repeats: int
    master: str
    driver_memory: str
    ledger_sizes: tuple[int, ...]
    ledger_small_commits: int
    work: Path
    kafka_port: int

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def lake(self) -> Path:
        return self.work / "lake"

    @property
    def pipelines(self) -> Path:
        return self.work / "pipelines"

    @property
    def airflow_home(self) -> Path:
        return self.work / "airflow"

    @property
    def megabytes(self) -> float:
        """Payload volume of the backlog in MB (2^20 bytes, as Kafka's perf tools count)."""
        return self.records * self.record_bytes / 2**20

    @classmethod
    def from_env(cls) -> BenchSettings:
        sizes = os.environ.get("BENCH_LEDGER_SIZES", "10,1000,10000")
        return cls(
            records=_int("BENCH_RECORDS", 2_000_000),
            record_bytes=_int("BENCH_RECORD_BYTES", 300),
            partitions=_int("BENCH_PARTITIONS", 8),
            repeats=_int("BENCH_REPEATS", 3),
            master=os.environ.get("BENCH_SPARK_MASTER", "local[2]"),
            driver_memory=os.environ.get("BENCH_DRIVER_MEMORY", "1g"),
            ledger_sizes=tuple(int(s) for s in sizes.split(",") if s.strip()),
            ledger_small_commits=_int("BENCH_LEDGER_SMALL_COMMITS", 1000),
            work=Path(os.environ.get("BENCH_WORK", str(ROOT / ".cache" / "bench"))),
            kafka_port=_int("KAFKA_PORT", 19292),
        )
