"""Test DAGs: the object store flow: leaf bucket, hub mirror, an object waited for in the hub, got, processed."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pendulum
from airflow.sdk import DAG, Param, task

from airflow_provider_jetstream.operators.objects import JetStreamCreateObjectStoreOperator, JetStreamGetObjectOperator
from airflow_provider_jetstream.sensors.objects import JetStreamObjectSensor

PARAMS = {
    "conn_id": Param("jetstream_default", type="string"),
    "bucket": Param("files", type="string"),
    "hub_bucket": Param("files-leaf", type="string"),
    "name": Param("readings.csv", type="string"),
    "destination": Param("/tmp/readings.csv", type="string"),
}


@task
def process(fetched: dict) -> dict:
    """What a processing task does with the file the get wrote (its XCom's ``path``): count its lines, hash it."""
    data = Path(fetched["path"]).read_bytes()
    return {"lines": data.count(b"\n"), "sha256": hashlib.sha256(data).hexdigest()}


for mode in ("poke", "deferrable"):
    dag_id = f"objects_edge_files_{mode}"
    with DAG(dag_id, schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False, params=PARAMS) as dag:
        edge_bucket = JetStreamCreateObjectStoreOperator(
            task_id="edge_bucket", jetstream_conn_id="{{ params.conn_id }}", domain="leaf", bucket="{{ params.bucket }}"
        )
        hub_copy = JetStreamCreateObjectStoreOperator(
            task_id="hub_copy",
            jetstream_conn_id="{{ params.conn_id }}",
            domain="hub",
            bucket={"bucket": "{{ params.hub_bucket }}", "mirror": {"bucket": "{{ params.bucket }}", "domain": "leaf"}},
        )
        arrived = JetStreamObjectSensor(
            task_id="arrived",
            jetstream_conn_id="{{ params.conn_id }}",
            domain="hub",
            bucket="{{ params.hub_bucket }}",
            object_name="{{ params.name }}",
            deferrable=mode == "deferrable",
            poke_interval=0.3,
            timeout=60,
        )
        fetch = JetStreamGetObjectOperator(
            task_id="fetch",
            jetstream_conn_id="{{ params.conn_id }}",
            domain="hub",
            bucket="{{ params.hub_bucket }}",
            object_name="{{ params.name }}",
            local_path="{{ params.destination }}",
        )
        edge_bucket >> hub_copy >> arrived >> fetch >> process(fetch.output)
    globals()[dag_id] = dag
