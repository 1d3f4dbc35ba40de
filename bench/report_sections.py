"""The sections of docs/BENCHMARKS.md for the benchmark parts that run as programs of their own (skew, profile,
scale, typed values, the warm path, object storage, the page, TLS, the ledger under contention, the fleet,
the audit, the read path, class-data sharing, maintenance and the ledger's size), and the table helpers every
section uses. bench/report.py puts them on the page."""

from __future__ import annotations


def _n(value: float | None, digits: int = 0) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _range(s: dict, digits: int = 0) -> str:
    return f"{_n(s['median'], digits)} ({_n(s['min'], digits)}–{_n(s['max'], digits)})"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _section(title: str, text: str, *tables: str) -> str:
    return "\n\n".join([f"## {title}", text, *tables])


# --- the sections --------------------------------------------------------------------------------


def skew(part_: dict) -> str:
    m, backlog = part_["summary"], part_["backlog"]
    rows = [[label, str(c["runs"]), f"{c['median_seconds']} ({c['min_seconds']}–{c['max_seconds']})",
             f"{c['median_records_per_second']:,}", f"{c['median_machine_busy_share']:.0%}",
             _n(c["median_job_cpu_seconds"], 1)]
            for key, label in (("split", f"split at {part_.get('split_offsets', 500000):,} offsets per task"),
                               ("one_task_per_partition", "one Spark task per partition"))
            for c in [m[key]]]
    return _section(
        "Skew", f"{part_['date']}: {backlog['records']:,} records, {backlog['hot_share']:.0%} of them on one of "
        f"{len(backlog['records_per_partition'])} partitions, `{part_['master']}`. Split speed-up "
        f"**x{m['split_speedup']}**. *Machine busy*: the share of all cores in use during the job.",
        _table(["read", "runs", "seconds", "records/s", "machine busy", "job CPU s"], rows))


def profile(part_: dict) -> str:
    job, plain = part_["summary"]["tidemark_job"], part_["summary"]["plain_batch"]
    keys = (("wall_seconds", "whole run"), ("jvm_start_to_first_job_seconds", "JVM: start to the first Spark job"),
            ("jobs_seconds", "JVM: Spark jobs"), ("task_cpu_seconds", "JVM: tasks' CPU, summed"),
            ("task_gc_seconds", "JVM: tasks' GC, summed"))
    rows = [[label, _n(job[k], 1), _n(plain[k], 1)] for k, label in keys]
    rows += [[f"Python driver: {label}", _n(v, 2), _n(plain["python_spans"].get(label), 2)]
             for label, v in job["python_spans"].items()]
    return _section(
        "Profile of the raw path",
        f"{part_['date']}: {part_['backlog']['records']:,} records, {len(part_['runs']) // 2} runs each, with "
        f"Spark's event log and py-spy ({part_['sample_rate']} samples/s); medians, seconds. Python spans are "
        "inclusive and overlap.", _table(["", "Tidemark ingest job", "plain batch"], rows))


def scale(part_: dict) -> str:
    m = part_["summary"]
    rows = [[f"{int(size):,}", str(c["runs"]), _n(c["median_seconds"], 1), _n(c["median_records_per_second"]),
             f"{_n(c['median_peak_jvm_rss_mb'])} (max {_n(c['max_peak_jvm_rss_mb'])})",
             _n(c["median_python_driver_rss_mb"]), _n(c["median_peak_tree_rss_mb"])]
            for size, c in sorted(m["sizes"].items(), key=lambda kv: int(kv[0]))]
    return _section(
        "Scale", f"{part_['date']}: one batch of each size from one topic (`max_offsets_per_run`), `{part_['master']}`,"
        f" driver memory {part_['driver_memory']}. Largest / smallest: throughput **x{m['throughput_ratio']}**, "
        f"driver JVM RSS **x{m['jvm_rss_ratio']}**, Python driver RSS x{m['python_rss_ratio']}.",
        _table(["records", "runs", "seconds", "records/s", "driver JVM peak RSS, MB", "Python driver RSS, MB",
                "process tree RSS, MB"], rows))


