"""Test DAG: one task per kind of refusal, each with ``retries=2``; and one transient failure.

A refusal (bad rendered input, refused change, double store, rejected credentials, failed
compare-and-set) must fail its task on the first try; the transient one (a domain nobody
answers for) is retried. Tasks marked ``quiet`` point at a server nothing else uses, to show
that bad rendered inputs are refused before any connection.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_provider_jetstream.operators.kv import JetStreamKeyValueDeleteOperator, JetStreamKeyValuePutOperator
from airflow_provider_jetstream.operators.publish import JetStreamPublishOperator
from airflow_provider_jetstream.operators.streams import JetStreamCreateMirrorOperator, JetStreamCreateStreamOperator

PARAMS = {
    "conn_id": "jetstream_default",
    "quiet_conn_id": "jetstream_quiet",
    "bad_auth_conn_id": "jetstream_bad_auth",
    "name": "refusals",
    "existing": "refusals-existing",
    "subject": "refusals.shared",
    "bucket": "refusals",
    "maybe": "maybe",
    "bad_key": "a..b",
    "naive_time": "2026-01-01T00:00:00",
}

#: task id -> True if it must fail on the first try (a refusal), False if it is retried.
REFUSALS = {
    "quiet_rendered_dry_run": True,
    "quiet_rendered_purge": True,
    "quiet_rendered_key": True,
    "quiet_rendered_start_time": True,
    "refused_change": True,
    "double_store": True,
    "publish_double_store": True,
    "rejected_credentials": True,
    "compare_and_set_conflict": True,
    "transient_no_domain": False,
}

with DAG(
    "management_refusals",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1),
    catchup=False,
    params=PARAMS,
    default_args={"retries": 2, "retry_delay": timedelta(0)},
) as dag:
    conn = "{{ params.conn_id }}"
    quiet = "{{ params.quiet_conn_id }}"
    JetStreamCreateStreamOperator(
        task_id="quiet_rendered_dry_run",
        jetstream_conn_id=quiet,
        stream={"name": "{{ params.name }}"},
        options={"dry_run": "{{ params.maybe }}"},
    )
    JetStreamKeyValueDeleteOperator(
        task_id="quiet_rendered_purge", jetstream_conn_id=quiet, bucket="b", key="k", purge="{{ params.maybe }}"
    )
    JetStreamKeyValuePutOperator(
        task_id="quiet_rendered_key", jetstream_conn_id=quiet, bucket="b", key="{{ params.bad_key }}", value="v"
    )
    JetStreamCreateMirrorOperator(
        task_id="quiet_rendered_start_time",
        jetstream_conn_id=quiet,
        stream="{{ params.name }}",
        origin="origin",
        origin_domain="leaf",
        start_time="{{ params.naive_time }}",
    )
    JetStreamCreateStreamOperator(
        task_id="refused_change",
        jetstream_conn_id=conn,
        domain="leaf",
        stream={"name": "{{ params.existing }}", "storage": "memory"},
    )
    JetStreamCreateStreamOperator(
        task_id="double_store",
        jetstream_conn_id=conn,
        domain="leaf",
        stream={"name": "{{ params.name }}", "subjects": ["{{ params.subject }}"]},
    )
    JetStreamPublishOperator(
        task_id="publish_double_store",
        jetstream_conn_id=conn,
        domain="leaf",
        subject="{{ params.subject }}",
        messages=["x"],
    )
    JetStreamCreateStreamOperator(
        task_id="rejected_credentials", jetstream_conn_id="{{ params.bad_auth_conn_id }}", stream={"name": "x"}
    )
    JetStreamKeyValuePutOperator(
        task_id="compare_and_set_conflict",
        jetstream_conn_id=conn,
        domain="leaf",
        bucket="{{ params.bucket }}",
        key="k",
        value="again",
        expected_revision=0,
    )
    JetStreamCreateStreamOperator(
        task_id="transient_no_domain",
        jetstream_conn_id=conn,
        domain="nowhere",
        stream={"name": "{{ params.name }}"},
        request_timeout=1,
    )
