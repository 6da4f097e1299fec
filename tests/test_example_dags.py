"""The example DAGs in dags/: they load, and run through dag.test() against a hub with two leaves."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import nats
import pytest

from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.testing.servers import LocalTopology
from tests.support.airflow_names import DagBag
from tests.support.waiting import scaled

REPO = Path(__file__).resolve().parents[1]
# Airflow puts the DAGs folder on sys.path in its processes, so DAG files import their shared config.
sys.path.insert(0, str(REPO / "dags"))
import edge_pipeline_config as cfg  # noqa: E402

DAG_IDS = {"jetstream_edge_to_hub", "jetstream_kv_gate", "jetstream_maintenance"}
#: The edge-to-hub DAG's tasks, for any number of leaves: the per-leaf steps are mapped at run time.
EDGE_TO_HUB_TASKS = [
    "check_retention_headroom",
    "each_leaf",
    "ensure_hub_aggregate",
    "ensure_hub_commands",
    "ensure_leaf_commands_mirror",
    "ensure_leaf_readings",
    "ensure_pipeline_bucket",
    "find_reachable_leaves",
    "hub_aggregate_sources",
    "mark_run",
    "readings_to_parquet",
    "wait_replicated",
]
MAPPED_LEAF_STEPS = ("ensure_leaf_readings", "ensure_leaf_commands_mirror")


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


def mapped_states(run: Any, task_id: str) -> dict[str, str]:
    """The states of a mapped task's instances in a run, by their rendered map index (the leaf)."""
    return {ti.rendered_map_index: ti.state for ti in run.get_task_instances() if ti.task_id == task_id}


def xcom_of(run: Any, task_id: str) -> Any:
    return run.get_task_instance(task_id).xcom_pull(task_ids=task_id)


def parquet_rows_per_leaf(output: Path) -> dict[str, int]:
    import pyarrow.dataset as ds

    table = ds.dataset(output / "readings", format="parquet", partitioning="hive").to_table()
    rows: dict[str, int] = {}
    for subject in table.column("subject").to_pylist():  # edge.<leaf>.temp: the origin kept in the hub
        rows[subject.split(".")[1]] = rows.get(subject.split(".")[1], 0) + 1
    assert len(set(table.column("seq").to_pylist())) == table.num_rows  # each sequence once
    return rows