def typed(part_: dict, title: str) -> str:
    m, s, backlog = part_["summary"], part_["settings"], part_["backlog"]
    rows = [[c["label"], f"{c['median_seconds']} ({c['min_seconds']}–{c['max_seconds']})",
             f"{c['median_records_per_second']:,}", f"{c['median_mb_per_second']}", f"{c['median_peak_tree_rss_mb']:,}"]
            for c in m["contenders"].values()]
    phases = ", ".join(f"{p} {v} s" for p, v in m.get("tidemark_phases", {}).items())
    return _section(
        title, f"{part_['date']}: {backlog['records']:,} records ({s['record_bytes']} bytes, "
        + (f"{backlog['poison']:,} of them poison: {', '.join(backlog['poison_kinds'])}" if backlog["poison"]
           else "none of them poison") + f") on {backlog['partitions']} partitions, "
        f"`{s['master']}`, {s['repeats']} runs each. Ratios: "
        + ", ".join(f"{k} **x{v}**" for k, v in m["ratios"].items())
        + f". Tidemark's plan call: {m.get('tidemark_plan_seconds')} s" + (f"; its phases: {phases}." if phases
                                                                           else "."),
        _table(["contender", "seconds", "records/s", "MB/s", "peak RSS, MB"], rows))


def small_batch(part_: dict) -> str:
    m = part_["summary"]
    rows = [[label, f"{c['median_seconds']} ({c['min_seconds']}–{c['max_seconds']})", str(c["runs"]),
             str(c["jvms_started_per_batch"]), f"{c['median_peak_tree_rss_mb']:,}"]
            for label, c in (("spark-submit", m["spark-submit"]), ("warm path (Spark Connect)", m["spark-connect"]))]
    return _section(
        "Small batches: the warm path", f"{part_['date']}: batches of {part_['records_per_batch']:,} records on "
        f"{part_['partitions']} partitions, the ingest job alone, alternating; the Spark Connect server on "
        f"`{part_['server']['master']}` (its memory is not in the job's RSS). Warm path **x{m['warm_speedup']}**; "
        f"the server's first batch took {m['first_warm_batch_seconds']} s.",
        _table(["launcher", "job seconds", "batches", "JVMs started per batch", "peak RSS of the job, MB"], rows))


def ledger_contention(part_: dict) -> str:
    b = part_["burst"]
    burst = [["freeze (plan read + compare-and-commit)", *(str(b["freeze"][k]) for k in ("median_ms", "p95_ms",
                                                                                          "max_ms"))],
             ["commit flip (merge)", *(str(b["commit"][k]) for k in ("median_ms", "p95_ms", "max_ms"))]]
    scale = [[f"{s['pipelines']} x {s['batches_each']:,}", f"{s['rows']:,}", str(s["plan_read"]["median_ms"]),
              str(s["freeze"]["median_ms"]), str(s["commit"]["median_ms"]), str(s["plan_and_commit_ms"])]
             for s in part_["scale"]]
    return _section(
        "The shared ledger under contention", f"{part_['date']} (`make bench-ledger`): {b['pipelines']} pipelines, "
        f"each in its own process, freeze and commit {b['batches_each']} batches, every step started at the same "
        f"moment: **{len(b['errors'])} errors** reached a run, {b['pipelines_all_committed']} of {b['pipelines']} "
        f"pipelines committed every batch, {b['races_lost_and_retried']} lost races were retried inside the ledger "
        f"(backoff with jitter), {b['wall_seconds']} s in all; the latencies below are mostly the {b['pipelines']} "
        f"processes' merges queueing for {part_['machine']['cores']} cores. Load average (1 min) "
        f"{part_['load_at_start']['load_1m']} at the start, {part_['load_at_end']['load_1m']} at the end.",
        _table(["burst: one step of one pipeline", "median ms", "p95 ms", "max ms"], burst),
        "One pipeline's plan read, freeze and commit (median of 7) on a ledger already holding other pipelines' "
        f"committed batches ({part_['partitions_per_batch']} partitions each): larger / smaller "
        f"**x{part_['scale_ratio']}**.",
        _table(["pipelines x batches", "ledger rows", "plan read ms", "freeze ms", "commit ms", "all three ms"], scale))


