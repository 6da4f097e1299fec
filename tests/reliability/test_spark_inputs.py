"""Spark inputs are checked where they are known, and a failed spark-submit says why.

- ``JetStreamSparkSubmitOperator`` refuses bad packaged-job arguments when the DAG is parsed (or
  once rendered, before spark-submit starts), naming the argument, the value and what is allowed;
  with a custom ``application`` it refuses the packaged job's arguments instead of ignoring them.
- A failing job's own error line is in the task's exception.
- ``maxBufferedMessages`` below the chunk size reads everything instead of stalling.
"""

from __future__ import annotations

import pytest

from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.operators.spark import SPARK_CONNECT_MARK, JetStreamSparkSubmitOperator
from airflow_provider_jetstream.spark.job_args import SparkJobOptions, job_command_line
from tests.support import spark as spark_streams

PACKAGED = {"stream": "s", "output_path": "/data/orders", "checkpoint_bucket": "b"}


def given(argument: str, value: object) -> dict[str, object]:
    """``argument=value`` as the operator takes it: at the top, or in its options (SparkJobOptions)."""
    return {"options": {argument: value}} if argument in SparkJobOptions.arguments.args else {argument: value}


@pytest.mark.parametrize(
    ("argument", "value", "message"),
    [
        ("partition_by", ["foo"], r"partition_by=\['foo'\]: 'foo' is not allowed; use stream, domain, subject, date"),
        ("stream", "a b", r"stream='a b' is not allowed: a stream name is"),
        ("checkpoint_bucket", "a.b", r"checkpoint_bucket='a.b' is not allowed: a bucket name is 1-252 letters"),
        ("domain", "a b", r"domain='a b' is not a JetStream domain name"),
        ("end_seq", "abc", r"end_seq='abc' is not allowed: use an integer >= 1"),
        ("end_seq", 0, r"end_seq=0 is not allowed: use an integer >= 1"),
        ("min_partitions", 0, r"min_partitions=0 is not allowed: use an integer >= 1"),
        ("checkpoint_domain", "a.b", r"checkpoint_domain='a.b' is not a JetStream domain name"),
        ("checkpoint_key", ".k", r"checkpoint_key='.k' is not allowed"),
        ("filter_subjects", "a b", r"filter_subjects='a b' is not allowed: a subject has no whitespace"),
        ("start_seq", "first", r"start_seq='first' is not allowed: use 'earliest' or"),
        ("output_path", "s3a://bucket/out", r"output_path='s3a://bucket/out' is not allowed: the s3a:// file"),
        ("fail_on_data_loss", "maybe", r"fail_on_data_loss='maybe' is not allowed: use true or false"),
        ("checkpoint_replicas", 0, r"checkpoint_replicas=0 is not allowed: use an integer from 1 to 5"),
        ("checkpoint_replicas", "three", r"checkpoint_replicas='three' is not allowed: use an integer from 1 to 5"),
    ],
)
def test_bad_job_arguments_are_refused_when_the_dag_is_parsed(argument, value, message) -> None:
    with pytest.raises(JetStreamConfigError, match=message):
        JetStreamSparkSubmitOperator(task_id="t", **{**PACKAGED, **given(argument, value)})


def test_good_arguments_pass_and_templated_ones_wait_for_rendering() -> None:
    op = JetStreamSparkSubmitOperator(
        task_id="t",
        **PACKAGED,
        options={"partition_by": ["subject", "date"], "min_partitions": 4},
        domain="leaf",
        end_seq="{{ params.end }}",
        filter_subjects="orders.*,events.>",
        start_seq="earliest",
    )
    op.end_seq = "100"  # rendered
    assert job_command_line(op.checked_arguments())[-3:] == [
        "--min-partitions=4",
        "--partition-by=subject,date",
        "--fail-on-data-loss=true",
    ]


def test_a_templated_argument_that_renders_bad_fails_before_spark_submit(hub_conn) -> None:
    op = JetStreamSparkSubmitOperator(
        task_id="t", jetstream_conn_id=hub_conn, **PACKAGED, end_seq="{{ 'abc' }}", spark_binary="/nonexistent"
    )
    op.render_template_fields({})
    assert op.end_seq == "abc"
    with pytest.raises(JetStreamConfigError, match="end_seq='abc' is not allowed"):
        op.execute({})


