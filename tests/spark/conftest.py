"""Spark tests: every test here is marked ``spark``; Spark's Python workers run this interpreter.

The SparkSession (``spark``) and the per-test streams (``make_stream``) are fixtures of ``tests/conftest.py``
(the reliability tests use them too); streams are created with nats-py directly on the session's
``hub_leaf`` topology; every name is prefixed ``spark_`` and unique per test, and hub and leaf streams
never share subjects.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test here needs a local SparkSession (Java 17+): mark them ``spark``."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.spark)
