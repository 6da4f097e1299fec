"""The README's examples run as written: users copy them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_block_under(heading: str) -> str:
    """The first ```python block after the ``## heading`` line of the README."""
    text = README.read_text()
    start = text.index(f"## {heading}\n")
    match = re.compile(r"```python\n(.*?)```", re.S).search(text, start)
    assert match, f"no python block under {heading!r}"
    return match.group(1)


def test_testing_your_own_dags_example_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    # Registered with monkeypatch, so the connection the example sets is removed afterwards.
    monkeypatch.setenv("AIRFLOW_CONN_JETSTREAM_DEFAULT", "")
    monkeypatch.delenv("AIRFLOW_CONN_JETSTREAM_DEFAULT")
    exec(compile(python_block_under("Testing your own DAGs"), str(README), "exec"), {"__name__": "readme"})
