"""docs/benchmarks.png: the raw-value throughput of every contender, the ledger growth, and the scale."""

from __future__ import annotations

from pathlib import Path

from bench.contenders import LABELS


def chart(results: dict, scale: dict | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3 if scale else 2, figsize=(21 if scale else 14, 5.5))
    _throughput(axes[0], results)
    _ledger(axes[1], results["summary"]["ledger"])
    if scale:
        _scale(axes[2], scale)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _throughput(ax, results: dict) -> None:
    contenders, s = results["summary"]["contenders"], results["settings"]
    names = list(contenders)
    rps = [contenders[n]["records_per_second"] for n in names]
    medians = [r["median"] / 1000 for r in rps]
    errors = [[m - r["min"] / 1000 for m, r in zip(medians, rps, strict=True)],
              [r["max"] / 1000 - m for m, r in zip(medians, rps, strict=True)]]
    ax.barh(range(len(names)), medians, xerr=errors, capsize=4,
            color=["#1f77b4" if n.startswith("tidemark") else "#999999" for n in names])
    ax.set_yticks(range(len(names)), [LABELS[n].split(" (")[0] for n in names])
    ax.invert_yaxis()
    ax.set_xlabel("thousand records/s (median, min–max); process start to exit")
    ax.set_title(f"{s['records']:,} records of {s['record_bytes']} B, {s['partitions']} partitions")


def _ledger(ax, ledger: dict) -> None:
    for shape, style in (("synthetic", "o-"), ("protocol", "s--")):
        if rows := ledger.get(shape, []):
            batches = [r["batches"] for r in rows]
            ax.plot(batches, [r["state_ms"] for r in rows], style, label=f"Ledger.state ({shape})")
            ax.plot(batches, [r["full_read_ms"] for r in rows], style, alpha=0.5, label=f"full read ({shape})")
    if planned := [r for r in ledger.get("synthetic", []) if r["plan_ms"] is not None]:
        ax.plot([r["batches"] for r in planned], [r["plan_ms"] for r in planned], "^-", label="plan call (synthetic)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("committed batches in the ledger")
    ax.set_ylabel("milliseconds (median)")
    ax.set_title("Ledger growth")
    ax.legend(fontsize=8)


def _scale(ax, scale: dict) -> None:
    """Throughput (left axis) and peak memory (right axis) per batch size."""
    sizes = sorted(scale["summary"]["sizes"].items(), key=lambda kv: int(kv[0]))
    xs = [int(k) / 1e6 for k, _ in sizes]
    ax.plot(xs, [v["median_records_per_second"] / 1000 for _, v in sizes], "o-", label="records/s (thousands)")
    ax.set_xlabel("records in the batch (millions)")
    ax.set_ylabel("thousand records/s (median)")
    memory = ax.twinx()
    memory.plot(xs, [v["median_peak_jvm_rss_mb"] for _, v in sizes], "s--", color="#d62728",
                label="driver JVM peak RSS, MB")
    memory.plot(xs, [v["median_python_driver_rss_mb"] for _, v in sizes], "^:", color="#2ca02c",
                label="Python driver peak RSS, MB")
    memory.set_ylabel("MB (median)")
    memory.set_ylim(bottom=0)
    ax.set_ylim(bottom=0)
    ax.set_title("Scale: one batch of each size")
    lines, more = ax.get_legend_handles_labels(), memory.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="lower right")
