"""The layer rule of docs/architecture.md: the core and the Spark source run without Airflow."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import airflow_provider_jetstream

PACKAGE = Path(airflow_provider_jetstream.__file__).parent
#: Layers that must import without Airflow: Spark executors and plain Python programs use them.
AIRFLOW_FREE = ("core", "spark")
AIRFLOW_LAYERS = ("hooks", "operators", "sensors", "triggers", "utils")


def modules_under(layer: str) -> list[str]:
    names = []
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_every_core_and_spark_module_imports_without_airflow() -> None:
    modules = [m for layer in AIRFLOW_FREE for m in modules_under(layer)]
    assert len(modules) > 20
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
    # A fresh interpreter: this test process has Airflow loaded already.
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == {}


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
                    top[0] == "airflow_provider_jetstream" and len(top) > 1 and top[1] in AIRFLOW_LAYERS
                ):
                    offenders.append(f"{path.relative_to(PACKAGE)} imports {name}")
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
