"""``JetStreamObjectSensor`` through ``dag.test()``: an object written at the edge, read in the hub."""

from __future__ import annotations

import hashlib

import pytest

from airflow_provider_jetstream.core.errors import SpecErrors
from airflow_provider_jetstream.sensors.objects import JetStreamObjectSensor
from tests.dags import objects_edge_files as dags
from tests.support.lineage import asset_events
from tests.support.logs import LogLines, captured_logs
from tests.support.natsutil import connect, unique
from tests.support.waiting import Later

READINGS = b"".join(b"leaf-a,t%d,%d.5\n" % (i, i) for i in range(20_000))  # ~330 kB: three chunks


def edge_writes_later(url: str, bucket: str, name: str, logs: LogLines) -> Later:
    """The edge application (nats-py's own object store, on the leaf server): once the DAG's sensor found the
    object absent in the hub, it puts the file into its leaf bucket."""

    async def write() -> str:
        await logs.wait_for(f"object {name!r} is absent", timeout=60)
        nc = await connect(url)
        try:
            store = await nc.jetstream().object_store(bucket)
            info = await store.put(name, READINGS)
            return info.digest
        finally:
            await nc.close()

    worker = Later(write)
    worker.start()
    return worker


@pytest.mark.parametrize("mode", ["poke", "deferrable"])
def test_an_edge_file_reaches_the_hub_mirror_and_is_processed(airflow_db, hub_leaf, hub_conn, tmp_path, mode) -> None:
    bucket, name = unique("files"), "day-1/readings.csv"
    copy = f"{bucket}-hub"
    destination = tmp_path / "readings.csv"
    with captured_logs() as logs:
        edge = edge_writes_later(hub_leaf.url("leaf"), bucket, name, logs)
        run = getattr(dags, f"objects_edge_files_{mode}").test(
            run_conf={
                "conn_id": hub_conn,
                "bucket": bucket,
                "hub_bucket": copy,
                "name": name,
                "destination": str(destination),
            }
        )
        digest = edge.finish()
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states == dict.fromkeys(["edge_bucket", "hub_copy", "arrived", "fetch", "process"], "success")
    arrived = run.get_task_instance("arrived").xcom_pull(task_ids="arrived")
    assert (arrived["bucket"], arrived["name"], arrived["size"], arrived["target"]) == (
        copy,
        name,
        len(READINGS),
        "domain 'hub'",
    )
    fetched = run.get_task_instance("fetch").xcom_pull(task_ids="fetch")
    assert fetched["digest"] == digest and fetched["path"] == str(destination)
    processed = run.get_task_instance("process").xcom_pull(task_ids="process")
    assert processed == {"lines": 20_000, "sha256": hashlib.sha256(READINGS).hexdigest()}
    # Lineage: each bucket is its stream's asset, jetstream://<server>/<domain>/OBJ_<bucket>.
    server = f"jetstream://127.0.0.1:{hub_leaf.hub.port}"
    assert [(e["task_id"], e["extra"]["action"]) for e in asset_events(f"{server}/leaf/OBJ_{bucket}")] == [
        ("edge_bucket", "created")
    ]
    assert [(e["task_id"], e["extra"]["action"]) for e in asset_events(f"{server}/hub/OBJ_{copy}")] == [
        ("hub_copy", "created")
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bucket": "a b", "object_name": "x"}, "bucket='a b' is not allowed"),
        ({"bucket": "files", "object_name": ""}, "object_name='' is not allowed"),
        ({"bucket": "files", "object_name": "x", "after_revision": -1}, "after_revision=-1 is not allowed"),
    ],
)
def test_bad_arguments_are_refused_when_the_dag_is_parsed(kwargs, message) -> None:
    with pytest.raises(SpecErrors, match=message):
        JetStreamObjectSensor(task_id="s", **kwargs)
