"""The packaged job, in process: incremental runs, a crash at every step then a re-run, concurrent runs."""

from __future__ import annotations

import json
import os
import uuid
from unittest.mock import ANY

import pytest

from airflow_provider_jetstream.spark.jobs.stream_to_parquet import (
    CheckpointConflictError,
    StreamToParquetJob,
    parse_args,
)
from tests.support import killpoints
from tests.support.spark import hub_client, publish_many, run


class SimulatedCrash(BaseException):
    """The process dies here: nothing after this point runs (not even except blocks)."""


@pytest.fixture
def job_env(spark):
    """The spark fixture started Spark with the hub connection in JETSTREAM_CONNECTION_SECRET, as the
    operator does for spark-submit."""
    from airflow_provider_jetstream.spark.options import CONNECTION_ENV_VAR

    assert CONNECTION_ENV_VAR in os.environ


def _job(spark, stream, output, bucket, *extra: str) -> StreamToParquetJob:
    args = parse_args(
        [
            *("--stream", stream.name, "--domain", stream.domain, "--output-path", str(output)),
            *("--checkpoint-bucket", bucket, "--min-partitions", "4", "--partition-by", "subject,date", *extra),
        ]
    )
    return StreamToParquetJob(spark, args)


def _output_seqs(spark, output) -> list[int]:
    return sorted(r.seq for r in spark.read.parquet(str(output)).select("seq").collect())


def _checkpoint(stream, bucket) -> dict:
    async def go():
        nc = await hub_client(stream.topology)
        try:
            kv = await nc.jetstream().key_value(bucket)
            return json.loads((await kv.get(f"stream_to_parquet.{stream.name}")).value)
        finally:
            await nc.close()

    return run(go())


def _bucket() -> str:
    return f"spark_ckpt_{uuid.uuid4().hex[:8]}"


def test_incremental_runs_copy_each_message_once_partitioned(spark, make_stream, job_env, tmp_path) -> None:
    stream = make_stream("leaf")
    bucket, output = _bucket(), tmp_path / "out"
    publish_many(stream, 200, subjects=("a", "b"))
    first = _job(spark, stream, output, bucket).run()
    assert (first.start, first.end, first.wrote) == (1, 200, True)
    publish_many(stream, 50)
    second = _job(spark, stream, output, bucket).run()
    assert (second.start, second.end) == (201, 250)
    third = _job(spark, stream, output, bucket).run()
    assert third.directory is None and third.wrote is False
    assert _output_seqs(spark, output) == list(range(1, 251))
    assert sorted(os.listdir(output)) == [
        "_commits",
        "_staging",
        "seq_range=00000000000000000001-00000000000000000200",
        "seq_range=00000000000000000201-00000000000000000250",
    ]
    assert sorted(os.listdir(output / "_commits")) == [
        "00000000000000000001-00000000000000000200",
        "00000000000000000201-00000000000000000250",
    ]
    part = output / "seq_range=00000000000000000001-00000000000000000200"
    assert sorted(os.listdir(part))[-2:] == [f"subject={stream.prefix}.a", f"subject={stream.prefix}.b"]
    df = spark.read.parquet(str(output))
    assert {"date", "subject", "seq_range", "data", "headers"} <= set(df.columns)
    assert _checkpoint(stream, bucket)["seq"] == 250


@pytest.mark.parametrize("point", killpoints.KILL_POINTS)
def test_a_run_killed_at_any_step_then_rerun_leaves_every_message_exactly_once(
    spark, make_stream, job_env, tmp_path, point
) -> None:
    stream = make_stream("leaf")
    bucket, output = _bucket(), tmp_path / "out"
    publish_many(stream, 300)
    _job(spark, stream, output, bucket, "--end-seq", "100").run()

    crashing = _job(spark, stream, output, bucket)

    def crash(at: str) -> None:
        if at == "during_write":  # called from a watcher thread while Spark writes: abort the job now
            spark.sparkContext.cancelAllJobs()
        else:
            raise SimulatedCrash(at)

    killpoints.install(crashing, point, crash)
    with pytest.raises(BaseException) as info:
        crashing.run()
    if point != "during_write":
        assert isinstance(info.value, SimulatedCrash)
    committed = output / "seq_range=00000000000000000101-00000000000000000300"
    assert committed.exists() == (point == "before_checkpoint")
    state = _checkpoint(stream, bucket)
    assert state["seq"] == 100 and state["claim"]["end"] == 300, "the crashed run's claim stays"

    publish_many(stream, 20)  # new messages: the re-run still redoes exactly the claimed range first
    rerun = _job(spark, stream, output, bucket).run()
    assert (rerun.start, rerun.end) == (101, 300)
    assert rerun.wrote == (point != "before_checkpoint")
    assert _output_seqs(spark, output) == list(range(1, 301))
    assert _checkpoint(stream, bucket) == {"stream": stream.name, "output": str(output), "seq": 300, "created": ANY}
    assert not os.listdir(output / "_staging"), "a committed range's leftovers are cleaned up"
    _job(spark, stream, output, bucket).run()
    assert _output_seqs(spark, output) == list(range(1, 321))


