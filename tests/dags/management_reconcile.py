"""Test DAGs: one reconcile task whose spec and options come from the run's params (native rendering)."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_provider_jetstream.operators.kv import JetStreamCreateKeyValueOperator
from airflow_provider_jetstream.operators.streams import JetStreamCreateStreamOperator

PARAMS = {
    "conn_id": "jetstream_default",
    "domain": "leaf",
    "spec": {},
    "if_exists": "update",
    "dry_run": False,
    "allow_data_loss": False,
    "allow_double_store": False,
}

with DAG(
    "management_reconcile_stream",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1),
    catchup=False,
    params=PARAMS,
    render_template_as_native_obj=True,
) as stream_dag:
    JetStreamCreateStreamOperator(
        task_id="reconcile",
        jetstream_conn_id="{{ params.conn_id }}",
        domain="{{ params.domain }}",
        stream="{{ params.spec }}",
        if_exists="{{ params.if_exists }}",
        options={
            "dry_run": "{{ params.dry_run }}",
            "allow_data_loss": "{{ params.allow_data_loss }}",
            "allow_double_store": "{{ params.allow_double_store }}",
        },
    )

with DAG(
    "management_reconcile_bucket",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1),
    catchup=False,
    params=PARAMS,
    render_template_as_native_obj=True,
) as bucket_dag:
    JetStreamCreateKeyValueOperator(
        task_id="reconcile",
        jetstream_conn_id="{{ params.conn_id }}",
        domain="{{ params.domain }}",
        bucket="{{ params.spec }}",
        if_exists="{{ params.if_exists }}",
        options={
            "dry_run": "{{ params.dry_run }}",
            "allow_data_loss": "{{ params.allow_data_loss }}",
            "allow_double_store": "{{ params.allow_double_store }}",
        },
    )
