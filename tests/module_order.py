"""The order the test modules run in: longest first, from each module's time in the last run.

`make test` runs two pytest-xdist workers that each take whole modules in collection order, so the long
modules go first and no worker is left with one at the end. Each run's controller writes the module times
it measured to ``.cache/test-durations.json``, merged into what is there (a partial run keeps the other
modules' times); a fresh clone (CI) orders by the committed ``tests/durations.json``. Keys are module
paths relative to ``tests/``, values seconds (setup + call + teardown)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

TESTS = Path(__file__).resolve().parent
CACHE = TESTS.parent / ".cache" / "test-durations.json"
FALLBACK = TESTS / "durations.json"


def _read(path: Path) -> dict[str, float]:
    """The module times in ``path``; nothing when it is missing or not such a file (a broken cache must
    not stop the run: the order only balances the workers)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, int | float)}


def load(cache: Path = CACHE, fallback: Path = FALLBACK) -> dict[str, float]:
    """The committed times, overridden by the last runs' on this machine."""
    return {**_read(fallback), **_read(cache)}


APART = ("e2e/test_celery_chaos.py", "integration/test_kafka_failover.py")
"""Modules that take the shared three-broker cluster to themselves (``Cluster.alone``) and hold it through long
fixtures: run at the same time, one worker sat idle for the other (93 s of one run). The later one is moved to
where the modules before it add up to twice the earlier one's time (two workers: about when it has ended)."""


def longest_first(modules: Iterable[str], seconds: Mapping[str, float]) -> dict[str, int]:
    """Each module's rank: the modules with a known time longest first, then the others (new modules)
    in the order given; the modules of ``APART`` kept apart."""
    modules = list(dict.fromkeys(modules))
    known = sorted((m for m in modules if m in seconds), key=lambda m: -seconds[m])
    order = _kept_apart(known, seconds)
    return {m: rank for rank, m in enumerate(order + [m for m in modules if m not in seconds])}


def _kept_apart(order: list[str], seconds: Mapping[str, float]) -> list[str]:
    apart = [m for m in order if m in APART]
    if len(apart) < 2:
        return order
    first, later = apart[0], apart[1]
    rest = [m for m in order if m != later]
    start, until = 0.0, 2 * seconds[first]
    for position, module in enumerate(rest):
        if start >= until:
            return [*rest[:position], later, *rest[position:]]
        start += seconds[module]
    return [*rest, later]


def record(measured: Mapping[str, float], cache: Path = CACHE) -> None:
    """Merge this run's module times into the cache (written whole, then renamed into place)."""
    if not measured:
        return
    merged = {**_read(cache), **{m: round(s, 1) for m, s in measured.items()}}
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_name(f"{cache.name}.{os.getpid()}")
    partial.write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")
    partial.replace(cache)