@pytest.mark.spark
def test_edge_to_hub_runs_incrementally_and_goes_on_without_a_leaf_that_is_away(
    airflow_db, dagbag, edge_topology, tmp_path
) -> None:
    """Run 1 copies both leaves' readings and checks their retention headroom. With leaf-b cut off, run 2
    skips leaf-b's mapped instances and succeeds with leaf-a's new readings only; once leaf-b is back, run 3
    copies its late readings, once. Maintenance then purges what was processed."""
    for leaf, count in (("leaf-a", 30), ("leaf-b", 20)):
        asyncio.run(publish_readings(edge_topology, leaf, count))
    dag = dagbag.dags["jetstream_edge_to_hub"]
    run = dag.test(run_conf={"output_dir": str(tmp_path)})
    assert run.state == "success"
    assert xcom_of(run, "find_reachable_leaves")["leaves"] == ["leaf-a", "leaf-b"]
    for task_id in MAPPED_LEAF_STEPS:  # one mapped instance per leaf, named by it
        assert mapped_states(run, task_id) == {"leaf-a": "success", "leaf-b": "success"}, task_id
    assert parquet_rows_per_leaf(tmp_path) == {"leaf-a": 30, "leaf-b": 20}  # the origin kept in the hub's subjects
    # Every run checks each leaf's retention headroom: nothing uncopied, 7 days of max_age left.
    headroom = run.get_task_instance("check_retention_headroom")
    assert headroom.state == "success"
    report = headroom.xcom_pull(task_ids="check_retention_headroom")
    assert report["low_headroom"] == [] and len(report["origins"]) == 2
    assert all(o["headroom"]["uncopied_msgs"] == 0 for o in report["origins"])
    assert all(o["headroom"]["binding_limit"] == "max_age" for o in report["origins"])

    edge_topology.disconnect_leaf("leaf-b")
    asyncio.run(publish_readings(edge_topology, "leaf-a", 5))
    asyncio.run(publish_readings(edge_topology, "leaf-b", 7))  # the edge keeps publishing on its own server
    run = dag.test(run_conf={"output_dir": str(tmp_path)})
    assert run.state == "success"
    for task_id in MAPPED_LEAF_STEPS:
        assert mapped_states(run, task_id) == {"leaf-a": "success", "leaf-b": "skipped"}, task_id
    reach = xcom_of(run, "find_reachable_leaves")
    assert reach["leaves"] == ["leaf-a", "leaf-b"] and reach["reachable"] == ["leaf-a"]
    assert [away["leaf"] for away in reach["unreachable"]] == ["leaf-b"]
    assert [origin["domain"] for origin in xcom_of(run, "wait_replicated")["unreachable"]] == ["leaf-b"]
    states = {ti.task_id: ti.state for ti in run.get_task_instances() if ti.map_index < 0}
    assert {
        task: states[task] for task in ("ensure_hub_aggregate", "readings_to_parquet", "mark_run")
    } == dict.fromkeys(("ensure_hub_aggregate", "readings_to_parquet", "mark_run"), "success")
    assert parquet_rows_per_leaf(tmp_path) == {"leaf-a": 35, "leaf-b": 20}  # the new reachable data only, once
    hub = JetStreamHook("nats_hub", domain=cfg.HUB_DOMAIN)
    assert json.loads(hub.kv_get(cfg.PIPELINE_BUCKET, cfg.LAST_RUN_KEY).value)["proceeded_without"] == "leaf-b"

    edge_topology.reconnect_leaf("leaf-b")
    run = dag.test(run_conf={"output_dir": str(tmp_path)})
    assert run.state == "success"
    for task_id in MAPPED_LEAF_STEPS:
        assert mapped_states(run, task_id) == {"leaf-a": "success", "leaf-b": "success"}, task_id
    assert parquet_rows_per_leaf(tmp_path) == {"leaf-a": 35, "leaf-b": 27}  # leaf-b's late readings, once

    maintenance = dagbag.dags["jetstream_maintenance"]
    run = maintenance.test()
    assert run.state == "success"
    assert run.get_task_instance("purge_processed").xcom_pull(task_ids="purge_processed")["purged"] == 62


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


@pytest.mark.spark  # the DAG imports the Spark operator: the spark extra
def test_a_leaf_step_skips_when_its_leaf_is_away_or_goes_away_after_the_check(dagbag, edge_topology) -> None:
    """Each mapped step as the task runner unmaps it for one leaf: away at the check, it skips without a
    request; cut off after a check that found it, it skips with the reason instead of failing."""
    from airflow_provider_jetstream.compat import AirflowSkipException

    edge_topology.disconnect_leaf("leaf-b")
    dag = dagbag.dags["jetstream_edge_to_hub"]
    for task_id in MAPPED_LEAF_STEPS:
        mapped = dag.get_task(task_id)
        away = mapped.unmap({"leaf": "leaf-b", "unreachable": "no responders"})
        assert away.domain == "leaf-b"
        with pytest.raises(AirflowSkipException, match=r"leaf 'leaf-b' is away \(no responders\)"):
            away.execute({})
        went_away = mapped.unmap({"leaf": "leaf-b", "unreachable": None})
        with pytest.raises(AirflowSkipException, match="leaf 'leaf-b' went away after the reachability check"):
            went_away.execute({})


@pytest.mark.spark  # the DAG imports the Spark operator: the spark extra
def test_edge_to_hub_refuses_a_bad_leaf_list_before_changing_anything(
    airflow_db, dagbag, edge_topology, monkeypatch
) -> None:
    """The run's leaves come from the Airflow Variable (here from the environment, as Airflow reads one):
    a name that is not a domain fails the first task, without retries, and nothing is created anywhere."""
    monkeypatch.setenv(f"AIRFLOW_VAR_{cfg.LEAF_DOMAINS_VARIABLE.upper()}", "leaf-a,leaf b")
    run = dagbag.dags["jetstream_edge_to_hub"].test()
    assert run.state == "failed"
    probe = run.get_task_instance("find_reachable_leaves")
    assert probe.state == "failed" and probe.try_number == 1  # a refusal: not retried
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert "success" not in states.values(), states
    for domain in (cfg.HUB_DOMAIN, "leaf-a", "leaf-b"):
        hook = JetStreamHook("nats_hub", domain=domain)
        assert hook.run(streams_in(hook)) == [], domain


