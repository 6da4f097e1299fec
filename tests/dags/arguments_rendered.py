"""Test DAG: templated arguments that render to values the argument layer refuses, each with ``retries=2``.

Every task points at a server nothing else uses (``params.conn_id``): each must fail on the first try
(a refusal) after Airflow rendered it, before any connection is made.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_provider_jetstream.operators.kv import JetStreamKeyValuePutOperator
from airflow_provider_jetstream.operators.streams import JetStreamPurgeStreamOperator

PARAMS = {"conn_id": "jetstream_quiet", "name": "rendered", "keep": -1, "empty": ""}

#: task id -> what its refusal says.
REFUSED = {
    "purge_negative_keep": "keep='-1' is not allowed: use an integer >= 0",
    "purge_empty_subject": "subject='' is not allowed",
    "put_empty_expected_revision": "expected_revision='' is not allowed",
}

with DAG(
    "arguments_rendered",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1),
    catchup=False,
    params=PARAMS,
    default_args={"retries": 2, "retry_delay": timedelta(0)},
) as dag:
    conn = "{{ params.conn_id }}"
    JetStreamPurgeStreamOperator(
        task_id="purge_negative_keep", jetstream_conn_id=conn, stream="{{ params.name }}", keep="{{ params.keep }}"
    )
    # Rendered empty, a narrowing subject must not become "not given": that would purge every subject.
    JetStreamPurgeStreamOperator(
        task_id="purge_empty_subject", jetstream_conn_id=conn, stream="{{ params.name }}", subject="{{ params.empty }}"
    )
    # Rendered empty, a compare-and-set revision must not become "no condition": that would overwrite.
    JetStreamKeyValuePutOperator(
        task_id="put_empty_expected_revision",
        jetstream_conn_id=conn,
        bucket="b",
        key="k",
        value="v",
        expected_revision="{{ params.empty }}",
    )
