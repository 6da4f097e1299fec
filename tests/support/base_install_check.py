"""Run inside a venv holding the wheel without extras: what a base install imports, reads and parses, as JSON.

``python -I base_install_check.py <dags folder> <work dir>``, with ``NATS_SERVER_BIN`` naming a
``nats-server`` (the server is no dependency of the package). It records facts and prints them as one
JSON line after :data:`MARK`; ``test_base_install.py`` judges them. Steps: which optional packages
are missing; every module of the package imported (or the error it raised); a hub with leaf
``leaf-a`` from ``airflow_provider_jetstream.testing``; a stream on the leaf declared and filled
through ``JetStreamHook`` with a connection from ``AIRFLOW_CONN_NATS_HUB``; the messages read back
with ``read_range`` through the hub with the default reader, and with ``reader="vectorised"``; the
example DAGs parsed with Airflow's ``DagBag``; the reading tasks of ``jetstream_edge_events`` and
``jetstream_kv_gate`` run against the topology.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

#: Starts the report's line (Airflow may log to stdout too).
MARK = "base-install-report: "
#: Published to the leaf's stream: sensor readings as the example DAGs read them.
READINGS = [{"sensor": f"temp-{i % 2}", "value": i * (1 + i % 2)} for i in range(25)]


def import_every_module(root: Path) -> dict[str, str | None]:
    """``{module: None}`` for each module that imports, ``{module: "Type: message"}`` for the others."""
    found: dict[str, str | None] = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        try:
            importlib.import_module(name)
        except Exception as err:  # recorded for the test to judge
            found[name] = f"{type(err).__name__}: {err}"
        else:
            found[name] = None
    return found


def read_back(hook: Any, first: int, last: int, reader: str | None = None) -> dict[str, Any]:
    """Read ``readings`` ``first..last`` through the hub with ``read_range``: chunk types, sequences, payloads."""
    from airflow_provider_jetstream.core.errors import JetStreamConfigError
    from airflow_provider_jetstream.core.read.range import read_range

    async def read() -> list[Any]:
        async with hook.aconnect() as nc:
            prefix = hook.resolve_api_prefix()
            return [chunk async for chunk in read_range(nc, "readings", first, last, api_prefix=prefix, reader=reader)]

    try:
        chunks = hook.run(read())
    except JetStreamConfigError as err:
        return {"error": str(err)}
    return {
        "chunk_types": sorted({type(chunk).__name__ for chunk in chunks}),
        "sequences": [seq for chunk in chunks for seq in chunk.sequences],
        "payloads": [json.loads(data) for chunk in chunks for data in chunk.payloads],
    }


def main(dags: Path, work: Path) -> dict[str, Any]:
    report: dict[str, Any] = {
        "missing": {name: importlib.util.find_spec(name) is None for name in ("numpy", "pyarrow", "pyspark")},
        "site_packages": sysconfig.get_paths()["purelib"],
    }
    import airflow_provider_jetstream as package

    report["package_file"] = package.__file__
    started = time.monotonic()
    report["imports"] = import_every_module(Path(package.__file__).parent)
    report["import_seconds"] = round(time.monotonic() - started, 1)

    from airflow_provider_jetstream.assets.lineage import operator_lineage
    from airflow_provider_jetstream.core.read.settings import default_reader
    from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
    from airflow_provider_jetstream.testing import USERS, LocalTopology

    report["default_reader"] = default_reader()
    report["lineage_without_openlineage"] = repr(operator_lineage([], []))

    started = time.monotonic()
    with LocalTopology(work / "nats", leaf_domains=["leaf-a"]) as topology:
        user, password = USERS["ACC"]
        os.environ["AIRFLOW_CONN_NATS_HUB"] = json.dumps(
            {"conn_type": "jetstream", "host": f"127.0.0.1:{topology.hub.port}", "login": user,
             "password": password, "extra": {"domain": "hub"}}
        )  # fmt: skip
        hook = JetStreamHook("nats_hub", domain="leaf-a")
        report["test_connection"] = list(hook.test_connection())
        report["ensure_stream"] = hook.ensure_stream({"name": "readings", "subjects": ["sensors.leaf-a.>"]})["action"]
        published = hook.publish("sensors.leaf-a.temp", READINGS)
        first, last = published["first_seq"], published["last_seq"]
        report["published"] = {key: published[key] for key in ("count", "stored", "first_seq", "last_seq", "domain")}
        report["read_default"] = read_back(hook, first, last)
        report["read_vectorised"] = read_back(hook, first, last, reader="vectorised")

        # The example DAGs: Airflow's processes put the DAGs folder on sys.path (the shared config).
        sys.path.insert(0, str(dags))
        from airflow.dag_processing.dagbag import DagBag

        bag = DagBag(dag_folder=str(dags))
        report["dag_ids"] = sorted(bag.dag_ids)
        report["import_errors"] = {Path(path).name: error for path, error in bag.import_errors.items()}
        # Their reading tasks, as a worker runs them: jetstream_edge_events marks what it processed in
        # the hub's pipeline bucket (its setup DAG creates it).
        JetStreamHook("nats_hub").ensure_key_value({"bucket": "pipeline", "history": 10}, domain="hub")
        from jetstream_edge_events import process_announcements

        announced = {"batch": "b-1", "first_seq": first, "last_seq": last}
        payload = {"subject": "announce.leaf-a.batch", "seq": 1, "data": announced}
        report["edge_events"] = [process_announcements([payload]), process_announcements([payload])]
        if "jetstream_kv_gate" in bag.dags:
            process_batch = bag.dags["jetstream_kv_gate"].get_task("process_batch").python_callable
            entry = {"value": json.dumps(announced), "revision": 1}
            report["kv_gate"] = process_batch(entry, params={"leaf": "leaf-a"})
    report["topology_seconds"] = round(time.monotonic() - started, 1)
    return report


if __name__ == "__main__":
    print(MARK + json.dumps(main(Path(sys.argv[1]), Path(sys.argv[2])), default=str), flush=True)
