"""The example DAG ``jetstream_edge_to_hub`` with ``JETSTREAM_LEAF_STREAM_MODE=durable`` (nats-server 2.14+):
each leaf's work queue, consumer and hub source set up by the leaf's mapped step (one leaf at a time), and
the replication sensor done once the hub holds every reading and the leaves' streams are drained, and the
Spark job writing every reading once (the first run, with no readings yet, marks the Spark steps done)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from airflow_provider_jetstream.testing.servers import LocalTopology
from tests.support.airflow_names import DagBag
from tests.support.management import Raw
from tests.support.natsutil import server_version
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
CONFIG_MODULE = "edge_pipeline_config"


@pytest.fixture
def durable_mode(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The example DAGs' config read again in durable mode; the previous config module back afterwards."""
    monkeypatch.setenv("JETSTREAM_LEAF_STREAM_MODE", "durable")
    monkeypatch.syspath_prepend(str(REPO / "dags"))
    previous = sys.modules.pop(CONFIG_MODULE, None)
    try:
        yield
    finally:
        sys.modules.pop(CONFIG_MODULE, None)
        if previous is not None:
            sys.modules[CONFIG_MODULE] = previous


def _leaf_messages(raw: Raw, leaf: str) -> int:
    return raw.request(f"$JS.{leaf}.API.STREAM.INFO.readings", server=leaf)["state"]["messages"]


@pytest.mark.spark
def test_the_example_dag_in_durable_mode_copies_every_reading_once_and_drains_the_leaves(
    airflow_db, make_topology, monkeypatch, durable_mode, tmp_path
) -> None:
    topology: LocalTopology = make_topology(leaf_domains=["leaf-a", "leaf-b"])
    assert server_version(topology.hub) >= (2, 14), "durable sourcing needs nats-server 2.14+"
    monkeypatch.setenv(
        "AIRFLOW_CONN_NATS_HUB",
        json.dumps({"conn_type": "jetstream", "host": f"127.0.0.1:{topology.hub.port}", "login": "acc",
                    "password": "acc", "extra": {"domain": "hub"}}),
    )  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    raw = Raw(topology)
    dag = DagBag(dag_folder=str(REPO / "dags" / "jetstream_edge_to_hub.py")).dags["jetstream_edge_to_hub"]
    spark_steps = "^(readings_to_parquet|mark_run)$"

    first = dag.test(run_conf={"output_dir": str(tmp_path)}, mark_success_pattern=spark_steps)
    assert first.state == "success"
    steps = {ti.rendered_map_index: ti for ti in first.get_task_instances() if ti.task_id == "ensure_leaf_readings"}
    assert sorted(steps) == ["leaf-a", "leaf-b"]
    for step in steps.values():
        made = step.xcom_pull(task_ids="ensure_leaf_readings", map_indexes=step.map_index)
        assert made["origin"]["state"]["messages"] == 0 and made["consumer"]["name"] == "sourcing-readings-all"
    info = raw.info("hub", "readings-all")
    assert sorted(s["consumer"]["name"] for s in info["config"]["sources"]) == ["sourcing-readings-all"] * 2

    for leaf, count in (("leaf-a", 30), ("leaf-b", 20)):
        raw.publish(f"sensors.{leaf}.temp", [b"%d" % i for i in range(count)], server=leaf)
    second = dag.test(run_conf={"output_dir": str(tmp_path)})  # the Spark job runs this time
    assert second.state == "success"
    readings = ds.dataset(tmp_path / "readings", format="parquet", partitioning="hive").to_table()
    per_leaf = Counter(subject.split(".")[1] for subject in readings.column("subject").to_pylist())
    assert per_leaf == {"leaf-a": 30, "leaf-b": 20}
    assert len(set(readings.column("seq").to_pylist())) == 50  # every reading once
    report = second.get_task_instance("wait_replicated").xcom_pull(task_ids="wait_replicated")
    assert report["caught_up"] is True
    assert [o["check"] for o in report["origins"]] == ["durable", "durable"]
    assert raw.info("hub", "readings-all")["state"]["messages"] == 50
    for leaf in ("leaf-a", "leaf-b"):
        assert wait_until(lambda leaf=leaf: _leaf_messages(raw, leaf), lambda n: n == 0, what=f"{leaf} drained") == 0
