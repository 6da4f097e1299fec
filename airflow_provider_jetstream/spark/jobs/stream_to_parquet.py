"""spark-submit job: copy a JetStream stream to Parquet incrementally, exactly once.

    spark-submit stream_to_parquet.py --stream ORDERS --domain leaf --output-path /data/orders \\
        --checkpoint-bucket spark_checkpoints [--partition-by subject,date]

The NATS connection comes from the environment variable ``JETSTREAM_CONNECTION_SECRET`` (set by
``JetStreamSparkSubmitOperator``; never on the command line), or ``--servers`` for a server
without credentials.

One run:

1. reads the checkpoint (KV bucket ``--checkpoint-bucket``, key ``--checkpoint-key``; created when
   missing, with ``--checkpoint-replicas`` copies, default the cluster's size up to 3): the last
   sequence already in the output, the claim of an unfinished run if there is one, and the identity
   of the stream they were recorded on (its ``created`` time). A stream deleted and created again
   under the same name fails the run (``StreamRecreatedError``), or with ``--fail-on-data-loss false``
   is copied from its first sequence, its ranges named ``seq_range=<start>-<end>.<n>`` (the n-th
   stream of that name the job copied after a recreate). A checkpoint of an earlier version without
   the identity is accepted, and gets it at the next claim;
2. claims the range ``[checkpoint + 1, end]`` (``end``: the stream's last sequence now,
   ``--end-seq``, or the last stored before ``--end-time``; the first run starts at the stream's
   first sequence, ``--start-seq``, or the first stored at or after ``--start-time``) by
   compare-and-set on the key's revision; an unfinished claim is taken over with its range unchanged,
   so a re-run after a crash redoes exactly the same range;
3. writes the range to ``<output>/_staging/<range>-<attempt>`` (Spark ignores ``_`` directories),
   then commits it: creates the range's commit marker ``<output>/_commits/<range>`` naming this
   attempt, which only the first attempt can (created under a temporary name, then linked or
   renamed to a name that must not exist), and renames the winning attempt's staging directory to
   ``<output>/seq_range=<start>-<end>``. A losing attempt drops its copy. If the marker or the
   directory already exists, an earlier attempt committed the range and nothing is written again
   (a crash between marker and rename is finished by the next run);
4. advances the checkpoint to ``end`` by compare-and-set on the claim's revision.

Every checkpoint read and write is asked again while nobody answers now (the bucket's leader killed and a
new one being elected, the connection moving to a surviving node) for up to :data:`CHECKPOINT_WAIT`
seconds; a write asked again that finds its own value stored (its ack lost) counts as done. Then the run
fails with a provider error naming the cause, the line the operator shows.

With ``--end-time`` the run copies the window ``[start, end-time)`` exactly (see
:func:`~airflow_provider_jetstream.spark.planning.range_end`). While the window is open (no message stored at
or after the end yet, and the stream's clock not past it, or a mirror: a leaf cut off may still hold
messages of it), the run copies what is stored, advances the checkpoint, and then fails
(:class:`WindowOpenError`, exit status 1) instead of reporting the window done; a later run (the task's
retry) copies the rest once it is closed, and succeeds. Give each window its own ``--checkpoint-key`` and
``--output-path`` (templated from the data interval) to copy windows independently, or one key for
consecutive windows.

A run killed anywhere leaves either no ``seq_range`` directory for the range, or a complete one, and the
checkpoint tells the next run which range to (re)do: every message is in the output exactly once. Of two
concurrent runs on the same range, one writes it and both succeed: the other finds it committed
(``JobResult.outcome == "already committed"``) and the checkpoint is advanced once. Only one directory
is ever renamed onto a ``seq_range`` name, so the commit holds on file systems where a rename onto an
existing directory nests it (HDFS, ABFS) as well as on POSIX ones. It needs an atomic directory rename
and a file rename (or link) that refuses an existing destination: local and mounted file systems, HDFS,
ABFS with hierarchical namespace. ``s3``, ``s3a``, ``s3n``, ``gs``, ``wasb`` and ``wasbs`` are refused.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import logging
import sys
import uuid
from dataclasses import dataclass
from typing import Any

import nats.errors

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.connection.fields import api_prefix_for
from airflow_provider_jetstream.core.connection.settings import JetStreamConnectionConfig
from airflow_provider_jetstream.core.errors import JetStreamConfigError, JetStreamError, WindowOpenError
from airflow_provider_jetstream.core.read.identity import same_stream
from airflow_provider_jetstream.core.read.seek import time_boundary
from airflow_provider_jetstream.spark.job_args import COMMAND_LINE, FLAGS, PARTITION_COLUMNS, refuse_retired_flags
from airflow_provider_jetstream.spark.jobs.checkpoint import (
    CHECKPOINT_WAIT,
    CLUSTER_REPLICAS,
    Checkpoint,
    CheckpointConflictError,
    CheckpointStore,
)
from airflow_provider_jetstream.spark.jobs.commit import RangeCommitter
from airflow_provider_jetstream.spark.options import CONNECTION_ENV_VAR, ReadOptions, connection_options
from airflow_provider_jetstream.spark.planning import RangeEnd, open_window
from airflow_provider_jetstream.spark.source import is_spark_connect

log = logging.getLogger("stream_to_parquet")

__all__ = [
    "CHECKPOINT_WAIT",
    "CLUSTER_REPLICAS",
    "Checkpoint",
    "CheckpointConflictError",
    "JobArgs",
    "JobResult",
    "StreamToParquetJob",
    "main",
    "parse_args",
]


@dataclass(frozen=True)
class JobArgs:
    """The job's arguments (see ``--help``) as :func:`parse_args` checked them: each one given, its default the
    declaration's (:data:`~airflow_provider_jetstream.spark.job_args.JOB`), or the job's own where that is None
    (``checkpoint_key``: ``stream_to_parquet.<stream>``; ``start_seq``: ``earliest``)."""

    stream: str
    output: str
    checkpoint_bucket: str
    checkpoint_key: str
    domain: str | None
    api_prefix: str | None
    filter_subjects: str | None
    end_seq: int | None
    start_seq: str
    start_time: str | None
    end_time: str | None
    partition_by: tuple[str, ...]
    min_partitions: int | None
    fail_on_data_loss: bool
    checkpoint_domain: str | None
    checkpoint_replicas: int | None
    servers: str | None
    reader: str | None


@dataclass(frozen=True)
class JobResult:
    """What a run did. ``outcome``: ``written`` (this run committed the range), ``already committed``
    (an earlier or concurrent attempt had: nothing written again) or ``nothing new``; ``rows``: the range's.
    ``window_open``: with ``--end-time``, why the output does not hold the whole window yet (None: it does):
    the run copied what is stored, and :func:`main` fails with :class:`WindowOpenError` so that a later run
    (Airflow's retries) copies the rest."""

    start: int
    end: int
    directory: str | None
    wrote: bool
    checkpoint: int | None
    outcome: str = "written"
    rows: int = 0
    window_open: str | None = None


def parse_args(argv: list[str]) -> JobArgs:
    refuse_retired_flags(argv)
    parser = argparse.ArgumentParser(prog="stream_to_parquet", description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--stream", required=True, help="stream to read")
    parser.add_argument("--output-path", required=True, help="output directory (local path or Hadoop URI)")
    parser.add_argument("--checkpoint-bucket", required=True, help="KV bucket holding the checkpoint")
    parser.add_argument("--checkpoint-key", help="KV key (default: stream_to_parquet.<stream>)")
    parser.add_argument("--checkpoint-domain", help="JetStream domain of the KV bucket (default: the connection's)")
    parser.add_argument(
        "--checkpoint-replicas", help="replicas of the KV bucket when created (default: the cluster's size up to 3)"
    )
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--domain", help="JetStream domain of the stream")
    target.add_argument("--api-prefix", help="JetStream API prefix of the stream")
    parser.add_argument("--filter-subjects", help="subject or comma-separated subjects")
    parser.add_argument("--end-seq", help="last sequence to copy (default: the stream's last)")
    parser.add_argument("--start-seq", help="first run only: earliest (default) or a number")
    parser.add_argument("--start-time", help="first run only: start at the first message stored then (RFC 3339)")
    parser.add_argument("--end-time", help="copy only messages stored before it (RFC 3339); fails while open")
    parser.add_argument("--partition-by", default="date", help=f"comma list of {', '.join(PARTITION_COLUMNS)}")
    parser.add_argument("--min-partitions", help="Spark partitions to read with")
    parser.add_argument("--fail-on-data-loss", default="true", choices=["true", "false"])
    parser.add_argument("--reader", help="range reader: vectorised (the default with the spark extra) or nats-py")
    parser.add_argument("--servers", help="NATS servers without credentials (else $" + CONNECTION_ENV_VAR + ")")
    ns = parser.parse_args(argv)
    # The job's arguments, checked with the declarations the operator checks them with.
    given = {flag: getattr(ns, flag[2:].replace("-", "_")) for flag in COMMAND_LINE.args}
    checked = COMMAND_LINE.check(given, text=True)
    value = {name: checked[flag] for name, flag in FLAGS.items()}
    # The job's own defaults where the declarations leave None, and the output without a trailing "/".
    value["output"] = value.pop("output_path").rstrip("/")
    value["checkpoint_key"] = value["checkpoint_key"] or f"stream_to_parquet.{value['stream']}"
    value["start_seq"] = value["start_seq"] or "earliest"
    return JobArgs(**value, servers=checked["--servers"], reader=checked["--reader"])


class StreamToParquetJob(CheckpointStore):
    """One incremental run (:meth:`run`), in steps: :meth:`next_range`, :meth:`claim`,
    :meth:`commit` (which calls :meth:`write`) and :meth:`advance`."""

    def __init__(self, spark: Any, args: JobArgs, connection: JetStreamConnectionConfig | None = None) -> None:
        self.spark = spark
        self.args = args
        self.attempt = uuid.uuid4().hex[:12]
        self.source_options = self._source_options(connection)
        self.read_options = ReadOptions.parse(self.source_options)
        conn = self.read_options.connection
        self.files = RangeCommitter(spark, args.output, self.attempt)
        if is_spark_connect(spark) and not self.files.is_local():
            raise JetStreamConfigError(
                f"output_path={args.output!r} is not allowed over Spark Connect: the job commits a range by renaming "
                "directories from where it runs, which reaches Hadoop file systems only through a local JVM; give a "
                "local or mounted path that this process and the Spark cluster share, or run the job with "
                "spark-submit (JetStreamSparkSubmitOperator)"
            )
        #: The identity (``created``) of the stream this run copies, and the checkpoint's epoch (see
        #: :class:`Checkpoint`); set by :meth:`next_range`, recorded by every checkpoint write.
        self.created: str | None = None
        self.epoch = 0
        #: ``--end-time``: the window's last sequence and whether it is closed; why it is open (None: closed);
        #: ``--start-time``: the first sequence stored at or after it. Set by :meth:`next_range`.
        self.window = RangeEnd(0)
        self.window_open: str | None = None
        self.time_start: int | None = None
        # The KV bucket's domain: --checkpoint-domain, else the connection's (not the stream's).
        self.checkpoint_prefix = (
            api_prefix_for(args.checkpoint_domain, None)
            if args.checkpoint_domain
            else api_prefix_for(conn.domain, conn.api_prefix)
        )

    def _source_options(self, connection: JetStreamConnectionConfig | None) -> dict[str, str]:
        """The read's options; with ``connection``, the connection options too (and its domain or API prefix as
        the stream's default), so that the data source gets the connection wherever Spark runs it."""
        a = self.args
        options = {"stream": a.stream, "failOnDataLoss": str(a.fail_on_data_loss).lower()}
        if connection is not None:
            options.update(connection_options(connection))
            if a.domain is None and a.api_prefix is None:
                if connection.domain:
                    options["domain"] = connection.domain
                elif connection.api_prefix:
                    options["apiPrefix"] = connection.api_prefix
        for key, value in (
            ("domain", a.domain),
            ("apiPrefix", a.api_prefix),
            ("filterSubjects", a.filter_subjects),
            ("minPartitions", a.min_partitions),
            ("servers", a.servers),
            ("reader", a.reader),
        ):
            if value is not None:
                options[key] = str(value)
        return options

    # -- range -----------------------------------------------------------------------------------

    def _stream_end(self) -> tuple[int, int, str | None]:
        """The stream's first sequence, the range's end (its last, ``--end-seq``, or the last stored before
        ``--end-time``) and its identity; sets :attr:`window` (``--end-time``: whether it is closed) and the
        first run's start by ``--start-time``."""
        from airflow_provider_jetstream.spark.planning import range_end, stream_bounds

        options = dataclasses.replace(self.read_options, end_time=self.args.end_time)

        async def bounds(nc: Any, api: JetStreamApi) -> Any:
            found = await stream_bounds(nc, options)
            if self.args.start_time is not None:
                boundary = await time_boundary(
                    nc, options.stream, self.args.start_time, api_prefix=options.api_prefix, timeout=api.timeout
                )
                self.time_start = boundary.first_at
            return found, await range_end(nc, options, found)

        b, self.window = self._with_kv(bounds)
        if not self.window.closed:
            self.window_open = open_window(options, self.window, b)
        end = self.window.last if self.args.end_seq is None else min(self.args.end_seq, b.last)
        return b.first, end, b.created

    def _first_start(self, first: int) -> int:
        """The first run's start: the stream's first sequence, ``--start-seq`` (checked: a number), or the
        first sequence stored at or after ``--start-time``."""
        if self.time_start is not None:
            return max(first, self.time_start)
        starting = self.args.start_seq
        return first if starting == "earliest" else int(starting)

    def write(self, start: int, end: int, staging: str) -> None:
        """Write sequences ``start``-``end`` as Parquet to the directory ``staging``."""
        from pyspark.sql import functions as F

        df = (
            self.spark.read.format("jetstream")
            .options(**self.source_options)
            .option("startSeq", str(start))
            .option("endSeq", str(end))
            .load()
        )
        if "date" in self.args.partition_by:
            df = df.withColumn("date", F.to_date(F.col("timestamp")))
        writer = df.write.mode("overwrite")
        if self.args.partition_by:
            writer = writer.partitionBy(*self.args.partition_by)
        writer.parquet(staging)

    # -- run -------------------------------------------------------------------------------------

    def run(self) -> JobResult:
        checkpoint = self.read_checkpoint()
        start, end = self.next_range(checkpoint)
        self.files.epoch = self.epoch
        if start > end:
            log.info("nothing new in %r: checkpoint %s, last sequence %d", self.args.stream, checkpoint.seq, end)
            return JobResult(start, end, None, False, checkpoint.seq, "nothing new", self._unfinished(checkpoint.seq))
        revision = self.claim(start, end, checkpoint.revision)
        target = self.files.target_path(start, end)
        outcome = self.commit(start, end, target)
        checkpoint_seq = self.advance(revision, start, end)
        if checkpoint_seq >= end:
            # Not before: the run holding the claim may still be writing its (losing) copy.
            self.files.clean_staging(end)
        rows = self.files.count_rows(target)
        return JobResult(
            start, end, target, outcome == "written", checkpoint_seq, outcome, rows, self._unfinished(checkpoint_seq)
        )

    def _unfinished(self, checkpoint: int | None) -> str | None:
        """Why the output does not hold the whole ``--end-time`` window yet, or None (it does, or no end time)."""
        if self.args.end_time is None:
            return None
        if self.window_open is not None:
            return self.window_open
        if (checkpoint or 0) < self.window.last:
            return (
                f"stream {self.args.stream!r}: the output holds sequences up to {checkpoint} of the window before "
                f"--end-time={self.args.end_time}, which ends at sequence {self.window.last} (this run redid an "
                "unfinished range first)"
            )
        return None

    def next_range(self, checkpoint: Checkpoint) -> tuple[int, int]:
        """The range this run (re)does: an unfinished claim's, unchanged, else the new sequences
        (``start > end`` when there are none).

        The checkpoint must belong to the stream of that name now (:func:`same_stream`): if the stream
        was deleted and created again, the run fails (``StreamRecreatedError``), or with
        ``--fail-on-data-loss false`` copies the new stream from its first sequence (under the next epoch)."""
        first, end, self.created = self._stream_end()
        self.epoch = checkpoint.epoch
        a = self.args
        kept = checkpoint.seq is not None or checkpoint.claim is not None
        if kept and not same_stream(
            a.stream,
            checkpoint.created,
            self.created,
            position=f"checkpoint {a.checkpoint_bucket}/{a.checkpoint_key} (sequence {checkpoint.seq})",
            fail_on_data_loss=a.fail_on_data_loss,
            remedy=(
                "Nothing was written. To copy the new stream from its first sequence beside what the output holds, "
                "run the job once with --fail-on-data-loss false (fail_on_data_loss=False on the operator); to start "
                "over, give it a new --checkpoint-key and --output-path"
            ),
            logger=log,
        ):
            self.epoch += 1
            return first, end
        if checkpoint.claim is not None:
            # An unfinished run (crashed, or still running): redo exactly its range.
            start, claimed_end = int(checkpoint.claim["start"]), int(checkpoint.claim["end"])
            log.info("taking over the unfinished range %d-%d", start, claimed_end)
            return start, claimed_end
        return (checkpoint.seq + 1 if checkpoint.seq is not None else self._first_start(first)), end

    def claim(self, start: int, end: int, revision: int | None) -> int:
        """Claim the range in the checkpoint (compare-and-set on ``revision``); the claim's revision."""
        claim = {
            "start": start,
            "end": end,
            "attempt": self.attempt,
            "at": dt.datetime.now(dt.timezone.utc).isoformat(),
        }
        return self._put({"seq": start - 1, "claim": claim}, revision)

    def commit(self, start: int, end: int, target: str) -> str:
        """Make ``target`` hold the range exactly once (see :meth:`RangeCommitter.commit`), writing it
        with :meth:`write` if no attempt has yet."""
        return self.files.commit(start, end, target, self.write)

    def advance(self, revision: int, start: int, end: int) -> int:
        """Advance the checkpoint to ``end`` (the range is committed); the checkpoint's sequence after.

        If another run changed the key meanwhile (it took the claim over, found the range committed
        and advanced the checkpoint, or is about to), the range is still in the output exactly
        once: this run succeeds, and leaves the checkpoint to that run. Any other change fails.
        """
        try:
            self._put({"seq": end}, revision)
            return end
        except CheckpointConflictError as conflict:
            now = self.read_checkpoint()
            claim = now.claim or {}
            if now.seq is not None and now.seq >= end:
                log.info(
                    "a concurrent run advanced the checkpoint to %d first; sequences %d-%d are committed once",
                    now.seq,
                    start,
                    end,
                )
                return now.seq
            if (claim.get("start"), claim.get("end")) == (start, end):
                log.info(
                    "attempt %s took over the claim of sequences %d-%d, which are committed; it advances the "
                    "checkpoint",
                    claim.get("attempt"),
                    start,
                    end,
                )
                return int(now.seq) if now.seq is not None else start - 1
            raise conflict


def main(
    argv: list[str] | None = None, spark: Any = None, connection: JetStreamConnectionConfig | None = None
) -> JobResult:
    """Run the job.

    :param argv: the command line. Default ``sys.argv[1:]``.
    :param spark: the SparkSession, classic or Spark Connect. Default ``SparkSession.builder.getOrCreate()``.
    :param connection: the NATS connection; it also reaches the data source in its read options (a Spark Connect
        server does not share this process's environment). Default: ``$JETSTREAM_CONNECTION_SECRET`` or
        ``--servers``, read where the data source runs.
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.appName(f"stream_to_parquet {args.stream}").getOrCreate()
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    from airflow_provider_jetstream.spark import register

    register(spark)
    result = StreamToParquetJob(spark, args, connection).run()
    log.info("result: %s", json.dumps(result.__dict__))
    if result.window_open is not None:
        raise WindowOpenError(f"{result.window_open}: copied what is stored; run the job again later for the rest")
    return result


if __name__ == "__main__":
    try:
        main()
    except (JetStreamError, ValueError) as err:
        log.error("%s", err)
        sys.exit(1)
    except nats.errors.Error as err:  # one line the operator shows, not a traceback
        log.error("NATS: %s: %s", type(err).__name__, err)
        sys.exit(1)
