"""The documentation site's sources: every page reachable from the toctree, the example DAGs shown from the
tested files, and the pages' examples run as written (CI builds the site itself with `make docs`)."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

from tests.support.syntax import parse_file

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"


def toctree_entries(page: Path) -> list[str]:
    """The documents the ``{toctree}`` blocks of a MyST page list, in order."""
    entries = []
    for block in re.findall(r"```\{toctree\}\n(.*?)```", page.read_text(), re.S):
        entries += [line.strip() for line in block.splitlines() if line.strip() and not line.startswith(":")]
    return entries


def python_block_under(page: Path, heading: str) -> str:
    """The first ```python block after the ``## heading`` line of a page."""
    text = page.read_text()
    start = text.index(f"## {heading}\n")
    match = re.compile(r"```python\n(.*?)```", re.S).search(text, start)
    assert match, f"no python block under {heading!r} in {page.name}"
    return match.group(1)


def test_every_docs_page_is_in_the_sites_toctree_once() -> None:
    entries = toctree_entries(DOCS / "index.md")
    pages = sorted(page.stem for page in DOCS.glob("*.md") if page.name != "index.md")
    assert sorted(entries) == pages, "add the page to a toctree of docs/index.md (or remove the entry)"


def test_every_example_dag_file_is_shown_from_the_file_itself() -> None:
    included = set(re.findall(r"```\{literalinclude\} \.\./(\S+)", (DOCS / "examples.md").read_text()))
    assert {f"dags/{path.name}" for path in (REPO / "dags").glob("*.py")} <= included
    assert [path for path in included if not (REPO / path).is_file()] == []


def test_testing_your_own_dags_example_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    # Registered with monkeypatch, so the connection the example sets is removed afterwards.
    monkeypatch.setenv("AIRFLOW_CONN_JETSTREAM_DEFAULT", "")
    monkeypatch.delenv("AIRFLOW_CONN_JETSTREAM_DEFAULT")
    page = DOCS / "testing.md"
    exec(compile(python_block_under(page, "Testing your own DAGs"), str(page), "exec"), {"__name__": "docs"})


def docstrings() -> list[tuple[str, int, str]]:
    """Every docstring of the package's modules, classes and functions: ``(file, line, text)``."""
    found = []
    for path in sorted((REPO / "airflow_provider_jetstream").rglob("*.py")):
        tree = parse_file(path)
        for node in [tree, *ast.walk(tree)]:
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                text = ast.get_docstring(node, clean=False)
                if text:
                    found.append((str(path.relative_to(REPO)), getattr(node, "lineno", 1), text))
    return found


def test_every_docstring_has_one_param_per_line() -> None:
    """The API reference renders each ``:param`` line as one entry: two on a line merge into one."""
    merged = [
        f"{path}:{line}: {text_line.strip()[:80]}"
        for path, line, text in docstrings()
        for text_line in text.splitlines()
        if ":param " in text_line.strip()[1:]  # a :param not at the start of its line: merged into the one before
    ]
    assert merged == [], "put each :param on a line of its own"


#: An operator or sensor class of the package, as a page's code names it.
TASK_CLASS = re.compile(r"\b(JetStream\w*(?:Operator|Sensor))\b")


def python_blocks(page: Path) -> str:
    """Every ```python block of a page, joined."""
    return "\n".join(re.findall(r"```python\n(.*?)```", page.read_text(), re.S))


def task_classes() -> set[str]:
    """The operator and sensor classes the package ships (``airflow_provider_jetstream.operators`` and
    ``.sensors``)."""
    import airflow_provider_jetstream.operators
    import airflow_provider_jetstream.sensors

    names = set()
    for package in (airflow_provider_jetstream.operators, airflow_provider_jetstream.sensors):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            names |= {
                name
                for name, obj in vars(module).items()
                if inspect.isclass(obj)
                and obj.__module__ == info.name
                and TASK_CLASS.fullmatch(name)
                and not inspect.isabstract(obj)
                and "Base" not in name
            }
    return names


@pytest.mark.parametrize("page", [*sorted(DOCS.glob("*.md")), REPO / "README.md"], ids=lambda p: p.name)
def test_each_pages_code_imports_the_operators_and_sensors_it_uses(page: Path) -> None:
    code = python_blocks(page)
    imported = set()
    for statement in re.findall(r"^\s*from airflow_provider_jetstream[\w.]* import (\([^)]*\)|.*)$", code, re.M):
        imported |= set(re.findall(r"\w+", statement.strip("()")))
    used = {name for name in re.findall(r"\b(JetStream\w*(?:Operator|Sensor))\(", code)}
    assert sorted(used - imported) == [], f"{page.name}: import these in the page's code"


def test_dags_page_covers_every_operator_and_sensor() -> None:
    named = set(TASK_CLASS.findall((DOCS / "dags.md").read_text()))
    assert sorted(task_classes() - named) == []
