"""Test DAG: the NATS docs' "JetStream on leaf nodes" walkthrough, one operator per step.

Stream ``test`` in both domains (the docs' double-store demonstration, so opted in), one publish,
the hub's ``backup-test-leaf`` mirror and ``aggregate-test-leaf`` source of the leaf's ``test``,
the durable pull consumer ``dur`` for the cross-account client, and account IMPORT_MIRROR's
``aggregate-test-leaf-from-acc`` mirror through the imported ``JS.acc@hub.API``.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_jetstream.operators.consumers import JetStreamCreateConsumerOperator
from airflow_provider_jetstream.operators.publish import JetStreamPublishOperator
from airflow_provider_jetstream.operators.streams import (
    JetStreamCreateMirrorOperator,
    JetStreamCreateSourcedStreamOperator,
    JetStreamCreateStreamOperator,
)

with DAG(
    "management_seed",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1),
    catchup=False,
    params={
        "conn_id": Param("jetstream_default", type="string"),
        "import_mirror_conn_id": Param("jetstream_import_mirror", type="string"),
    },
) as dag:
    conn = "{{ params.conn_id }}"
    test_leaf = JetStreamCreateStreamOperator(
        task_id="stream_test_leaf",
        jetstream_conn_id=conn,
        domain="leaf",
        stream={"name": "test", "subjects": ["test"]},
        options={"allow_double_store": True},  # the docs create it in both domains on purpose
    )
    test_hub = JetStreamCreateStreamOperator(
        task_id="stream_test_hub",
        jetstream_conn_id=conn,
        domain="hub",
        stream={"name": "test", "subjects": ["test"]},
        options={"allow_double_store": True},
    )
    publish = JetStreamPublishOperator(
        task_id="publish_once",
        jetstream_conn_id=conn,
        subject="test",
        messages=["hello world"],
        options={"allow_double_store": True},
    )
    backup = JetStreamCreateMirrorOperator(
        task_id="backup_test_leaf",
        jetstream_conn_id=conn,
        domain="hub",
        stream="backup-test-leaf",
        origin="test",
        origin_domain="leaf",
    )
    aggregate = JetStreamCreateSourcedStreamOperator(
        task_id="aggregate_test_leaf",
        jetstream_conn_id=conn,
        domain="hub",
        stream="aggregate-test-leaf",
        sources=[{"name": "test", "domain": "leaf"}],
    )
    dur = JetStreamCreateConsumerOperator(
        task_id="consumer_dur",
        jetstream_conn_id=conn,
        domain="hub",
        stream="aggregate-test-leaf",
        consumer={"name": "dur", "ack_policy": "explicit", "ack_wait": "30s", "deliver_policy": "all"},
    )
    from_acc = JetStreamCreateMirrorOperator(
        task_id="aggregate_test_leaf_from_acc",
        jetstream_conn_id="{{ params.import_mirror_conn_id }}",
        domain="hub",
        stream="aggregate-test-leaf-from-acc",
        origin="aggregate-test-leaf",
        origin_api_prefix="JS.acc@hub.API",
        options={"deliver_prefix": "deliver.acc.hub.import_mirror.hub.aggregate-test-leaf-from-acc"},
    )
    [test_leaf, test_hub] >> publish >> [backup, aggregate]
    aggregate >> dur >> from_acc
