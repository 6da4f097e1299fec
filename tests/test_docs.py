"""The documentation site's sources: every page reachable from the toctree, the example DAGs shown from the
tested files, and the pages' examples run as written (CI builds the site itself with `make docs`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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
