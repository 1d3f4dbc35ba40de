"""The shape the code keeps (issue 23; the benchmark harness and the devkit too since issue 58): no module in
plugins/, bench/ or devkit/ over 400 lines, no function over 60 lines, so that each stays readable in one sitting.
A longer one is listed here with the reason."""

from __future__ import annotations

import ast
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
SHAPED = ("plugins", "bench", "devkit")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
LONGER_FUNCTIONS: dict[str, str] = {}
"""``module:function`` -> why it is longer than MAX_FUNCTION_LINES."""


def _modules() -> list[Path]:
    return sorted(p for folder in SHAPED for p in (PLUGINS.parent / folder).rglob("*.py"))


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(PLUGINS.parent)): n for p in _modules() if (n := len(p.read_text().splitlines()))
            > MAX_MODULE_LINES}
    assert long == {}, f"split these modules (lines): {long}"


def test_no_function_is_over_60_lines():
    long = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                name = f"{path.relative_to(PLUGINS.parent)}:{node.name}"
                if lines > MAX_FUNCTION_LINES and name not in LONGER_FUNCTIONS:
                    long[name] = lines
    assert long == {}, f"shorten these functions (lines), or list them with a reason: {long}"


def test_no_two_modules_of_the_product_share_a_file_name():
    """Issue 58: a file name says what the module holds, once (``ingest.py`` was the job's script and its
    main; ``tables.py`` both what a batch's tables hold and the CLI's table printer). The project is the product
    (plugins/, spark_jobs/, dags/), the harness (bench/, devkit/, scripts/) and tests/; a package's ``__init__.py``,
    ``__main__.py`` and pytest's ``conftest.py`` are roles, not names."""
    root = PLUGINS.parent
    seen: dict[str, list[str]] = {}
    for folder in ("plugins", "spark_jobs", "dags", "bench", "devkit", "scripts", "tests"):
        for path in (root / folder).rglob("*.py"):
            if path.name not in ("__init__.py", "__main__.py", "conftest.py") and "__pycache__" not in path.parts:
                seen.setdefault(path.name, []).append(str(path.relative_to(root)))
    shared = {name: sorted(paths) for name, paths in seen.items() if len(paths) > 1}
    assert shared == {}, f"rename one of each: {shared}"


def test_the_core_root_holds_only_its_face_and_cross_cutting_modules():
    """Issue 58: everything else lives in a concept package (docs/DESIGN.md, *The package map*)."""
    root_modules = {p.stem for p in (PLUGINS / "tidemark").glob("*.py")} - {"__init__"}
    assert root_modules == {"errors", "settings", "storage", "connections", "fault_injection", "run"}
