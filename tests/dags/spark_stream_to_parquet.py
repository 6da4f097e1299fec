"""Test DAG: JetStreamSparkSubmitOperator runs the packaged stream_to_parquet job via spark-submit."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_jetstream.operators.spark import JetStreamSparkSubmitOperator

with DAG(
    "spark_stream_to_parquet",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1),
    catchup=False,
    params={
        "conn_id": Param("jetstream_default", type="string"),
        "stream": Param("spark_orders", type="string"),
        "output": Param("/nonexistent", type="string"),
        "bucket": Param("spark_checkpoints", type="string"),
    },
) as dag:
    JetStreamSparkSubmitOperator(
        task_id="copy_to_parquet",
        jetstream_conn_id="{{ params.conn_id }}",
        stream="{{ params.stream }}",
        output_path="{{ params.output }}",
        checkpoint_bucket="{{ params.bucket }}",
        options={"partition_by": ["subject"], "min_partitions": 2},
        conf={"spark.ui.enabled": "false"},
    )
