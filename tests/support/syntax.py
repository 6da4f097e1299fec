"""Python files as syntax trees, for the tests that read the package's and the suite's code."""

from __future__ import annotations

import ast
from pathlib import Path


def parse_file(path: Path) -> ast.Module:
    """The syntax tree of the Python file at ``path``.

    CPython 3.11 can raise a spurious ``SystemError: AST constructor recursion depth mismatch`` when another
    thread builds a syntax tree at the same moment (gh-106905; a Spark or Airflow thread left running in the test
    worker): the file is then parsed again, as its text did not change.
    """
    source = path.read_text()
    for _ in range(2):
        try:
            return ast.parse(source)
        except SystemError as err:
            if "recursion depth mismatch" not in str(err):
                raise
    return ast.parse(source)
