"""Test DAGs: ``JetStreamKeyValueSensor`` in poke and deferrable modes; bucket, key, value, domain from params."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_jetstream.sensors.kv import JetStreamKeyValueSensor

PARAMS = {
    "conn_id": Param("jetstream_default", type="string"),
    "domain": Param("leaf", type="string"),
    "bucket": Param("sens_bucket", type="string"),
    "key": Param("ready", type="string"),
    "value": Param(None, type=["null", "string"]),
}

for mode in ("poke", "deferrable"):
    for soft_fail in (False, True):
        dag_id = f"sensors_kv_{mode}" + ("_soft_fail" if soft_fail else "")
        with DAG(
            dag_id,
            schedule=None,
            start_date=pendulum.datetime(2026, 1, 1),
            catchup=False,
            params=PARAMS,
            render_template_as_native_obj=True,
        ) as dag:
            JetStreamKeyValueSensor(
                task_id="wait_for_key",
                jetstream_conn_id="{{ params.conn_id }}",
                domain="{{ params.domain }}",
                bucket="{{ params.bucket }}",
                key="{{ params.key }}",
                value="{{ params.value }}",
                deferrable=mode == "deferrable",
                soft_fail=soft_fail,
                poke_interval=0.3,
                timeout=60,
            )
        globals()[dag_id] = dag
