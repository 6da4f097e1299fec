"""Test DAG of the JetStream page's links: declare a hub stream and publish to it, so its asset gets events.

Both operators emit asset events for the stream's ``jetstream://`` asset through their ``AssetAlias`` outlets
(the stream created, the messages published): the page links the stream to this DAG's run.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_jetstream.operators.publish import JetStreamPublishOperator
from airflow_provider_jetstream.operators.streams import JetStreamCreateStreamOperator

DAG_ID = "jetstream_page_orders"
STREAM = "page_orders"

with DAG(
    DAG_ID,
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1),
    catchup=False,
    params={"conn_id": Param("jetstream_default", type="string")},
) as dag:
    create = JetStreamCreateStreamOperator(
        task_id="create_orders",
        jetstream_conn_id="{{ params.conn_id }}",
        stream={"name": STREAM, "subjects": ["page.orders.>"]},
        domain="hub",
    )
    publish = JetStreamPublishOperator(
        task_id="publish_orders",
        jetstream_conn_id="{{ params.conn_id }}",
        subject="page.orders.new",
        messages=[{"order": 1}, {"order": 2}, {"order": 3}],
    )
    create >> publish
