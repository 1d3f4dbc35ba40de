"""The import contracts ([tool.importlinter] in pyproject.toml, run by `make lint`): the core imports
no adapter and no Airflow, its packages are layers that import only downwards (issue 58), and no two modules
of a package import each other (issue 42). Checked here on a
copy of the source with and without a deliberate backwards import, so each contract is known to be able to
fail."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(tree: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tree, env={"PYTHONPATH": str(tree / "plugins")},
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def source_copy(tmp_path) -> Path:
    shutil.copytree(ROOT / "plugins", tmp_path / "plugins", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_source_keeps_the_contract(source_copy):
    result = lint_imports(source_copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(("module", "backwards"), [
    ("kafka/planner.py", "import tidemark_airflow.naming"),
    ("batch/prepare.py", "from airflow.sdk import BaseHook"),
    ("ledger/store.py", "from tidemark_cli.main import main"),
    ("config/pipeline.py", "import pyspark.sql"),
    ("formats/records.py", "import tidemark.batch.plan"),  # a lower layer importing a higher one
])
def test_a_backwards_import_breaks_the_contract(source_copy, module, backwards):
    path = source_copy / "plugins" / "tidemark" / module
    path.write_text(path.read_text() + f"\n{backwards}  # deliberate\n")
    result = lint_imports(source_copy)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout and f"tidemark.{module[:-3].replace('/', '.')}" in result.stdout, result.stdout


@pytest.mark.parametrize(("module", "backwards", "loop"), [
    ("tidemark/config/maintenance_settings.py", "import tidemark.config.pipeline",
     "- .pipeline -> .maintenance_settings"),
    ("tidemark_cli/exits.py", "from tidemark_cli.main import main", "- .exits -> .main"),
    ("tidemark_cli/table_views.py", "from tidemark_cli import dead_letter_commands",
     "- .table_views -> .dead_letter_commands"),
])
def test_an_import_loop_inside_a_package_breaks_the_contract(source_copy, module, backwards, loop):
    path = source_copy / "plugins" / module
    path.write_text(path.read_text() + f"\n{backwards}  # deliberate\n")
    result = lint_imports(source_copy)
    assert result.returncode != 0
    assert "No two modules of a package import each other" in result.stdout and loop in result.stdout, result.stdout
