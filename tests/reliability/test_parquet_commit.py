"""The packaged stream_to_parquet job commits each range exactly once, and says who wrote it.

- Of two concurrent runs on one range, the one that committed succeeds and the other reports the
  range already committed (no ``CheckpointConflictError`` for a range written once).
- On Hadoop file systems a rename onto an existing directory moves the source *inside* it (HDFS,
  ABFS; Hadoop's local file system does the same by copying). The test drives the job through
  ``viewfs://`` over a local directory, so the job takes its Hadoop code path with those rename
  semantics, and makes the job's existence check stale once (the other attempt commits right
  after it looked): the commit marker still lets only one copy in.
- A crash between the commit marker and the rename is finished by the next run.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from unittest.mock import ANY

import pytest

from airflow_provider_jetstream.core.errors import CheckpointConflictError, JetStreamConfigError
from airflow_provider_jetstream.spark.jobs.commit import RangeCommitter
from airflow_provider_jetstream.spark.jobs.stream_to_parquet import StreamToParquetJob, parse_args
from tests.support import killpoints
from tests.support import spark as spark_streams

pytestmark = pytest.mark.spark

RANGE = re.compile(r"^\d{20}-\d{20}-")


class SimulatedCrash(BaseException):
    """The process dies here."""


class StaleExistenceCheck(RangeCommitter):
    """The job's committer, except that its next existence check of ``stale_for`` answers "missing"
    once: what a run sees when another attempt commits the range right after it looked."""

    stale_for: str | None = None

    def _exists(self, path: str) -> bool:
        if path == self.stale_for:
            self.stale_for = None
            return False
        return super()._exists(path)


class CrashBeforeRename(RangeCommitter):
    """The job's committer, killed right after its commit marker was created (before the rename)."""

    def _rename(self, source: str, target: str) -> bool:
        raise SimulatedCrash("between the commit marker and the rename")


def _args(stream, output: str, bucket: str, *extra: str):
    return parse_args(
        [
            *("--stream", stream.name, "--domain", stream.domain, "--output-path", output),
            *("--checkpoint-bucket", bucket, "--min-partitions", "2", "--partition-by", "subject", *extra),
        ]
    )


def _checkpoint(stream, bucket) -> dict:
    async def go():
        nc = await spark_streams.hub_client(stream.topology)
        try:
            kv = await nc.jetstream().key_value(bucket)
            return json.loads((await kv.get(f"stream_to_parquet.{stream.name}")).value)
        finally:
            await nc.close()

    return spark_streams.run(go())


def _seqs(spark, directory) -> list[int]:
    return sorted(r.seq for r in spark.read.parquet(str(directory)).select("seq").collect())


def _bucket() -> str:
    return f"spark_commit_{uuid.uuid4().hex[:8]}"


def test_the_run_that_committed_succeeds_and_the_concurrent_one_says_it_was_already_committed(
    spark, make_stream, tmp_path
) -> None:
    stream = make_stream("leaf")
    bucket, output = _bucket(), tmp_path / "out"
    spark_streams.publish_many(stream, 80)
    first = StreamToParquetJob(spark, _args(stream, str(output), bucket))
    others = []

    def other_run_meanwhile(at: str) -> None:
        # Run A has committed the range; run B starts now, takes the claim over, finds the range
        # committed and advances the checkpoint before A does.
        others.append(StreamToParquetJob(spark, _args(stream, str(output), bucket)).run())

    killpoints.install(first, "before_checkpoint", other_run_meanwhile)
    result = first.run()
    assert (result.start, result.end, result.wrote, result.outcome) == (1, 80, True, "written")
    assert result.checkpoint == 80
    (other,) = others
    assert (other.start, other.end, other.wrote, other.outcome) == (1, 80, False, "already committed")
    assert _seqs(spark, output) == list(range(1, 81))
    assert _checkpoint(stream, bucket) == {"stream": stream.name, "output": str(output), "seq": 80, "created": ANY}


def test_hadoop_rename_semantics_and_a_stale_check_still_commit_one_copy(spark, make_stream, tmp_path) -> None:
    stream = make_stream("leaf")
    bucket = _bucket()
    table = f"t{uuid.uuid4().hex[:8]}"
    local = tmp_path / "data"
    local.mkdir()
    spark._jsc.hadoopConfiguration().set(f"fs.viewfs.mounttable.{table}.link./data", local.as_uri())
    output = f"viewfs://{table}/data/out"
    spark_streams.publish_many(stream, 60)
    target = f"{output}/seq_range={1:020d}-{60:020d}"

    slow = StreamToParquetJob(spark, _args(stream, output, bucket))
    slow.files = StaleExistenceCheck(spark, output, slow.attempt)
    others = []

    def other_attempt_commits_first(at: str) -> None:
        # Run A has written its staging copy. Run B takes the claim over, writes and commits the
        # range; A's next look at the range's directory is stale (it saw it missing just before).
        others.append(StreamToParquetJob(spark, _args(stream, output, bucket)).run())
        slow.files.stale_for = target

    killpoints.install(slow, "after_write", other_attempt_commits_first)
    try:
        result, failure = slow.run(), None
    except CheckpointConflictError as err:  # checked after the output, which matters most
        result, failure = None, err
    committed = local / "out" / f"seq_range={1:020d}-{60:020d}"
    nested = [name for name in os.listdir(committed) if RANGE.match(name)]
    assert not nested, f"a second copy was moved inside the committed range: {nested}"
    assert failure is None, failure
    (other,) = others
    assert (other.wrote, other.outcome) == (True, "written")
    assert (result.wrote, result.outcome) == (False, "already committed")
    assert _seqs(spark, local / "out") == list(range(1, 61))
    assert not os.listdir(local / "out" / "_staging"), "the losing copy was dropped"
    assert _checkpoint(stream, bucket)["seq"] == 60


def test_a_crash_between_the_commit_marker_and_the_rename_is_finished_by_the_next_run(
    spark, make_stream, tmp_path
) -> None:
    stream = make_stream("leaf")
    bucket, output = _bucket(), tmp_path / "out"
    spark_streams.publish_many(stream, 40)
    crashing = StreamToParquetJob(spark, _args(stream, str(output), bucket))
    crashing.files = CrashBeforeRename(spark, str(output), crashing.attempt)
    with pytest.raises(SimulatedCrash):
        crashing.run()
    assert not list(output.glob("seq_range=*")), "not renamed yet"
    rerun = StreamToParquetJob(spark, _args(stream, str(output), bucket)).run()
    assert (rerun.start, rerun.end, rerun.wrote, rerun.outcome) == (1, 40, False, "already committed")
    assert _seqs(spark, output) == list(range(1, 41))
    assert not os.listdir(output / "_staging")


@pytest.mark.parametrize("output", ["s3a://bucket/orders", "gs://bucket/orders", "wasbs://c@a.blob/orders"])
def test_outputs_whose_rename_cannot_commit_once_are_refused(output) -> None:
    with pytest.raises(JetStreamConfigError, match="cannot commit a range exactly once"):
        parse_args(["--stream", "s", "--output-path", output, "--checkpoint-bucket", "b"])
