"""Test DAG: ``JetStreamCreateDurableSourceOperator`` (durable sourcing, nats-server 2.14+), its arguments
from the run's params (native rendering), then the replication sensor waiting until the hub holds
everything and the leaf's stream is drained."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_provider_jetstream.operators.streams import JetStreamCreateDurableSourceOperator
from airflow_provider_jetstream.sensors.replication_lag import JetStreamReplicationLagSensor

PARAMS = {
    "conn_id": "jetstream_default",
    "name": "durable-copy",
    "origin": {},
    "origin_domain": "leaf",
    "unreachable_origins": "wait",
}

with DAG(
    "management_durable_source",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1),
    catchup=False,
    params=PARAMS,
    render_template_as_native_obj=True,
) as dag:
    source = JetStreamCreateDurableSourceOperator(
        task_id="durable_source",
        jetstream_conn_id="{{ params.conn_id }}",
        domain="hub",
        stream="{{ params.name }}",
        origin="{{ params.origin }}",
        origin_domain="{{ params.origin_domain }}",
        stream_overrides={"max_age": "1d"},
    )
    replicated = JetStreamReplicationLagSensor(
        task_id="replicated",
        jetstream_conn_id="{{ params.conn_id }}",
        domain="hub",
        stream="{{ params.name }}",
        unreachable_origins="{{ params.unreachable_origins }}",
        options={"error_grace": "60s"},
        deferrable=True,
        poke_interval=0.3,
        timeout=120,
    )
    source >> replicated
