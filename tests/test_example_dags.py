"""The example DAGs in dags/: they load, and run through dag.test() against a hub with two leaves."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from pathlib import Path

import nats
import pytest
from airflow.dag_processing.dagbag import DagBag

from airflow_provider_jetstream.testing.servers import LocalTopology

REPO = Path(__file__).resolve().parents[1]
# Airflow puts the DAGs folder on sys.path in its processes, so DAG files import their shared config.
sys.path.insert(0, str(REPO / "dags"))
DAG_IDS = {"jetstream_edge_to_hub", "jetstream_kv_gate", "jetstream_maintenance"}


@pytest.fixture(scope="module")
def dagbag(airflow_db) -> DagBag:
    return DagBag(dag_folder=str(REPO / "dags"))


def test_every_dag_file_loads_with_docs(dagbag: DagBag) -> None:
    assert dagbag.import_errors == {}
    assert set(dagbag.dag_ids) >= DAG_IDS
    for dag_id in DAG_IDS:
        assert dagbag.dags[dag_id].doc_md, dag_id


@pytest.fixture
def edge_topology(make_topology, monkeypatch, tmp_path) -> LocalTopology:
    """The demo's topology (hub + leaf-a + leaf-b) and the connections the DAGs default to."""
    topology = make_topology(leaf_domains=["leaf-a", "leaf-b"])
    monkeypatch.setenv(
        "AIRFLOW_CONN_NATS_HUB",
        json.dumps({"conn_type": "jetstream", "host": f"127.0.0.1:{topology.hub.port}", "login": "acc",
                    "password": "acc", "extra": {"domain": "hub"}}),
    )  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    return topology


async def publish_readings(topology: LocalTopology, leaf: str, count: int) -> tuple[int, int]:
    """An edge process: readings published on the leaf server itself; returns the sequence range."""
    nc = await nats.connect(topology.url(leaf))
    try:
        js = nc.jetstream()
        from nats.js.api import StreamConfig

        try:
            await js.stream_info("readings")
        except nats.js.errors.NotFoundError:
            await js.add_stream(StreamConfig(name="readings", subjects=[f"sensors.{leaf}.>"], max_age=7 * 86400))
        acks = [
            await js.publish(f"sensors.{leaf}.temp", json.dumps({"sensor": f"temp-{i % 2}", "value": i}).encode())
            for i in range(count)
        ]
        return acks[0].seq, acks[-1].seq
    finally:
        await nc.drain()


@pytest.mark.spark
def test_edge_to_hub_runs_incrementally(airflow_db, dagbag, edge_topology, tmp_path) -> None:
    import pyarrow.dataset as ds

    for leaf, count in (("leaf-a", 30), ("leaf-b", 20)):
        asyncio.run(publish_readings(edge_topology, leaf, count))
    dag = dagbag.dags["jetstream_edge_to_hub"]
    run = dag.test(run_conf={"output_dir": str(tmp_path)})
    assert run.state == "success"
    table = ds.dataset(tmp_path / "readings", format="parquet", partitioning="hive").to_table()
    assert table.num_rows == 50
    subjects = {s.split(".")[1] for s in table.column("subject").to_pylist()}
    assert subjects == {"leaf-a", "leaf-b"}  # the origin is kept in the hub's subjects
    # Every run checks each leaf's retention headroom: nothing uncopied, 7 days of max_age left.
    headroom = run.get_task_instance("check_retention_headroom")
    assert headroom.state == "success"
    report = headroom.xcom_pull(task_ids="check_retention_headroom")
    assert report["low_headroom"] == [] and len(report["origins"]) == 2
    assert all(o["headroom"]["uncopied_msgs"] == 0 for o in report["origins"])
    assert all(o["headroom"]["binding_limit"] == "max_age" for o in report["origins"])

    asyncio.run(publish_readings(edge_topology, "leaf-a", 5))
    run = dag.test(run_conf={"output_dir": str(tmp_path)})
    assert run.state == "success"
    table = ds.dataset(tmp_path / "readings", format="parquet", partitioning="hive").to_table()
    assert table.num_rows == 55 and len(set(table.column("seq").to_pylist())) == 55  # new data only, once

    maintenance = dagbag.dags["jetstream_maintenance"]
    run = maintenance.test()
    assert run.state == "success"
    assert run.get_task_instance("purge_processed").xcom_pull(task_ids="purge_processed")["purged"] == 55


def test_kv_gate_waits_for_the_leaf_key(airflow_db, dagbag, edge_topology) -> None:
    """The gate creates the leaf's announcement bucket itself, waits for the edge's key, processes the batch."""
    first, last = asyncio.run(publish_readings(edge_topology, "leaf-a", 12))
    bucket = "edge-status-leaf-a"

    async def edge_status(action: str) -> object:
        nc = await nats.connect(edge_topology.url("leaf-a"))
        try:
            js = nc.jetstream()
            if action == "bucket_exists":
                try:
                    await js.key_value(bucket)
                    return True
                except nats.js.errors.BucketNotFoundError:
                    return False
            if action == "watched":  # the gate's KV watch is a consumer on the bucket's stream
                return (await js.stream_info(f"KV_{bucket}")).state.consumer_count > 0
            kv = await js.key_value(bucket)
            if action == "announce":
                return await kv.put(
                    "batch.ready", json.dumps({"batch": "b-1", "first_seq": first, "last_seq": last}).encode()
                )
            keys = {}
            for key in ("batch.ready", "batch.processed"):
                try:
                    keys[key] = (await kv.get(key)).value
                except nats.js.errors.KeyNotFoundError:
                    keys[key] = None
            return keys
        finally:
            await nc.close()

    assert not asyncio.run(edge_status("bucket_exists"))  # nobody prepared the edge: the DAG must

    def announce_later() -> None:
        deadline = time.monotonic() + 120
        while not asyncio.run(edge_status("bucket_exists")) and time.monotonic() < deadline:
            time.sleep(0.2)
        while not asyncio.run(edge_status("watched")) and time.monotonic() < deadline:
            time.sleep(0.2)
        watching.set()  # the DAG is waiting for the key now: the edge announces it
        asyncio.run(edge_status("announce"))

    watching = threading.Event()
    announcer = threading.Thread(target=announce_later)
    announcer.start()
    run = dagbag.dags["jetstream_kv_gate"].test(run_conf={"leaf": "leaf-a"})
    announcer.join()
    assert run.state == "success"
    assert watching.is_set()  # it was waiting on the key before the edge announced it
    result = run.get_task_instance("process_batch").xcom_pull(task_ids="process_batch")
    assert result["readings"] == 12 and result["mean_by_sensor"] == {"temp-0": 5.0, "temp-1": 6.0}
    keys = asyncio.run(edge_status("read"))
    assert keys["batch.ready"] is None  # consumed, so the next run waits for a new batch
    assert json.loads(keys["batch.processed"])["batch"] == "b-1"
