"""The test suite's own layout: shared helpers live in ``tests/support``, never in a test module or a conftest."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.syntax import parse_file

TESTS = Path(__file__).resolve().parent
#: What a test module may import from the suite: the shared helpers, and the DAG files Airflow loads.
SHARED = ("tests.support", "tests.dags")


def _imported_modules(path: Path) -> list[str]:
    names = []
    for node in ast.walk(parse_file(path)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
    return names


def test_no_test_module_or_conftest_imports_another_one() -> None:
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        for name in _imported_modules(path):
            ours = name == "tests" or name.startswith("tests.")
            if ours and not any(name == shared or name.startswith(shared + ".") for shared in SHARED):
                offenders.append(f"{path.relative_to(TESTS.parent)} imports {name}")
    assert offenders == []


def test_every_support_module_opens_with_a_one_line_summary() -> None:
    missing = []
    for path in sorted((TESTS / "support").rglob("*.py")):
        doc = ast.get_docstring(parse_file(path))
        if not doc or not doc.splitlines()[0].strip():
            missing.append(str(path.relative_to(TESTS.parent)))
    assert missing == []