def fleet(part_: dict) -> str:
    phases, m = part_["phases"], part_["summary"]
    labels = {"warm": "Tidemark, warm path (Spark Connect)", "spark-submit": "Tidemark, spark-submit",
              "available-now-sequential": "AvailableNow, one after another",
              "available-now-concurrent": f"AvailableNow, {part_['concurrency']} at a time"}
    rows = [[labels[name], str(p["wall_seconds"]), f"{p['cpu_seconds']:,}", f"{p['peak_rss_mb']:,}",
             f"{p.get('rss_at_start_mb', 0):,}", str(p.get("parallelism", p.get("concurrency"))),
             f"{p['load_1m_at_start']} / {p['load_1m_at_end']}"]
            for name, p in phases.items()]
    ticks = [f"{labels[n]}: runs {p['run_seconds']['median']} s median ({p['run_seconds']['min']}–"
             f"{p['run_seconds']['max']}), ingest task {p['ingest_task_seconds']['median']} s median, the last ingest "
             f"task started {p['last_ingest_started_after_seconds']} s after the first trigger, CPU by tree "
             + ", ".join(f"{k} {v}" for k, v in p["cpu_seconds_by_tree"].items())
             for n, p in phases.items() if "launcher" in p]
    verdict = (f" Warm path **x{m['warm_speedup']}** faster than the faster AvailableNow fleet "
               f"({labels[m['available_now_compared']]})."
               if "warm_speedup" in m else "")
    return _section(
        "A fleet of pipelines", f"{part_['date']} (`make bench-fleet`): {part_['pipelines']} pipelines, each on its "
        f"own topic of {part_['records_per_pipeline']:,} records ({part_['partitions']} partitions, "
        f"{part_['record_bytes']} B). Tidemark: one scheduler tick, every DAG run triggered at once through the REST "
        "API on `make airflow`'s stack (LocalExecutor, PostgreSQL), timed from the first trigger to the last run's "
        "end; CPU and peak RSS summed over the Airflow services' process trees (task processes and spark-submits "
        "included), PostgreSQL and the Spark Connect server (RSS counts pages shared by forked processes once per "
        "process). AvailableNow: the same topics, each job a spark-submit, timed from the first start to the last "
        f"end. Every output table checked: each offset exactly once.{verdict}",
        _table(["fleet", "wall seconds", "CPU seconds", "peak RSS MB", "RSS before the first start, MB",
                "at a time (Airflow's parallelism)", "load (1 min) start / end"],
               rows), "; ".join(ticks) + ".")


def audit(part_: dict) -> str:
    rows = [[f"{s['rows']:,}", f"{s['ledger_ranges']:,}", f"{s['output_mb']:,}", str(s["audit_seconds"]),
             " / ".join(str(x) for x in s["audit_seconds_runs"]), f"{s['peak_rss_mb']:,}"] for s in part_["sizes"]]
    return _section(
        "`tidemark audit` on a large table", f"{part_['date']} (`make bench-audit`): an output table written by "
        f"delta-rs in appends of 1,000,000 rows ({part_['partitions']} partitions, batches of "
        f"{part_['records_per_batch']:,} records, one record in {part_['dead_letter_every']:,} a dead letter), "
        f"audited in a fresh process (what `tidemark audit` runs), three times per size. Load average (1 min) "
        f"{part_['load_at_start']['load_1m']} at the start, {part_['load_at_end']['load_1m']} at the end.",
        _table(["output rows", "ledger ranges", "output MB", "audit seconds (median)", "runs", "peak RSS MB"], rows))