def test_of_two_concurrent_runs_the_range_is_written_once_and_both_succeed(
    spark, make_stream, job_env, tmp_path
) -> None:
    stream = make_stream("leaf")
    bucket, output = _bucket(), tmp_path / "out"
    publish_many(stream, 80)
    first = _job(spark, stream, output, bucket)
    results = []

    def other_run_meanwhile(at: str) -> None:
        # Run A has written and committed its directory; run B starts now, takes the claim over,
        # finds the range committed and advances the checkpoint.
        results.append(_job(spark, stream, output, bucket).run())

    killpoints.install(first, "before_checkpoint", other_run_meanwhile)
    assert first.run().outcome == "written"
    assert results[0].wrote is False and results[0].checkpoint == 80
    assert _output_seqs(spark, output) == list(range(1, 81))
    assert _checkpoint(stream, bucket)["seq"] == 80
    with pytest.raises(CheckpointConflictError, match="changed since revision"):
        first._put({"seq": 1}, 1)  # a stale revision still never moves the checkpoint


def test_a_checkpoint_key_of_another_output_is_refused(spark, make_stream, job_env, tmp_path) -> None:
    stream = make_stream("leaf")
    bucket = _bucket()
    publish_many(stream, 5)
    _job(spark, stream, tmp_path / "one", bucket).run()
    with pytest.raises(ValueError, match="belongs to stream"):
        _job(spark, stream, tmp_path / "two", bucket).run()
    with pytest.raises(ValueError, match="--partition-by='subject,hour': 'hour' is not allowed"):
        parse_args(
            ["--stream", "s", "--output-path", "o", "--checkpoint-bucket", "b", "--partition-by", "subject,hour"]
        )


def test_spark_submit_killed_with_sigkill_during_the_write_then_rerun(spark, make_stream, job_env, tmp_path) -> None:
    """A real kill: spark-submit's whole process group gets SIGKILL while Spark writes the range.

    The application is ``killpoints/run_job.py``: the packaged job's ``main`` with the kill point
    installed from outside; the repository root is on the driver's PYTHONPATH for this run only."""
    import subprocess
    import sys
    from pathlib import Path

    repository = Path(__file__).resolve().parents[2]
    run_job = Path(killpoints.__file__).parent / "run_job.py"
    stream = make_stream("leaf")
    bucket, output = _bucket(), tmp_path / "out"
    publish_many(stream, 400)
    command = [
        str(Path(sys.executable).parent / "spark-submit"),
        *("--master", "local[2]", "--conf", "spark.ui.enabled=false", str(run_job), "during_write"),
        *("--stream", stream.name, "--domain", "leaf", "--output-path", str(output), "--checkpoint-bucket", bucket),
        *("--min-partitions", "4", "--partition-by", "subject"),
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(repository), os.environ.get("PYTHONPATH")]))}
    killed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, start_new_session=True)
    assert killed.returncode == -9, killed.stdout[-2000:] + killed.stderr[-2000:]
    assert (output / "_staging").exists() and not list(output.glob("seq_range=*")), "killed mid-write"
    assert _checkpoint(stream, bucket)["claim"]["end"] == 400

    rerun = _job(spark, stream, output, bucket).run()
    assert (rerun.start, rerun.end, rerun.wrote) == (1, 400, True)
    assert _output_seqs(spark, output) == list(range(1, 401))


def test_the_command_line_is_checked_with_the_same_declarations() -> None:
    """``--reader`` and ``--servers`` go through the argument layer like every other flag: a bad reader
    is refused naming what is allowed, and servers holding a password are refused without echoing it."""
    required = ["--stream", "s", "--output-path", "o", "--checkpoint-bucket", "b"]
    with pytest.raises(ValueError, match="--reader='fast' is not allowed: use vectorised or nats-py"):
        parse_args([*required, "--reader", "fast"])
    with pytest.raises(ValueError, match=r"--servers='\*\*\*' is not allowed: give servers without credentials") as err:
        parse_args([*required, "--servers", "nats://hub:4222,nats://app:s3cret-pw@hub2:4222"])
    assert "s3cret-pw" not in str(err.value)
    args = parse_args([*required, "--reader", " NATS-PY ", "--servers", "hub:4222"])
    assert (args.reader, args.servers) == ("nats-py", "hub:4222")
