"""The data of `make bench-keyed` (bench/keyed_changes.py): its sizes and settings, the starting rows and the
changes (drawn from one seed, so every contender reads the same), and how they are produced into Kafka."""

from __future__ import annotations

import collections
import logging
import os
import random
import subprocess
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from bench.knobs import ROOT, BenchSettings, _int

log = logging.getLogger("bench")


JOB = str(ROOT / "bench" / "jobs" / "keyed_merge.py")
RESULT_FILE = "keyed.json"
DOC = ROOT / "docs" / "BENCHMARKS.md"
TITLE = "## Keyed tables: MERGE against AvailableNow"
TARGET_PREFIX = "| keyed table"
VALUE_SCHEMA = {"id": "bigint", "name": "string?", "qty": "int?", "price": "double?", "op": "string?"}
KEYED = {"keys": ["id"], "delete_field": "op", "delete_values": ["delete"]}
DELETE_SHARE = 0.10
EXISTING_SHARE = 2 / 3
BOOKKEEPING = ("ingest_batch_id", "ingested_at")
KEYED_PHASES = (("startup", r"batch \d+: reading \d+ offsets"), ("read_tally_check_merge", r"batch \d+ merged into "),
                ("ledger_commit", r"batch \d+ committed in the ledger"))
TIDEMARK, NOW = "tidemark_keyed", "available_now_merge"
LABELS = {TIDEMARK: "Tidemark keyed batch (plan + spark-submit), one MERGE",
          NOW: "Structured Streaming AvailableNow, foreachBatch MERGE (txnAppId/txnVersion)"}
MERGE_METRICS = ("numSourceRows", "numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted",
                 "numTargetRowsCopied", "numTargetFilesAdded", "numTargetFilesRemoved", "executionTimeMs",
                 "scanTimeMs", "rewriteTimeMs", "numOutputRows")
PARTS = ("compare", "replay", "growth")


@dataclass(frozen=True)
class Sizes:
    changes: int
    keys: int
    table_rows: int
    big_rows: int
    repeats: int
    big_baseline: bool
    event_log: bool

    @classmethod
    def from_env(cls) -> Sizes:
        sizes = cls(changes=_int("BENCH_KEYED_CHANGES", 2_000_000), keys=_int("BENCH_KEYED_KEYS", 200_000),
                    table_rows=_int("BENCH_KEYED_TABLE_ROWS", 1_000_000),
                    big_rows=_int("BENCH_KEYED_BIG_ROWS", 5_000_000), repeats=_int("BENCH_KEYED_REPEATS", 1),
                    big_baseline=os.environ.get("BENCH_KEYED_BIG_BASELINE", "0") == "1",
                    event_log=os.environ.get("BENCH_KEYED_EVENT_LOG", "1") != "0")
        if round(sizes.keys * EXISTING_SHARE) > sizes.table_rows:
            raise SystemExit("BENCH_KEYED_KEYS: two thirds of the keys must be rows of the table "
                             f"(BENCH_KEYED_TABLE_ROWS={sizes.table_rows:,})")
        if sizes.big_rows and sizes.big_rows <= sizes.table_rows:
            raise SystemExit("BENCH_KEYED_BIG_ROWS must be larger than BENCH_KEYED_TABLE_ROWS (0: no growth part)")
        return sizes



# --- the data ------------------------------------------------------------------------------------

def _key(k: int) -> bytes:
    return b'{"id":%d}' % k


def _upsert(k: int, name: str, qty: int, price: float) -> bytes:
    return b'{"id":%d,"name":"%s","qty":%d,"price":%.2f,"op":"upsert"}' % (k, name.encode(), qty, price)


def _delete(k: int) -> bytes:
    return b'{"id":%d,"name":null,"qty":null,"price":null,"op":"delete"}' % k


def _initial(k: int) -> tuple[str, int, float]:
    return f"init-{k}", k % 1000, (k % 10_000) / 100


def initial_rows(ids: Iterable[int]) -> Iterator[tuple[bytes, bytes]]:
    for k in ids:
        yield _key(k), _upsert(k, *_initial(k))


