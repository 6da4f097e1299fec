"""Test DAGs: ``JetStreamAwaitMessageSensor`` in poke and deferrable modes; where and how to ack come from params."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_jetstream.sensors.await_message import JetStreamAwaitMessageSensor

PARAMS = {
    "conn_id": Param("jetstream_default", type="string"),
    "domain": Param("leaf", type="string"),
    "stream": Param("await_stream", type="string"),
    "ack_mode": Param("all_seen", type="string"),
}

for mode in ("poke", "deferrable"):
    dag_id = f"sensors_await_message_{mode}"
    with DAG(dag_id, schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False, params=PARAMS) as dag:
        JetStreamAwaitMessageSensor(
            task_id="wait_for_message",
            jetstream_conn_id="{{ params.conn_id }}",
            domain="{{ params.domain }}",
            stream="{{ params.stream }}",
            apply_function="tests.support.matchers.done_for_site",
            apply_function_kwargs={"site": "lyon"},
            ack_mode="{{ params.ack_mode }}",
            deliver_policy="all",
            max_wait=1,
            deferrable=mode == "deferrable",
            poke_interval=0.3,
            timeout=90,
        )
    globals()[dag_id] = dag