def maintenance_targets(part_: dict | None) -> list[dict]:
    """The small-files row's targets (bench/maintenance.py): files and read time after maintenance."""
    if not part_:
        return []
    before, after = part_["before"], part_["after"]
    files = f"{before['active_files']:,} -> {after['active_files']:,} files"
    return [{"target": f"after {part_['batches']:,} small batches, maintenance leaves <= 1 active file per 100 "
                       f"batches ({part_['date']})", "measured": files,
             "met": after["active_files"] <= max(1, part_["batches"] // 100)},
            {"target": "... and a full-table read >= 2x faster after it", "measured": f"{part_['read_speedup']}x "
             f"({before['read_seconds']} -> {after['read_seconds']} s)", "met": part_["read_speedup"] >= 2}]


def maintenance(part_: dict) -> str:
    rows = [[label, f"{s['active_files']:,}", f"{s['files_on_disk']:,}", f"{s['version']:,}", str(s["read_seconds"]),
             " / ".join(str(x) for x in s["read_seconds_runs"]), str(s["first_read_seconds"])]
            for label, s in (("before maintenance", part_["before"]), ("after `maintain` (VACUUM retaining 168h)",
                                                                       part_["after"]),
                             ("after a VACUUM 7 days later", part_["after_vacuum_7_days_later"]))]
    return _section(
        "Small files: 1,000 small batches, before and after maintenance",
        f"{part_['date']} (`make bench-maintenance`): {part_['batches']:,} commits of {part_['records_per_batch']} "
        f"records ({part_['partitions']} partitions, {part_['value_bytes']}-byte values), written directly as Delta "
        f"appends with the ingest job's layout (one Parquet file per Kafka partition per batch, the raw pipeline's "
        f"columns, the marker and `userMetadata` in each commit, file statistics; pyarrow writes the files, "
        f"delta-rs the commits) in {part_['write_seconds']} s; not through Spark. Then "
        f"`tidemark.operations.table_maintenance.maintain` (what the maintenance DAG runs: OPTIMIZE compaction, "
        f"VACUUM retaining 168h, checkpoints) in "
        f"**{part_['maintain_seconds']} s**. A full-table read is delta-rs loading the table and reading every "
        f"column of every row (median of 5 after a first read): **x{part_['read_speedup']}** faster after "
        f"maintenance. Load average (1 min) {part_['load_at_start']['load_1m']} at the start, "
        f"{part_['load_at_end']['load_1m']} at the end.",
        _table(["table", "active files", "files on disk", "Delta version", "full read, s (median)", "runs, s",
                "first read, s"], rows))


def ledger_size(part_: dict) -> str:
    """bench/ledger_size.py: the ledger's bytes after N entries, what each entry adds, what VACUUM frees."""
    def kb(value: float) -> str:
        return f"{value / 1024:,.1f}"

    rows = [[f"{p['entries']:,}", f"{p['seeded']['rows']:,}", f"{p['seeded']['active_files']:,}",
             kb(p["seeded"]["active_bytes"]), _n(p["ms_per_entry"]), kb(p["data_bytes_per_entry"]),
             kb(p["reclaimable_bytes_per_entry"]), kb(p["log_bytes_per_entry"]), str(p["after_vacuum"]["seconds"])]
            for p in part_["points"]]
    last = part_["points"][-1]
    return _section(
        "The ledger's size",
        f"{part_['date']} (`make bench-ledger-size`): one pipeline, {part_['rows_per_entry']} rows (partitions) per "
        f"entry, delta-rs on the local disk, no Kafka or Spark. A ledger of N committed entries (seeded in appends "
        f"of 5,000 entries, then compacted), then {last['sample_entries']} more written as runs write them (the "
        f"planned rows' append, the commit flip's merge, a compaction of the pipeline's files every "
        f"{part_['compact_after_files']}); then a VACUUM (full, retention 0: what one 7 days later finds). "
        f"After {last['entries']:,} entries the ledger's rows take **{kb(last['seeded']['active_bytes'])} KB** "
        f"({last['seeded']['rows']:,} rows), what a VACUUM leaves; each entry written as runs write it adds "
        f"{kb(last['data_bytes_per_entry'])} KB of data files there, all of it reclaimable, because the commit flip "
        f"rewrites the planned rows' file and each compaction rewrites the pipeline's compacted file, which grows "
        f"with its history. Added up over the sizes measured (trapezoid rule, an estimate), a ledger written entry "
        f"by entry holds **{part_['estimated_reclaimable_bytes_at_last_size'] / 1024 ** 3:,.1f} GB** of files no "
        f"version needs after {last['entries']:,} entries, besides {kb(last['log_bytes_per_entry'])} KB of log per "
        f"entry (the log cleanup of a maintenance run keeps 30 days of it). Load average (1 min) "
        f"{part_['load_average_at_start']} at the start, {part_['load_average_at_end']} at the end.",
        _table(["entries", "rows", "active files", "active KB", "write ms per entry", "data KB per entry",
                "reclaimable KB per entry", "log KB per entry", "VACUUM s"], rows))


def tls(part_: dict) -> str:
    m = part_["summary"]
    rows = [[label, f"{c['median_seconds']} ({c['min_seconds']}–{c['max_seconds']})",
             f"{c['median_records_per_second']:,}", str(c["median_plan_seconds"]), str(c["median_tree_cpu_seconds"]),
             f"{c['median_peak_tree_rss_mb']:,}"]
            for label, c in (("PLAINTEXT", m["plaintext"]), ("SASL_SSL (SCRAM-SHA-512)", m["sasl_ssl"]))]
    return _section(
        "Kafka over TLS", f"{part_['date']}: {part_['records']:,} records of {part_['record_bytes']} bytes on "
        f"{part_['partitions']} partitions (replication factor 3) of the three-broker cluster, read by the Tidemark "
        f"ingest job (plan call + spark-submit) over each listener, {m['plaintext']['runs']} runs each, alternating. "
        f"SASL_SSL / PLAINTEXT: **x{m['sasl_ssl_over_plaintext']}** the time. Load average (1 min) "
        f"{part_['load_at_start']['load_1m']} at the start, {part_['load_at_end']['load_1m']} at the end.",
        _table(["listener", "seconds (plan + job)", "records/s", "plan call, s", "CPU seconds of the job",
                "peak RSS of the job, MB"], rows))


def object_storage(part_: dict) -> str:
    m = part_["summary"]
    return _section(
        "S3 against the local disk", f"{part_['date']}: {part_['backlog']['records']:,} records in one `tidemark "
        f"run` batch, {m['local']['runs']} runs each, alternating; the S3 server is moto on loopback, not AWS.",
        _table(["lake", "median seconds"], [["local disk", str(m["local"]["median_seconds"])],
                                            ["local S3 server", str(m["s3"]["median_seconds"])],
                                            ["S3 / local", f"x{m['s3_over_local']}"]]))


def read_path(part_: dict) -> str:
    m = part_["medians"]
    rows = [[label, str(m[f"v1_relation_{sink}"]["median_seconds"]), str(m[f"v2_scan_{sink}"]["median_seconds"]),
             f"x{part_['v2_over_v1'][sink]}"]
            for label, sink in (("read alone (noop sink)", "noop"), ("read + Delta append", "delta"))]
    return _section(
        "Kafka read: V1 relation or V2 scan", f"{part_['date']}: {part_['records']:,} records of "
        f"{part_['record_bytes']} bytes on {part_['partitions']} partitions, one JVM taking turns after a warm-up "
        "round, "
        f"{part_['rounds']} rounds, medians in seconds (`bench/read_path.py`). Spark sends a batch read of Kafka to "
        "its V1 relation unless `spark.sql.sources.useV1SourceList` leaves `kafka` out; Tidemark's job reads "
        "through the V2 scan.",
        _table(["", "V1 relation", "V2 scan", "V2 / V1"], rows))


def class_data(part_: dict) -> str:
    rows = [[f"{int(size):,}", str(m["off_seconds"]), str(m["on_seconds"]), f"x{m['on_over_off']}",
             f"{m['off_cpu_seconds']} / {m['on_cpu_seconds']}", str(m["first_seconds"])]
            for size, m in part_["summary"]["sizes"].items()]
    return _section(
        "The JVM's start: class-data sharing", f"{part_['date']}: the Tidemark job (plan call + spark-submit, "
        f"`{part_['master']}`) on batches of each size, {part_['rounds']} rounds taking turns between sharing off "
        "(`TIDEMARK_CDS_DIR=off`) and on, medians (`bench/class_data_sharing.py`). "
        + ("The first job on a fresh host starts the trainer, which writes the archive "
           f"({part_['archive_mb']} MB) beside it" if any("archive_ready_seconds" in r for r in part_.get("runs", []))
           else f"The first job on a fresh host writes the archive ({part_['archive_mb']} MB) as its JVM exits (the "
                "release that measured it)")
        + "; later jobs map it (docs/OPERATIONS.md, *The job's JVM start*).",
        _table(["records per batch", "seconds, off", "seconds, on", "on / off", "CPU seconds, off / on",
                "the first job, s"], rows))


def console(part_: dict) -> str:
    routes = list(part_["ledgers"][0]["routes"])
    rows = [[ledger["shape"], f"{ledger['batches']:,}", *[f"{t['median_ms']:.0f}" for t in ledger["routes"].values()]]
            for ledger in part_["ledgers"]]
    return _section("The Tidemark page", f"{part_['date']}: each route, median ms of 7 calls after a warm-up, "
                    "in process (no HTTP stack), against a live broker.", _table(["ledger", "batches", *routes], rows))


# --- the page ------------------------------------------------------------------------------------
