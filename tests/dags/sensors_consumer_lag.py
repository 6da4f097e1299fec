"""Test DAGs: ``JetStreamConsumerLagSensor`` in each mode; stream, consumer and domain come from params."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_jetstream.sensors.consumer_lag import JetStreamConsumerLagSensor

PARAMS = {
    "conn_id": Param("jetstream_default", type="string"),
    "domain": Param("leaf", type="string"),
    "stream": Param("sens_stream", type="string"),
    "consumer": Param("worker", type="string"),
}

for mode in ("poke", "reschedule", "deferrable"):
    for soft_fail in (False, True):
        dag_id = f"sensors_consumer_lag_{mode}" + ("_soft_fail" if soft_fail else "")
        with DAG(dag_id, schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False, params=PARAMS) as dag:
            JetStreamConsumerLagSensor(
                task_id="wait_for_consumer",
                jetstream_conn_id="{{ params.conn_id }}",
                domain="{{ params.domain }}",
                stream="{{ params.stream }}",
                consumer="{{ params.consumer }}",
                mode="reschedule" if mode == "reschedule" else "poke",
                deferrable=mode == "deferrable",
                soft_fail=soft_fail,
                poke_interval=1 if mode == "reschedule" else 0.3,
                timeout=60,
            )
        globals()[dag_id] = dag
