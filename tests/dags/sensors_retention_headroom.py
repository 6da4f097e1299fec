"""Test DAG: ``JetStreamRetentionHeadroomSensor`` run after run (its last known headroom kept across runs);
the stream from params, an origin away does not hold it back, low headroom is a warning."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_jetstream.sensors.retention_headroom import JetStreamRetentionHeadroomSensor

with DAG(
    "sensors_retention_headroom",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1),
    catchup=False,
    params={"conn_id": Param("jetstream_default", type="string"), "stream": Param("agg", type="string")},
) as dag:
    JetStreamRetentionHeadroomSensor(
        task_id="headroom",
        jetstream_conn_id="{{ params.conn_id }}",
        domain="hub",
        stream="{{ params.stream }}",
        min_time_to_loss="2h",
        low_headroom="warn",
        unreachable_origins="proceed",
        poke_interval=0.3,
        timeout=60,
    )
