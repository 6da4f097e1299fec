"""The layer rule of docs/architecture.md: the core and the Spark source run without Airflow."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import airflow_provider_jetstream

PACKAGE = Path(airflow_provider_jetstream.__file__).parent
#: What the core never imports: the Airflow layers, Spark, the test harness.
ABOVE_CORE = ("hooks", "operators", "sensors", "triggers", "queues", "assets", "utils", "spark", "testing")


def modules_under(layer: str) -> list[str]:
    names = []
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def airflow_modules_imported_by(modules: list[str]) -> dict[str, list[str]]:
    """``{module: [airflow modules its import pulled in]}``, imported in a fresh interpreter
    (this test process has Airflow loaded already)."""
    probe = (
        "import importlib, json, sys\n"
        "leaks = {}\n"
        f"for name in {modules!r}:\n"
        "    before = set(sys.modules)\n"
        "    importlib.import_module(name)\n"
        "    new = sorted(m for m in set(sys.modules) - before if m == 'airflow' or m.startswith('airflow.'))\n"
        "    if new:\n"
        "        leaks[name] = new[:3]\n"
        "print(json.dumps(leaks))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_core_module_imports_without_airflow() -> None:
    modules = modules_under("core")
    assert len(modules) > 20
    assert airflow_modules_imported_by(modules) == {}


@pytest.mark.spark
def test_every_spark_module_imports_without_airflow() -> None:
    """What Spark executors import: the data source, its writer and the packaged job."""
    modules = modules_under("spark")
    assert len(modules) > 5
    assert airflow_modules_imported_by(modules) == {}


def runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Import statements, less those under ``if TYPE_CHECKING:`` (annotations only)."""
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in typing_only]


def test_the_core_imports_nothing_from_the_airflow_layers() -> None:
    offenders = []
    for path in (PACKAGE / "core").rglob("*.py"):
        for node in runtime_imports(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                top = name.split(".")
                if top[0] == "airflow" or (
                    top[0] == "airflow_provider_jetstream" and len(top) > 1 and top[1] in ABOVE_CORE
                ):
                    offenders.append(f"{path.relative_to(PACKAGE)} imports {name}")
    assert offenders == []


#: docs/architecture.md's table: the packages each package may import (besides itself).
MAY_IMPORT = {
    "core": set(),
    "spark": {"core"},
    "hooks": {"core"},
    "triggers": {"core", "hooks"},
    "sensors": {"core", "hooks", "triggers", "utils"},
    "operators": {"core", "hooks", "utils", "spark", "assets"},
    "assets": {"core"},
    "queues": {"core", "triggers", "assets"},
    "testing": {"core"},
    "utils": set(),
}


def test_each_layer_imports_only_what_the_architecture_allows() -> None:
    assert set(MAY_IMPORT) == {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    offenders = []
    for layer, allowed in MAY_IMPORT.items():
        for path in (PACKAGE / layer).rglob("*.py"):
            for node in runtime_imports(ast.parse(path.read_text())):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                for name in names:
                    parts = name.split(".")
                    ours = parts[0] == "airflow_provider_jetstream" and len(parts) > 1 and parts[1] in MAY_IMPORT
                    if ours and parts[1] != layer and parts[1] not in allowed:
                        offenders.append(f"{path.relative_to(PACKAGE)} imports {name}")
    assert offenders == []


def test_nothing_in_the_package_imports_the_repository_stack() -> None:
    """``local_stack/`` is the repository's (``make stack``), not the wheel's: an import of it from the
    package would fail on every installed provider."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        for node in runtime_imports(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            offenders += [f"{path.relative_to(PACKAGE)} imports {n}" for n in names if n.split(".")[0] == "local_stack"]
    assert offenders == []


def test_every_module_opens_with_a_one_line_summary() -> None:
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text()))
        if path.name == "__init__.py" and not path.read_text().strip():
            continue
        if not doc or not doc.splitlines()[0].strip():
            missing.append(str(path.relative_to(PACKAGE)))
    assert missing == []
