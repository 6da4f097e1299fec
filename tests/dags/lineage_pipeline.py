"""Test DAGs: edge stream -> hub mirror (and a KV bucket) upstream, and downstream DAGs scheduled on their assets.

The downstream schedules name ``jetstream://lineage-nats/...``: the tests give both connections the
``asset_server`` extra ``lineage-nats``, so the URIs do not depend on the servers' ports. The names
come from ``JETSTREAM_LINEAGE_NAME`` / ``JETSTREAM_LINEAGE_PARQUET``, read when the file is parsed.
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, Asset, Param, task

from airflow_provider_jetstream.operators.kv import JetStreamCreateKeyValueOperator, JetStreamKeyValuePutOperator
from airflow_provider_jetstream.operators.publish import JetStreamPublishOperator
from airflow_provider_jetstream.operators.streams import JetStreamCreateMirrorOperator, JetStreamCreateStreamOperator

#: What every lineage test's connections name their server in asset URIs.
ASSET_SERVER = "lineage-nats"
NAME = os.environ.get("JETSTREAM_LINEAGE_NAME", "lineage")
PARQUET = os.environ.get("JETSTREAM_LINEAGE_PARQUET", "/nonexistent/lineage-parquet")

with DAG(
    "lineage_edge_to_hub",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1),
    catchup=False,
    params={
        "edge_conn": Param("jetstream_default", type="string"),
        "hub_conn": Param("jetstream_default", type="string"),
        "name": Param(NAME, type="string"),
    },
) as upstream:
    create_edge = JetStreamCreateStreamOperator(
        task_id="create_edge",
        jetstream_conn_id="{{ params.edge_conn }}",
        stream={"name": "{{ params.name }}", "subjects": ["{{ params.name }}.>"]},
    )
    publish_edge = JetStreamPublishOperator(
        task_id="publish_edge",
        jetstream_conn_id="{{ params.edge_conn }}",
        subject="{{ params.name }}.reading",
        messages=["r1", "r2", "r3"],
    )
    mirror_to_hub = JetStreamCreateMirrorOperator(
        task_id="mirror_to_hub",
        jetstream_conn_id="{{ params.hub_conn }}",
        stream="{{ params.name }}-hub",
        origin="{{ params.name }}",
        origin_domain="leaf",
    )
    create_bucket = JetStreamCreateKeyValueOperator(
        task_id="create_bucket", jetstream_conn_id="{{ params.hub_conn }}", bucket="{{ params.name }}_cfg"
    )
    put_key = JetStreamKeyValuePutOperator(
        task_id="put_key", jetstream_conn_id="{{ params.hub_conn }}", bucket="{{ params.name }}_cfg", key="k", value="v"
    )
    # Mapped: its instances share one alias outlet, declared when the DAG is parsed.
    put_keys = JetStreamKeyValuePutOperator.partial(
        task_id="put_keys", jetstream_conn_id="{{ params.hub_conn }}", bucket="{{ params.name }}_cfg"
    ).expand_kwargs([{"key": "a", "value": "1"}, {"key": "b", "value": "2"}])
    create_edge >> publish_edge >> mirror_to_hub
    create_bucket >> put_key >> put_keys

with DAG(
    "lineage_downstream",
    schedule=[Asset(f"jetstream://{ASSET_SERVER}/hub/{NAME}-hub")],
    start_date=pendulum.datetime(2026, 1, 1),
    catchup=False,
) as downstream:

    @task
    def read_hub_copy() -> None:
        """Would read the hub's copy of the edge stream."""

    read_hub_copy()

with DAG(
    "lineage_parquet_downstream",
    schedule=[Asset(f"file://{PARQUET}")],
    start_date=pendulum.datetime(2026, 1, 1),
    catchup=False,
) as parquet_downstream:

    @task
    def read_parquet() -> None:
        """Would read the Parquet copy."""

    read_parquet()
