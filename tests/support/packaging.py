"""The wheel as a user installs it, for the packaging tests: built from the working tree, installed without
extras in a clean venv.

The wheel is built (``pip wheel --no-deps``, the backend pyproject names) from a copy of the working
tree, so no ``build/`` left over from an earlier build can add files that are gone. A new venv
without system site packages gets the wheel and only the dependencies it declares, pinned by the
constraints file ``make install`` uses for this Python. Both are made once per test session (the
fixtures ``built_wheel`` of ``tests/conftest.py`` and ``clean_venv`` of ``tests/packaging/conftest.py``);
the tests run their checks in that venv and outside the checkout, so the sources cannot be imported instead.

Nothing is mocked and nothing is skipped: every step that fails (no ``venv``/``ensurepip``, no
index, a dependency that does not resolve) fails the test with its output.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.syntax import parse_file

REPO = Path(__file__).resolve().parents[2]
DIST = "airflow-provider-jetstream"
PACKAGE = "airflow_provider_jetstream"
#: Not part of the build: caches, environments and outputs of the working tree.
NOT_SOURCES = shutil.ignore_patterns(
    ".git", ".venv", ".demo", ".stack", "node_modules", "build", "dist", "*.egg-info", "__pycache__", "*.pyc",
    ".pytest_cache", ".ruff_cache", "test-output", "spark-warehouse", "metastore_db",
)  # fmt: skip


def run(what: str, command: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess[str]:
    """Run ``command``; fail naming the step, with its output, if it fails or outlasts ``timeout``."""
    started = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{what}: no result after {timeout:.0f} s: {' '.join(command)}\n{exc.stdout}\n{exc.stderr}")
    if done.returncode != 0:
        pytest.fail(f"{what} failed (exit {done.returncode}): {' '.join(command)}\n{done.stdout}\n{done.stderr}")
    print(f"[packaging] {what}: {time.monotonic() - started:.1f} s", flush=True)
    return done


def source_version() -> str:
    """``__version__`` as the sources declare it (read, not imported: the tests run the installed one)."""
    tree = parse_file(REPO / PACKAGE / "__init__.py")
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__version__" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{PACKAGE}/__init__.py declares no __version__")


def constraints_file() -> Path:
    """The constraints ``make install`` picks for this Python: constraints-py<version>.txt if any."""
    own = REPO / f"constraints-py{sys.version_info[0]}.{sys.version_info[1]}.txt"
    return own if own.is_file() else REPO / "constraints.txt"


@dataclass(frozen=True)
class BuiltWheel:
    """The wheel built from the working tree, and what the build printed."""

    path: Path
    output: str


@dataclass(frozen=True)
class CleanVenv:
    """A venv holding the wheel and its declared dependencies only (no extra).

    :param root: the venv's directory.
    :param python: its interpreter.
    :param env: the environment to run it with: this process's, less ``PYTHON*``, ``AIRFLOW*`` and
        ``VIRTUAL_ENV`` (the test session's own Airflow home and settings).
    :param outside: a directory outside the checkout to run from.
    """

    root: Path
    python: Path
    env: dict[str, str]
    outside: Path


def build_wheel(work: Path) -> BuiltWheel:
    """Build the wheel from a copy of the working tree in ``work``."""
    source = work / "source"
    shutil.copytree(REPO, source, ignore=NOT_SOURCES, symlinks=True)
    wheels = work / "wheels"
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-v"]
    built = run("building the wheel", [*pip_wheel, "-w", str(wheels), str(source)], timeout=300)
    (wheel,) = wheels.glob("*.whl")
    return BuiltWheel(wheel, built.stdout + built.stderr)


def install_without_extras(wheel: Path, work: Path) -> CleanVenv:
    """A new venv in ``work`` (no system site packages) with ``wheel`` and the dependencies it declares,
    no extra, at the versions the tests run with."""
    venv = work / "venv"
    run("creating the venv", [sys.executable, "-m", "venv", str(venv)], timeout=120)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "AIRFLOW", "VIRTUAL_ENV"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    run(
        "installing the wheel without extras",
        # --no-compile: Airflow's thousands of modules are byte-compiled when imported, not all ahead.
        [str(python), "-m", "pip", "install", "--quiet", "--no-compile", "-c", str(constraints_file()), str(wheel)],
        timeout=600,
        env=env,
        cwd=work,
    )
    return CleanVenv(venv, python, env, work)
