"""The packaged job with --start-time/--end-time: a window copied exactly; an open one copied as far as it is
stored, never reported done, finished by a later run; the operator's command line."""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid

import pytest

from airflow_provider_jetstream.core.errors import WindowOpenError
from airflow_provider_jetstream.spark.jobs.stream_to_parquet import StreamToParquetJob, main, parse_args
from tests.support.spark import iso, publish, stored_at


def _argv(stream, output, bucket, *extra: str) -> list[str]:
    return [
        *("--stream", stream.name, "--domain", stream.domain, "--output-path", str(output)),
        *("--checkpoint-bucket", bucket, "--min-partitions", "2", "--partition-by", "subject", *extra),
    ]


def _run(spark, *argv: str):
    return StreamToParquetJob(spark, parse_args(list(argv))).run()


def _output_seqs(spark, output) -> list[int]:
    return sorted(r.seq for r in spark.read.parquet(str(output)).select("seq").collect())


def _publish(stream, count: int, tag: str) -> list[int]:
    return [publish(stream, [(tag, b"%s%d" % (tag.encode(), i))])[0] for i in range(count)]


def test_a_window_between_two_times_is_copied_exactly_and_reported_done(spark, make_stream, tmp_path) -> None:
    from airflow_provider_jetstream.spark.options import CONNECTION_ENV_VAR

    assert CONNECTION_ENV_VAR in os.environ  # the spark fixture's connection, as the operator passes it
    stream = make_stream("leaf")
    _publish(stream, 8, "a")  # 1-8
    _publish(stream, 9, "b")  # 9-17
    _publish(stream, 4, "c")  # 18-21
    start, end = iso(stored_at(stream, 9, round_down=True)), iso(stored_at(stream, 18, round_down=True))
    bucket, output = f"spark_win_{uuid.uuid4().hex[:8]}", tmp_path / "window"
    argv = _argv(stream, output, bucket, "--start-time", start, "--end-time", end)
    result = _run(spark, *argv)
    assert (result.start, result.end, result.outcome, result.window_open) == (9, 17, "written", None)
    assert _output_seqs(spark, output) == list(range(9, 18))
    again = _run(spark, *argv)
    assert (again.outcome, again.window_open) == ("nothing new", None), "a re-run adds nothing and is done"
    assert _output_seqs(spark, output) == list(range(9, 18))


def test_an_open_window_is_copied_as_far_as_stored_and_the_job_fails_until_it_closes(
    spark, make_stream, tmp_path
) -> None:
    stream = make_stream("leaf")
    _publish(stream, 5, "a")
    ahead = iso(dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1))
    bucket, output = f"spark_win_{uuid.uuid4().hex[:8]}", tmp_path / "open"
    argv = _argv(stream, output, bucket, "--end-time", ahead)
    first = _run(spark, *argv)
    assert (first.start, first.end, first.checkpoint) == (1, 5, 5)
    assert first.window_open is not None and "is still open" in first.window_open
    _publish(stream, 3, "b")  # 6-8: still before the end
    with pytest.raises(WindowOpenError, match="copied what is stored; run the job again later for the rest"):
        main(argv, spark=spark)  # spark-submit's exit status 1: the task is not done, its retry goes on
    assert _output_seqs(spark, output) == list(range(1, 9)), "each message once, across the partial runs"
    assert sorted(p.name for p in output.glob("seq_range=*")) == [
        "seq_range=00000000000000000001-00000000000000000005",
        "seq_range=00000000000000000006-00000000000000000008",
    ]


def test_the_operator_passes_the_window_on_the_command_line_as_utc_and_refuses_an_empty_end() -> None:
    from airflow_provider_jetstream.core.errors import JetStreamConfigError
    from airflow_provider_jetstream.operators.spark import JetStreamSparkSubmitOperator
    from airflow_provider_jetstream.spark.job_args import job_command_line

    op = JetStreamSparkSubmitOperator(
        task_id="t",
        stream="orders",
        output_path="/data/orders",
        checkpoint_bucket="ckpt",
        start_time=dt.datetime(2026, 3, 1, 1, 0, tzinfo=dt.timezone(dt.timedelta(hours=1))),
        end_time="2026-03-02T00:00:00+00:00",
    )
    arguments = job_command_line(op.checked_arguments())
    assert "--start-time=2026-03-01T00:00:00Z" in arguments and "--end-time=2026-03-02T00:00:00Z" in arguments
    assert "end_time" in op.template_fields and "start_time" in op.template_fields
    # A window is never skipped as covered (only the job knows whether it is closed): no connection is
    # even looked up (this one does not exist).
    assert op.covered() is None
    with pytest.raises(JetStreamConfigError, match="end_time=''"):
        JetStreamSparkSubmitOperator(
            task_id="t2", stream="orders", output_path="/o", checkpoint_bucket="ckpt", end_time=""
        )
    with pytest.raises(JetStreamConfigError, match="use a time after start_time"):
        JetStreamSparkSubmitOperator(
            task_id="t3",
            stream="orders",
            output_path="/o",
            checkpoint_bucket="ckpt",
            start_time="2026-03-02T00:00:00Z",
            end_time="2026-03-01T00:00:00Z",
        )
    json.dumps(arguments)  # plain strings
