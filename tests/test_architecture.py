"""The rules of docs/architecture.md: the layers, the core's tree and floors, no import cycles, numpy and
pyarrow only in the vectorised intake, and the core and the Spark source run without Airflow."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import airflow_provider_jetstream
from tests.support.syntax import parse_file

PACKAGE = Path(airflow_provider_jetstream.__file__).parent
#: What the core never imports: the Airflow layers, Spark, the test harness.
ABOVE_CORE = ("hooks", "operators", "sensors", "triggers", "queues", "assets", "utils", "spark", "testing", "ui")


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
        for node in runtime_imports(parse_file(path)):
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
    "ui": {"core", "hooks", "assets", "utils"},
}


def test_each_layer_imports_only_what_the_architecture_allows() -> None:
    assert set(MAY_IMPORT) == {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    offenders = []
    for layer, allowed in MAY_IMPORT.items():
        for path in (PACKAGE / layer).rglob("*.py"):
            for node in runtime_imports(parse_file(path)):
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
        for node in runtime_imports(parse_file(path)):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            offenders += [f"{path.relative_to(PACKAGE)} imports {n}" for n in names if n.split(".")[0] == "local_stack"]
    assert offenders == []


#: The core's parts by floor, from the ground up: a part imports only from lower floors (and itself).
#: Adding a part (a module or package directly under ``core/``) means placing it here and in
#: docs/architecture.md.
CORE_FLOORS = (
    {"errors", "tasks"},  # every exception, and the one classification of errors; awaiting that keeps cancellations
    {"arguments", "protocol", "sync"},  # the argument layer and its parsers, the wire protocol, the sync bridge
    {"connection", "wire"},  # connecting; frames read below nats-py's message objects
    {"resend"},  # the one resend rule: what is sent again, on which answers, after what pause, for how long
    {"api"},  # the one JetStream API speaker
    {"manage", "publish", "read"},  # declaring, publishing, reading ranges
    {"consume", "status"},  # durable consumption, status checks and the wait loop
    {"signatures"},  # every public argument declared once, per operation
)
#: The only place of the package that imports numpy or pyarrow (besides ``spark/``).
VECTORISED = "core/read/vectorised"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(*, annotations: bool = False) -> dict[str, set[str]]:
    """``{module: modules of the package it imports}`` (function-level imports included, and with
    ``annotations`` those under ``if TYPE_CHECKING:``; ``from package import module`` counts as an
    import of the module)."""
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = graph.setdefault(name, set())
        tree = parse_file(path)
        nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
        for node in nodes if annotations else runtime_imports(tree):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(
                        [*package.split(".")[: len(package.split(".")) - node.level + 1], *filter(None, [base])]
                    )
                candidates = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names
                ]
            else:
                candidates = [alias.name for alias in node.names]
            for target in candidates:
                while target and target not in modules and "." in target:
                    target = target.rpartition(".")[0]
                if target in modules and target != name:
                    targets.add(target)
    return graph


def test_the_package_has_no_import_cycles() -> None:
    """Not even through imports for annotations: a cycle there is one in the design."""
    graph = import_graph(annotations=True)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = [stack.pop()]
            while component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    assert cycles == []


def core_part(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "core" else None


def test_the_core_tree_is_its_map_and_each_part_imports_only_from_lower_floors() -> None:
    placed = set().union(*CORE_FLOORS)
    parts = {p.stem for p in (PACKAGE / "core").iterdir() if p.suffix == ".py" and p.stem != "__init__"}
    parts |= {p.name for p in (PACKAGE / "core").iterdir() if (p / "__init__.py").exists()}
    assert parts == placed, "every part of core/ has a floor in CORE_FLOORS (and a line in docs/architecture.md)"
    floor = {part: level for level, floor_parts in enumerate(CORE_FLOORS) for part in floor_parts}
    offenders = []
    for module, targets in import_graph().items():
        part = core_part(module)
        if part is None:
            continue
        for target in targets:
            other = core_part(target)
            if other is not None and other != part and floor[other] >= floor[part]:
                offenders.append(f"{module} (floor {floor[part]}) imports {target} (floor {floor[other]})")
    assert offenders == []


def test_docs_name_every_module_of_the_core_and_its_concern() -> None:
    """docs/architecture.md's map names each module of ``core/`` (its single home)."""
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    missing = [
        str(path.relative_to(PACKAGE))
        for path in sorted((PACKAGE / "core").rglob("*.py"))
        if path.name != "__init__.py" and not re.search(rf"\b{re.escape(path.stem)}\b", text)
    ]
    assert missing == []


def test_only_the_vectorised_intake_and_spark_import_numpy_or_pyarrow() -> None:
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        relative = str(path.relative_to(PACKAGE))
        if relative.startswith((VECTORISED, "spark/")):
            continue
        for node in runtime_imports(parse_file(path)):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            offenders += [f"{relative} imports {n}" for n in names if n.split(".")[0] in ("numpy", "pyarrow")]
    assert offenders == []


def test_no_module_is_over_500_lines() -> None:
    long = {
        str(path.relative_to(PACKAGE)): lines
        for path in PACKAGE.rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > 500
    }
    assert long == {}


def test_every_module_opens_with_a_one_line_summary() -> None:
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        doc = ast.get_docstring(parse_file(path))
        if path.name == "__init__.py" and not path.read_text().strip():
            continue
        if not doc or not doc.splitlines()[0].strip():
            missing.append(str(path.relative_to(PACKAGE)))
    assert missing == []
