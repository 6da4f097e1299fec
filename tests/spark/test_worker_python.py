"""A user's own SparkSession whose Python workers cannot import the package fails at ``register``,
saying to set PYSPARK_PYTHON, instead of with ModuleNotFoundError deep in a worker's traceback."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.spark.source import register, worker_python_hint, worker_python_problem


@pytest.fixture
def python3_without_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH whose ``python3`` is the base interpreter of this venv: a real Python without this package."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python3 = bin_dir / "python3"
    python3.symlink_to(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return python3


def test_local_workers_without_the_package_are_found_and_the_fix_is_named(python3_without_package: Path) -> None:
    problem = worker_python_problem("local[2]", None)
    assert problem and str(python3_without_package) in problem and "No module named" in problem
    message = worker_python_hint(problem)
    assert "PYSPARK_PYTHON" in message and "spark.pyspark.python" in message


def test_a_chosen_python_or_a_cluster_is_not_second_guessed(python3_without_package: Path) -> None:
    assert worker_python_problem("local[2]", sys.executable) is None
    assert worker_python_problem("spark://master:7077", None) is None


def test_workers_running_this_interpreter_are_fine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    assert worker_python_problem("local[2]", None) is None


def test_register_refuses_a_session_whose_workers_cannot_import_it(
    spark, python3_without_package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session's own conf has no spark.pyspark.python; with PYSPARK_PYTHON unset, register says what to set."""
    monkeypatch.delenv("PYSPARK_PYTHON")
    assert not spark.sparkContext.getConf().get("spark.pyspark.python")
    with pytest.raises(JetStreamConfigError, match=r"Set PYSPARK_PYTHON and PYSPARK_DRIVER_PYTHON"):
        register(spark)