@dataclass
class Changes:
    """The changes, generated in a fixed order from a seed, and the reference they make: per key of the
    pool, its row at the end (None: deleted). Built independently of the product."""

    sizes: Sizes
    pool: list[int] = field(default_factory=list)
    existing: set[int] = field(default_factory=set)
    final: dict[int, tuple[str, int, float] | None] = field(default_factory=dict)
    mix: collections.Counter = field(default_factory=collections.Counter)

    def __post_init__(self) -> None:
        rng = random.Random(39)
        n_existing = round(self.sizes.keys * EXISTING_SHARE)
        existing = rng.sample(range(self.sizes.table_rows), n_existing)
        new_from = max(self.sizes.big_rows, self.sizes.table_rows)
        self.pool = existing + list(range(new_from, new_from + self.sizes.keys - n_existing))
        self.existing = set(existing)

    def records(self) -> Iterator[tuple[bytes, bytes | None]]:
        rng, present, pool, final, mix = random.Random(40), set(self.existing), self.pool, self.final, self.mix
        final.clear()
        mix.clear()
        for i in range(self.sizes.changes):
            k = pool[rng.randrange(len(pool))]
            origin = "on_existing_keys" if k in self.existing else "on_new_keys"
            if rng.random() < DELETE_SHARE:
                tombstone = rng.random() < 0.5
                mix["delete" if k in present else "delete_of_absent_key"] += 1
                mix["tombstones" if tombstone else "delete_ops"] += 1
                present.discard(k)
                final[k] = None
                yield _key(k), None if tombstone else _delete(k)
            else:
                mix["update" if k in present else "insert"] += 1
                mix[f"upserts_{origin}"] += 1
                present.add(k)
                row = (f"c{i}", rng.randrange(10_000), rng.randrange(100_000) / 100)
                final[k] = row
                yield _key(k), _upsert(k, *row)

    def expected_rows(self, table_rows: int) -> int:
        """Rows of a table of ``table_rows`` starting rows once every change is applied."""
        gone = sum(1 for k, row in self.final.items() if row is None and k in self.existing)
        born = sum(1 for k, row in self.final.items() if row is not None and k not in self.existing)
        return table_rows - gone + born

    def described(self) -> dict:
        n = self.sizes.changes
        return {"changes": n, "keys": len(self.pool), "keys_held_by_the_table": len(self.existing),
                "new_keys": len(self.pool) - len(self.existing), "counts": dict(sorted(self.mix.items())),
                "shares": {k: round(v / n, 4) for k, v in sorted(self.mix.items())}, "keys_touched": len(self.final),
                "keys_deleted_at_the_end": sum(1 for r in self.final.values() if r is None)}


PRODUCER_PROPERTIES = {"acks": "1", "linger.ms": "50", "batch.size": str(512 * 1024), "compression.type": "none"}


def produce(settings: BenchSettings, topic: str, records: Iterable[tuple[bytes, bytes | None]]) -> dict:
    """Send every (key, value) to ``topic``, batched and lingering, one flush at the end: by Kafka's own
    ConsoleProducer fed through a pipe (BENCH_KEYED_PRODUCER=console, the default: a tab between key and
    value, ``NULL`` for a tombstone) or by kafka-python (``kafka-python``). Both place a key by murmur2, as
    every Kafka client does. Checks that the topic then holds that many more records."""
    from bench import data

    before = sum(data.end_offsets(settings, topic).values())
    how = os.environ.get("BENCH_KEYED_PRODUCER", "console")
    started = time.perf_counter()
    sent = _console_produce(settings, topic, records) if how == "console" else _python_produce(settings, topic,
                                                                                                records)
    seconds = time.perf_counter() - started
    offsets = data.end_offsets(settings, topic)
    if sum(offsets.values()) - before != sent:
        raise RuntimeError(f"topic {topic} holds {sum(offsets.values()) - before} new records, expected {sent}")
    return {"records": sent, "producer": how, "seconds": round(seconds, 1),
            "records_per_second": round(sent / seconds), "end_offsets": offsets}


def _console_produce(settings: BenchSettings, topic: str, records: Iterable[tuple[bytes, bytes | None]]) -> int:
    from bench.data import KAFKA_SH

    command = [KAFKA_SH, "run-class", "org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server",
               settings.bootstrap, "--topic", topic, "--property", "parse.key=true", "--property",
               "key.separator=\t", "--property", "null.marker=NULL"]
    for key, value in PRODUCER_PROPERTIES.items():
        command += ["--producer-property", f"{key}={value}"]
    out = settings.work / "logs" / f"producer-{topic}.log"
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("ab") as sink:
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=sink, stderr=subprocess.STDOUT)
    sent, chunk = 0, []
    try:
        for key, value in records:
            chunk.append(key + b"\t" + (b"NULL" if value is None else value))
            if len(chunk) == 10_000:
                proc.stdin.write(b"\n".join(chunk) + b"\n")
                sent, chunk = sent + len(chunk), []
        if chunk:
            proc.stdin.write(b"\n".join(chunk) + b"\n")
            sent += len(chunk)
        proc.stdin.close()
    except BrokenPipeError:
        pass
    if proc.wait() != 0:
        raise RuntimeError(f"ConsoleProducer failed ({proc.returncode}):\n{out.read_text(errors='replace')[-3000:]}")
    return sent


def _python_produce(settings: BenchSettings, topic: str, records: Iterable[tuple[bytes, bytes | None]]) -> int:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=settings.bootstrap, acks=1, linger_ms=50, batch_size=512 * 1024,
                             max_request_size=4 * 2**20, retries=5)
    sent, send = 0, producer.send
    try:
        for key, value in records:
            send(topic, key=key, value=value)
            sent += 1
        producer.flush()
    finally:
        producer.close()
    return sent
