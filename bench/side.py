"""What the side benchmarks of typed values (bench/avro.py, bench/typed_json.py) share: choosing
contenders from the environment, checking every contender decoded the same values, and the per-contender
medians and throughput ratios of their summaries."""

from __future__ import annotations

import os
import statistics


def chosen(variable: str, contenders: tuple[str, ...]) -> tuple[str, ...]:
    """The contenders named in the environment variable (comma-separated), default all, in their order."""
    wanted = [n.strip() for n in os.environ.get(variable, "").split(",") if n.strip()]
    unknown = sorted(set(wanted) - set(contenders))
    if unknown:
        raise SystemExit(f"{variable}: unknown contender(s) {', '.join(unknown)}; choose from {', '.join(contenders)}")
    return tuple(n for n in contenders if not wanted or n in wanted)


def check_same_values(runs: list[dict]) -> None:
    """Every run decoded the same values (``fingerprint``) into the same column types (where both have them)."""
    first = runs[0]
    for run in runs[1:]:
        for key in ("fingerprint", "column_types"):
            mine = {k: v for k, v in run[key].items() if key != "column_types" or k in first[key]}
            theirs = {k: v for k, v in first[key].items() if key != "column_types" or k in run[key]}
            if mine != theirs:
                raise RuntimeError(f"{run['contender']} (repetition {run['repetition']}) {key} {mine} differs from "
                                   f"{first['contender']}'s {theirs}")


def contender_summary(runs: list[dict], labels: dict[str, str], records: int, megabytes: float,
                      ratios: dict[str, tuple[str, str]]) -> dict:
    """Per contender (in ``labels``' order) the median, range, throughput and peak RSS of its runs, and the
    throughput ratios ``name: (a, b)`` of the contenders that ran."""
    contenders = {}
    for name, label in labels.items():
        mine = [r for r in runs if r["contender"] == name]
        if not mine:
            continue
        median = statistics.median(r["seconds"] for r in mine)
        contenders[name] = {
            "label": label, "runs": len(mine), "median_seconds": round(median, 2),
            "min_seconds": round(min(r["seconds"] for r in mine), 2),
            "max_seconds": round(max(r["seconds"] for r in mine), 2),
            "median_records_per_second": round(records / median),
            "median_mb_per_second": round(megabytes / median, 2),
            "median_peak_tree_rss_mb": round(statistics.median(r["peak_tree_rss_mb"] for r in mine))}
    rps = {n: c["median_records_per_second"] for n, c in contenders.items()}
    return {"contenders": contenders,
            "ratios": {key: round(rps[a] / rps[b], 3) for key, (a, b) in ratios.items() if a in rps and b in rps}}
