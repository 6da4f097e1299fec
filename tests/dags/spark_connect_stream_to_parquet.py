"""Test DAG: ``@task.pyspark`` on a ``spark_connect`` connection runs the packaged stream_to_parquet job."""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task

from airflow_provider_jetstream.operators.spark_connect import run_stream_to_parquet

#: The Spark Connect connection the task uses (the test defines it).
SPARK_CONNECT_CONN_ID = "spark_connect_tests"

with DAG(
    "spark_connect_stream_to_parquet",
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

    @task.pyspark(conn_id=SPARK_CONNECT_CONN_ID)
    def copy_to_parquet(spark: Any = None, params: Any = None) -> dict[str, Any]:
        return run_stream_to_parquet(
            spark,
            jetstream_conn_id=params["conn_id"],
            stream=params["stream"],
            output_path=params["output"],
            checkpoint_bucket=params["bucket"],
            options={"partition_by": ["subject"]},
        )

    copy_to_parquet()
