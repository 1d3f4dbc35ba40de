"""The value types of a pipeline file, strict where a wrong type would mean a wrong pipeline (issue 42):
YAML's ``true`` is not the count 1, ``"false"`` in quotes is not a boolean, a bare ``7200`` is not a
duration (seconds? hours?), and a callback's module is looked for when the file is read, not when the
first alert is due."""

from __future__ import annotations

import datetime as dt
import difflib
import importlib.util
import os
import pkgutil
import re
import sys
from importlib.machinery import all_suffixes
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field

from tidemark import settings

Count = Annotated[int, Field(strict=True, gt=0)]
"""A count or a size (offsets, seconds, bytes): a YAML integer above 0. ``true``, ``1.0`` and ``"100"`` are
refused rather than read as 1, 1 and 100."""

Flag = Annotated[bool, Field(strict=True)]
"""A switch: YAML's ``true`` or ``false``; ``"false"`` in quotes and ``0`` are refused."""

_DURATION = re.compile(r"^\s*(\d+)\s*(s|m|h|d)\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
_EXAMPLES = "like 30s, 15m, 2h or 1d"


def parse_duration(value: object) -> object:
    """``90s``, ``15m``, ``2h``, ``1d`` as a timedelta; an ISO-8601 duration (``PT2H``) is left to pydantic,
    which names the field when it fails. A number without a unit, or a boolean, is refused."""
    if isinstance(value, bool):
        raise ValueError(f"{str(value).lower()} is not a duration: give a number and a unit, {_EXAMPLES}")
    if isinstance(value, int | float) or (isinstance(value, str) and value.strip().replace(".", "", 1).isdigit()):
        number = str(value).strip()
        units = f"{number}s, {number}m, {number}h or {number}d" if number.isdigit() else _EXAMPLES.removeprefix("like ")
        raise ValueError(f"{number} has no unit (seconds? hours?): write it with one, {units}")
    if isinstance(value, str):
        if match := _DURATION.match(value):
            return dt.timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
        if not value.strip().upper().startswith("P"):
            raise ValueError(f"'{value}' is not a duration: give a number and a unit, {_EXAMPLES}")
    return value


Duration = Annotated[dt.timedelta, BeforeValidator(parse_duration)]
"""A duration in a pipeline file: ``30s``, ``15m``, ``2h``, ``1d`` (or ISO-8601, ``PT2H``)."""


def _at_least_a_minute(value: dt.timedelta) -> dt.timedelta:
    if value < dt.timedelta(minutes=1):
        raise ValueError("must be at least 1m")
    return value


Every = Annotated[Duration, AfterValidator(_at_least_a_minute)]
"""How often a DAG of the pipeline runs (maintenance, audit): a Duration of at least a minute."""


def find_module(name: str, roots: list[str]) -> str | None:
    """Look for the module ``name`` (dotted) as the import system would, on ``roots`` (``sys.path`` and
    more), without importing it or any package above it (a package's ``__init__`` may import Airflow).
    None when it is found; else what is missing, with the closest name when there is one."""
    if name in sys.modules:
        return None
    parts, search = name.split("."), roots
    for depth, part in enumerate(parts):
        prefix = ".".join(parts[:depth + 1])
        if depth:
            search += [p for r in roots if os.path.isdir(p := os.path.join(r, *parts[:depth])) and p not in search]
        found = _locate(prefix, part, search)
        if found is None:
            close = difflib.get_close_matches(part, sorted({m.name for m in pkgutil.iter_modules(search)}), n=1)
            hint = f" (did you mean '{'.'.join([*parts[:depth], close[0]])}'?)" if close else ""
            return f"no module '{prefix}' can be found{hint}"
        if depth + 1 < len(parts) and not found:
            return f"'{prefix}' is a module, not a package"
        search = found
    return None


def _locate(name: str, part: str, search: list[str]) -> list[str] | None:
    """The folders the submodules of ``name`` (last part ``part``) are looked for in: [] for a module, None when
    it is not found. An imported module answers for itself; a top-level name asks every finder (an editable
    install's too), which imports nothing; otherwise the folders of ``search`` are read, as Python's path finder
    reads them (a regular package or a module first, else the folders of a namespace package)."""
    module = sys.modules.get(name)
    if module is not None:
        return list(getattr(module, "__path__", None) or [])
    spec = importlib.util.find_spec(name) if "." not in name else None
    if spec is not None:
        return list(spec.submodule_search_locations or [])
    portions = []
    for root in search:
        folder = os.path.join(root, part)
        if os.path.isfile(os.path.join(folder, "__init__.py")):
            return [folder]
        if any(os.path.isfile(os.path.join(root, part + suffix)) for suffix in all_suffixes()):
            return []
        if os.path.isdir(folder):
            portions.append(folder)
    return portions or None


def _module_is_found(path: str) -> str:
    """A dotted path ``package.module.name`` whose module can be found here; the pipelines folder's parent (the
    DAGs folder, which Airflow puts on ``sys.path``) counts too."""
    roots = [*(p or os.getcwd() for p in sys.path), str(settings.pipelines_dir().parent.resolve())]
    missing = find_module(path.rpartition(".")[0], roots)
    if missing:
        raise ValueError(f"'{path}': {missing}; check the spelling, or install the package here (the callback "
                         f"must import where Airflow runs callbacks, and is looked for where the file is read)")
    return path


ImportPath = Annotated[str, Field(pattern=r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+$"), AfterValidator(_module_is_found)]
"""A dotted path of a function or class (``tidemark_airflow.alerts.log_stale_pipeline``) whose module can be found
when the pipeline file is read; it is imported only when called."""
