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


def longest_first(modules: Iterable[str], seconds: Mapping[str, float]) -> dict[str, int]:
    """Each module's rank: the modules with a known time longest first, then the others (new modules)
    in the order given."""
    modules = list(dict.fromkeys(modules))
    known = sorted((m for m in modules if m in seconds), key=lambda m: -seconds[m])
    return {m: rank for rank, m in enumerate(known + [m for m in modules if m not in seconds])}


def record(measured: Mapping[str, float], cache: Path = CACHE) -> None:
    """Merge this run's module times into the cache (written whole, then renamed into place)."""
    if not measured:
        return
    merged = {**_read(cache), **{m: round(s, 1) for m, s in measured.items()}}
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_name(f"{cache.name}.{os.getpid()}")
    partial.write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")
    partial.replace(cache)
