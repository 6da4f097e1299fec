"""``run_stream_to_parquet``: the packaged exactly-once Parquet copy on the SparkSession a task already has.

For the Spark provider's ``@task.pyspark`` / ``PySparkOperator`` with a ``spark_connect`` connection (a Spark
Connect server: Databricks, a ``start-connect-server.sh``), where there is no spark-submit:

.. code-block:: python

    @task.pyspark(conn_id="spark_connect_default")
    def copy_orders(spark):
        return run_stream_to_parquet(
            spark, stream="ORDERS", output_path="/mnt/shared/orders", checkpoint_bucket="spark_checkpoints"
        )

The job's own steps (checkpoint, claim, commit, advance) run in the task; the read runs on the Spark Connect
server, which gets the NATS connection in the read's options (sent over the Spark Connect channel: use TLS
to a remote server). The server's Python workers import this package: install ``airflow-provider-jetstream[spark]``
where the server runs. The output must be a local or mounted path both the task and the Spark cluster see (the
commit renames directories from the task).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_provider_jetstream.hooks.base import JetStreamBaseHook
from airflow_provider_jetstream.operators.spark import job_xcom
from airflow_provider_jetstream.spark.job_args import SUBMIT, SparkJobOptions, job_command_line

__all__ = ["run_stream_to_parquet"]


def run_stream_to_parquet(
    spark: Any,
    *,
    stream: str,
    output_path: str,
    checkpoint_bucket: str,
    jetstream_conn_id: str = JetStreamBaseHook.default_conn_name,
    domain: str | None = None,
    api_prefix: str | None = None,
    filter_subjects: str | Sequence[str] | None = None,
    start_seq: int | str | None = None,
    end_seq: int | str | None = None,
    start_time: Any = None,
    end_time: Any = None,
    options: SparkJobOptions | dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the packaged ``stream_to_parquet`` job on ``spark`` (Spark Connect or classic); return its XCom.

    The arguments are ``JetStreamSparkSubmitOperator``'s, checked with the same declarations before anything
    runs; the XCom is the operator's (``outcome``, ``start``, ``end``, ``rows``, ``directory``, ``checkpoint``...).

    :param spark: the SparkSession (``@task.pyspark`` passes it).
    :param stream: stream to read.
    :param output_path: Parquet output directory: a local or mounted path the task and the Spark cluster share.
    :param checkpoint_bucket: KV bucket of the checkpoint; created if missing.
    :param jetstream_conn_id: Airflow ``jetstream`` connection. Default ``jetstream_default``.
    :param domain: JetStream domain of the stream. Default: the connection's.
    :param api_prefix: JetStream API prefix of the stream, instead of ``domain``.
    :param filter_subjects: subject or comma list of subjects to copy. Default: all.
    :param start_seq: first run only: ``earliest`` (default) or a sequence number.
    :param end_seq: last sequence to copy. Default: the stream's last at the start.
    :param start_time: first run only: start at the first message stored at or after this time (RFC 3339).
    :param end_time: copy only messages stored before this time; the run fails while the window is open.
    :param options: :class:`~airflow_provider_jetstream.spark.job_args.SparkJobOptions` or a dict of its fields
        (``local_master`` is not used here). Default: every default.
    """
    from airflow_provider_jetstream.spark.jobs.stream_to_parquet import main

    given = {
        "jetstream_conn_id": jetstream_conn_id,
        "stream": stream,
        "output_path": output_path,
        "checkpoint_bucket": checkpoint_bucket,
        "domain": domain,
        "api_prefix": api_prefix,
        "filter_subjects": filter_subjects,
        "start_seq": start_seq,
        "end_seq": end_seq,
        "start_time": start_time,
        "end_time": end_time,
        "options": options,
    }
    args = SUBMIT.check({name: value for name, value in given.items() if value is not None}, text=True)
    connection = JetStreamBaseHook(args["jetstream_conn_id"]).get_conn_config()  # registers secrets for masking
    result = main(job_command_line(args), spark=spark, connection=connection)
    return job_xcom(args, result.__dict__)
