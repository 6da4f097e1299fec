"""The wheel as a user installs it: built from the working tree, installed alone in a clean venv.

The wheel is built (``pip wheel --no-deps``, the backend pyproject names) from a copy of the
working tree, so no ``build/`` left over from an earlier build can add files that are gone. A new
venv without system site packages gets the wheel and only the dependencies it declares, pinned by
the constraints file ``make install`` uses for this Python. Then, in that venv and outside the
checkout (``python -I``, run from a temporary directory, so the sources cannot be imported instead):
Airflow's ProvidersManager finds the provider and its ``jetstream`` connection type, the packaged
Spark job is installed, and the version is the one the sources declare.

Nothing is mocked and nothing is skipped: every step that fails (no ``venv``/``ensurepip``, no
index, a dependency that does not resolve) fails the test with its output. The install fetches
Airflow's own dependencies (pip's cache makes later runs faster); the Spark extra is not installed.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DIST = "airflow-provider-jetstream"
PACKAGE = "airflow_provider_jetstream"
SPARK_JOB = f"{PACKAGE}/spark/jobs/stream_to_parquet.py"
#: Not part of the build: caches, environments and outputs of the working tree.
NOT_SOURCES = shutil.ignore_patterns(
    ".git", ".venv", ".demo", ".stack", "node_modules", "build", "dist", "*.egg-info", "__pycache__", "*.pyc",
    ".pytest_cache", ".ruff_cache", "test-output", "spark-warehouse", "metastore_db",
)  # fmt: skip

pytestmark = [pytest.mark.packaging, pytest.mark.timeout(900)]


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
    """``__version__`` as the sources declare it (read, not imported: the test runs the installed one)."""
    tree = ast.parse((REPO / PACKAGE / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__version__" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{PACKAGE}/__init__.py declares no __version__")


def constraints_file() -> Path:
    """The constraints ``make install`` picks for this Python: constraints-py<version>.txt if any."""
    own = REPO / f"constraints-py{sys.version_info[0]}.{sys.version_info[1]}.txt"
    return own if own.is_file() else REPO / "constraints.txt"


#: Run inside the clean venv: what Airflow and the installed package report, as JSON.
CHECK = """
import importlib.metadata, importlib.resources, json, sys, sysconfig
import airflow_provider_jetstream as package
from airflow.providers_manager import ProvidersManager

manager = ProvidersManager()
provider = manager.providers.get("airflow-provider-jetstream")
hook = manager.hooks["jetstream"] if "jetstream" in manager.hooks else None
job = importlib.resources.files("airflow_provider_jetstream") / "spark" / "jobs" / "stream_to_parquet.py"
print(json.dumps({
    "prefix": sys.prefix,
    "base_prefix": sys.base_prefix,
    "site_packages": sysconfig.get_paths()["purelib"],
    "providers": sorted(manager.providers),
    "provider_version": provider.version if provider else None,
    "hook": None if hook is None else {
        "class": hook.hook_class_name, "package": hook.package_name, "name": hook.hook_name,
        "conn_type": hook.connection_type,
    },
    "package_file": package.__file__,
    "version": package.__version__,
    "dist_version": importlib.metadata.version("airflow-provider-jetstream"),
    "spark_job": str(job) if job.is_file() else None,
    "distributions": sorted(d.metadata["Name"].lower() for d in importlib.metadata.distributions()),
}))
"""


def test_the_wheel_installs_alone_and_airflow_finds_the_provider(tmp_path: Path) -> None:
    version = source_version()

    # The wheel, from a copy of the working tree.
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=NOT_SOURCES, symlinks=True)
    wheels = tmp_path / "wheels"
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-v"]
    built = run("building the wheel", [*pip_wheel, "-w", str(wheels), str(source)], timeout=300)
    # No deprecation of the license metadata (a TOML table or classifiers: builds stop after 2027-02-18).
    warned = [line for line in (built.stdout + built.stderr).splitlines() if "deprecat" in line.lower()]
    assert not [line for line in warned if "license" in line.lower()], "\n".join(warned)
    (wheel,) = wheels.glob("*.whl")
    assert wheel.name == f"{PACKAGE}-{version}-py3-none-any.whl"

    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(f"{PACKAGE}-{version}.dist-info/METADATA").decode()
        entry_points = archive.read(f"{PACKAGE}-{version}.dist-info/entry_points.txt").decode()
    assert SPARK_JOB in names
    assert f"{PACKAGE}-{version}.dist-info/licenses/LICENSE" in names
    assert "License-Expression: Apache-2.0" in metadata.splitlines()
    assert "[apache_airflow_provider]" in entry_points
    assert not [name for name in names if name.split("/")[0] not in (PACKAGE, f"{PACKAGE}-{version}.dist-info")]

    # A clean venv: no system site packages, nothing but pip.
    venv = tmp_path / "venv"
    run("creating the venv", [sys.executable, "-m", "venv", str(venv)], timeout=120)
    python = venv / "bin" / "python"
    assert "include-system-site-packages = false" in (venv / "pyvenv.cfg").read_text()

    # The wheel and the dependencies it declares, no extra, at the versions the tests run with.
    constraints = constraints_file()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "AIRFLOW", "VIRTUAL_ENV"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    run(
        "installing the wheel",
        # --no-compile: Airflow's thousands of modules are byte-compiled when imported, not all ahead.
        [str(python), "-m", "pip", "install", "--quiet", "--no-compile", "-c", str(constraints), str(wheel)],
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    run("pip check in the venv", [str(python), "-m", "pip", "check"], timeout=120, env=env, cwd=tmp_path)

    # In the venv, outside the checkout: Airflow's view and the installed package's.
    env["AIRFLOW_HOME"] = str(tmp_path / "airflow-home")
    checked = run("checking the install", [str(python), "-I", "-c", CHECK], timeout=300, env=env, cwd=tmp_path)
    report = json.loads(checked.stdout.strip().splitlines()[-1])

    assert Path(report["prefix"]) == venv and report["prefix"] != report["base_prefix"]
    site_packages = Path(report["site_packages"])
    assert Path(report["package_file"]).is_relative_to(site_packages), report["package_file"]
    # (c) the package imports, at the sources' version
    assert report["version"] == report["dist_version"] == version
    # (a) Airflow discovers the provider and its connection type, with its hook
    assert DIST in report["providers"], report["providers"]
    assert report["provider_version"] == version
    assert report["hook"] is not None, "ProvidersManager lists no hook for the 'jetstream' connection type"
    assert report["hook"]["conn_type"] == "jetstream"
    assert report["hook"]["package"] == DIST
    assert report["hook"]["name"] == "NATS JetStream"
    assert report["hook"]["class"].startswith(f"{PACKAGE}.")
    # (b) the packaged Spark job is installed with the package
    assert report["spark_job"] is not None, f"{SPARK_JOB} is not in the installed package"
    assert Path(report["spark_job"]) == site_packages / SPARK_JOB
    # only the declared dependencies: no extra came along
    extras_only = {"pyspark", "pyspark-client", "pyarrow", "pytest", "playwright", "psycopg2-binary", "asyncpg"}
    assert not set(report["distributions"]) & extras_only, report["distributions"]