async def streams_in(hook: JetStreamHook) -> list[str]:
    async with hook.ajetstream() as js:
        return [info.config.name for info in await js.streams_info()]


def test_a_leaf_list_is_checked_with_clear_refusals() -> None:
    assert cfg.leaf_domains_from(" leaf-a, leaf-b ,", "JETSTREAM_LEAF_DOMAINS") == ["leaf-a", "leaf-b"]
    assert cfg.leaf_domains_from('["leaf-a", "leaf-b"]', "v") == ["leaf-a", "leaf-b"]
    refusals = {
        "leaf-a,leaf b": "JETSTREAM_LEAF_DOMAINS='leaf b' is not a JetStream domain name",
        "leaf-a,leaf.b": "JETSTREAM_LEAF_DOMAINS='leaf.b' is not a JetStream domain name",
        " , ": "list at least one leaf domain",
        "leaf-a,leaf-a": "listed more than once: ['leaf-a']",
        f"leaf-a,{cfg.HUB_DOMAIN}": "is the hub's domain, not a leaf's",
        '["leaf-a", 5]': "JETSTREAM_LEAF_DOMAINS=5 is not a JetStream domain name",
        '["leaf-a"': "not a JSON list of domain names",
    }
    for text, message in refusals.items():
        with pytest.raises(ValueError) as refused:
            cfg.leaf_domains_from(text, "JETSTREAM_LEAF_DOMAINS")
        assert message in str(refused.value), (text, str(refused.value))


PARSE_CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[2])
from tests.support.airflow_names import DagBag
from airflow.serialization.serialized_objects import DagSerialization

DagBag(dag_folder=sys.argv[1])  # imports warm, as in a dag-processor that has parsed the file before
started = time.perf_counter()
bag = DagBag(dag_folder=sys.argv[1])
seconds = time.perf_counter() - started
assert not bag.import_errors, bag.import_errors
dag = bag.dags["jetstream_edge_to_hub"]
serialized = json.dumps(DagSerialization.to_dict(dag))
print("RESULT " + json.dumps({"seconds": seconds, "tasks": sorted(t.task_id for t in dag.tasks),
                              "mapped": sorted(t.task_id for t in dag.tasks if t.is_mapped),
                              "serialized": serialized}))
"""


def parse_edge_to_hub(leaves: list[str], airflow_home: Path) -> dict[str, Any]:
    """The edge-to-hub DAG file parsed in a fresh process with ``JETSTREAM_LEAF_DOMAINS`` set to ``leaves``."""
    env = {**os.environ, "JETSTREAM_LEAF_DOMAINS": ",".join(leaves), "AIRFLOW_HOME": str(airflow_home)}
    command = [sys.executable, "-c", PARSE_CHILD, str(REPO / "dags" / "jetstream_edge_to_hub.py"), str(REPO / "dags")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=scaled(120), check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, done.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


@pytest.mark.spark  # the DAG imports the Spark operator: the spark extra
def test_edge_to_hub_has_the_same_tasks_for_any_number_of_leaves(airflow_db) -> None:
    """1,000 leaves parse as fast as 2 and give the same 11 tasks: the leaves are mapped at run time,
    not written into the DAG (the per-leaf layout had 3 tasks per leaf and took seconds to parse)."""
    few = parse_edge_to_hub(["leaf-a", "leaf-b"], airflow_db)
    many = parse_edge_to_hub([f"leaf-{i:04d}" for i in range(1000)], airflow_db)
    assert few["tasks"] == many["tasks"] == EDGE_TO_HUB_TASKS
    assert few["mapped"] == many["mapped"] == sorted(MAPPED_LEAF_STEPS)
    assert "leaf-0999" not in many["serialized"]  # no leaf is in the DAG: each run reads its own list
    assert len(many["serialized"]) == len(few["serialized"])
    # The per-leaf layout took 2.7 s here at 1,000 leaves, imports warm, on a quiet 2-core machine.
    assert many["seconds"] < scaled(1.0), many["seconds"]
