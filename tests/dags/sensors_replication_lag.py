"""Test DAGs: ``JetStreamReplicationLagSensor`` in poke and deferrable modes; stream and domain from params."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_jetstream.compat import AIRFLOW_V_3_3_PLUS
from airflow_provider_jetstream.sensors.replication_lag import JetStreamReplicationLagSensor

PARAMS = {
    "conn_id": Param("jetstream_default", type="string"),
    "domain": Param("hub", type="string"),
    "stream": Param("sens_stream", type="string"),
}

for mode in ("poke", "reschedule", "deferrable"):
    dag_id = f"sensors_replication_lag_{mode}"
    with DAG(dag_id, schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False, params=PARAMS) as dag:
        JetStreamReplicationLagSensor(
            task_id="wait_for_replication",
            jetstream_conn_id="{{ params.conn_id }}",
            domain="{{ params.domain }}",
            stream="{{ params.stream }}",
            options={"max_inactive": "3s", "error_grace": "60s"},
            mode="reschedule" if mode == "reschedule" else "poke",
            deferrable=mode == "deferrable",
            poke_interval=1 if mode == "reschedule" else 0.3,
            timeout=90,
        )
    globals()[dag_id] = dag

with DAG(
    "sensors_replication_lag_error",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1),
    catchup=False,
    params=PARAMS,
) as sensors_replication_lag_error:
    JetStreamReplicationLagSensor(
        task_id="wait_for_replication",
        jetstream_conn_id="{{ params.conn_id }}",
        domain="{{ params.domain }}",
        stream="{{ params.stream }}",
        options={"error_grace": "1s"},
        deferrable=True,
        poke_interval=0.3,
        timeout=60,
    )

# The target domain never answers: only a state kept across reschedules (Airflow's task state
# store) lets unreachable_timeout end the wait before the sensor's own timeout.
# It needs Airflow 3.3; older releases refuse it when the DAG is parsed (the sensor test asserts that).
if AIRFLOW_V_3_3_PLUS:
    with DAG(
        "sensors_replication_lag_unreachable_reschedule",
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1),
        catchup=False,
        params=PARAMS,
    ) as sensors_replication_lag_unreachable_reschedule:
        JetStreamReplicationLagSensor(
            task_id="wait_for_replication",
            jetstream_conn_id="{{ params.conn_id }}",
            domain="{{ params.domain }}",
            stream="{{ params.stream }}",
            unreachable_timeout="2s",
            mode="reschedule",
            poke_interval=0.5,
            timeout=120,
        )