def test_a_custom_application_refuses_the_packaged_jobs_arguments() -> None:
    for argument, value in [
        ("stream", "s"),
        ("domain", "leaf"),
        ("api_prefix", "JS.acc@hub.API"),
        ("filter_subjects", "a.b"),
        ("end_seq", 5),
        ("partition_by", ["subject"]),
        ("min_partitions", 2),
        ("start_seq", 3),
        ("fail_on_data_loss", False),
        ("checkpoint_domain", "hub"),
    ]:
        with pytest.raises(JetStreamConfigError, match=f"{argument} are arguments of the packaged"):
            JetStreamSparkSubmitOperator(task_id="t", application="/jobs/mine.py", **given(argument, value))
    JetStreamSparkSubmitOperator(task_id="t", application="/jobs/mine.py", application_args=["--x", "1"])


@pytest.mark.spark
def test_a_failing_job_puts_its_own_error_line_in_the_task_exception(hub_conn, tmp_path, monkeypatch) -> None:
    # This process opened a Spark Connect session before (a @task.pyspark task in the same dag.test()): PySpark's
    # mark of it stays in the environment, and must not turn the submitted job's local session into a Connect one.
    monkeypatch.setenv(SPARK_CONNECT_MARK, "1")
    op = JetStreamSparkSubmitOperator(
        task_id="t",
        jetstream_conn_id=hub_conn,
        stream="spark_no_such_stream",
        domain="leaf",
        output_path=str(tmp_path / "out"),
        checkpoint_bucket="spark_inputs_ckpt",
        options={"local_master": "local[1]"},
        conf={"spark.ui.enabled": "false"},
    )
    with pytest.raises(Exception, match="Error code is") as info:
        op.execute({})
    first_line = str(info.value).splitlines()[0]
    assert "the Spark job failed:" in first_line
    assert "stream 'spark_no_such_stream' in domain 'leaf' does not exist" in first_line


@pytest.mark.spark
def test_max_buffered_messages_below_the_chunk_size_reads_everything(spark, make_stream) -> None:
    stream = make_stream("leaf")
    spark_streams.publish_many(stream, 1000)
    options = stream.options(maxBufferedMessages="100", heartbeatSeconds="0.5", minPartitions="2")
    rows = spark.read.format("jetstream").options(**options).load().select("seq").collect()
    assert sorted(r.seq for r in rows) == list(range(1, 1001))


def test_the_pull_reader_hands_over_chunks_within_a_small_buffer(make_stream) -> None:
    from airflow_provider_jetstream.core.read.range import read_range
    from airflow_provider_jetstream.core.read.settings import PullSettings

    stream = make_stream("leaf")
    spark_streams.publish_many(stream, 300)

    async def go() -> list[int]:
        nc = await spark_streams.hub_client(stream.topology)
        try:
            settings = PullSettings(max_buffered_messages=10, heartbeat=0.5, expires=5)
            reader = read_range(nc, stream.name, 1, 300, api_prefix=stream.api_prefix, settings=settings)
            return [seq async for chunk in reader for seq in chunk.sequences]
        finally:
            await nc.close()

    assert spark_streams.run(go()) == list(range(1, 301))


def test_checkpoint_replicas_reaches_the_jobs_command_line_and_the_job() -> None:
    op = JetStreamSparkSubmitOperator(task_id="t", **PACKAGED, options={"checkpoint_replicas": "3"})
    command = job_command_line(op.checked_arguments())
    assert "--checkpoint-replicas=3" in command
    from airflow_provider_jetstream.spark.jobs.stream_to_parquet import parse_args

    assert parse_args(command).checkpoint_replicas == 3  # the job reads the operator's command line

    flags = ["--stream", "s", "--output-path", "/o", "--checkpoint-bucket", "b"]
    assert parse_args([*flags, "--checkpoint-replicas", "3"]).checkpoint_replicas == 3
    assert parse_args(flags).checkpoint_replicas is None  # the job's default: the cluster's size up to 3
