"""``JetStreamDataSource``: the ``jetstream`` format of Spark (batch read, streaming read, write).

>>> from airflow_provider_jetstream.spark import JetStreamDataSource
>>> spark.dataSource.register(JetStreamDataSource)
>>> df = spark.read.format("jetstream").option("servers", "nats://hub:4222").option("stream", "ORDERS").load()

Offsets are stream sequences. The driver reads the stream's bounds, fixes the range, and splits it
into sequence ranges; each task reads exactly its range with the range reader
(:mod:`airflow_provider_jetstream.core.read.range`) and yields Arrow record batches. Airflow-free: Spark
executors import only this package's Airflow-free modules and nats-py.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from airflow_provider_jetstream.core.connection.client import open_connection, release
from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.core.read.identity import IDENTITY_KEY, same_stream
from airflow_provider_jetstream.core.read.range import read_range_with_config
from airflow_provider_jetstream.core.sync import iterate_blocking, run_sync
from airflow_provider_jetstream.spark.options import ReadOptions, WriteOptions
from airflow_provider_jetstream.spark.planning import (
    StreamBounds,
    check_window,
    range_end,
    resolve_start,
    split_range,
    stream_bounds,
)
from airflow_provider_jetstream.spark.schema import SCHEMA, SCHEMA_DDL, to_record_batch

log = logging.getLogger(__name__)


def worker_python_hint(problem: str) -> str:
    """What to set when Spark's Python workers run an interpreter without this package."""
    return (
        f"{problem}: Spark runs its Python workers (and the data source's planning) with the interpreter named "
        "by PYSPARK_PYTHON, by default `python3` from PATH, and that interpreter needs airflow-provider-jetstream "
        "with its [spark] extra. Set PYSPARK_PYTHON and PYSPARK_DRIVER_PYTHON to the Python that has them before "
        "the SparkSession is created (e.g. os.environ['PYSPARK_PYTHON'] = sys.executable, or "
        ".config('spark.pyspark.python', sys.executable)); on a cluster, to that Python's path on the workers"
    )


class SequenceRangePartition(InputPartition):
    """One Spark task's share: sequences ``start..end`` (inclusive) of ``stream`` (default: the read's only one)."""

    def __init__(self, index: int, start: int, end: int, domain: str | None, stream: str | None = None) -> None:
        super().__init__(index)
        self.index = index
        self.start = start
        self.end = end
        self.domain = domain
        self.stream = stream

    def __repr__(self) -> str:
        return f"SequenceRangePartition({self.index}, {self.stream or ''} {self.start}-{self.end})"


def _read_partition(options: ReadOptions, partition: SequenceRangePartition) -> Iterator[pa.RecordBatch]:
    stream = partition.stream or options.stream
    chunks = read_range_with_config(
        options.connection,
        stream,
        partition.start,
        partition.end,
        api_prefix=options.api_prefix,
        filter_subjects=options.filter_subjects,
        include_headers=options.include_headers,
        fail_on_data_loss=options.fail_on_data_loss,
        settings=options.pull,
        reader=options.reader,
    )
    for chunk in iterate_blocking(chunks):
        yield to_record_batch(chunk, stream, partition.domain)


def _partitions(
    options: ReadOptions, start: int, end: int, domain: str | None, default_parallelism: int
) -> list[SequenceRangePartition]:
    ranges = split_range(start, end, options.min_partitions or default_parallelism, options.max_messages_per_partition)
    return [SequenceRangePartition(i, first, last, domain) for i, (first, last) in enumerate(ranges)]


def _streams_partitions(
    options: ReadOptions, ranges: list[tuple[str, int, int]], domain: str | None, default_parallelism: int
) -> list[SequenceRangePartition]:
    """The partitions of several streams' ranges: the partitions wanted shared in proportion to their sizes
    (at least one each that has sequences)."""
    total = sum(max(0, end - start + 1) for _, start, end in ranges)
    wanted = options.min_partitions or default_parallelism
    parts: list[SequenceRangePartition] = []
    for stream, start, end in ranges:
        size = end - start + 1
        if size <= 0:
            continue
        share = max(1, round(wanted * size / total))
        for first, last in split_range(start, end, share, options.max_messages_per_partition):
            parts.append(SequenceRangePartition(len(parts), first, last, domain, stream))
    return parts


def _with_connection(options: ReadOptions, work: Any) -> Any:
    async def run() -> Any:
        nc = await open_connection(options.connection)
        try:
            return await work(nc)
        finally:
            await release(nc, drain=False)

    return run_sync(run())


class JetStreamBatchReader(DataSourceReader):
    """Batch read: the range is fixed on the driver from stream info when the query is planned."""

    def __init__(self, options: ReadOptions, default_parallelism: int) -> None:
        self.options = options
        self.default_parallelism = default_parallelism

    def partitions(self) -> Sequence[InputPartition]:
        """Each stream's range, fixed from what it holds now (every stream's window checked before any is read)."""

        async def plan(nc: Any) -> list[tuple[str, int, int, StreamBounds]]:
            ranges = []
            for stream in self.options.streams:
                options = self.options.for_stream(stream)
                bounds = await stream_bounds(nc, options)
                start = await resolve_start(nc, options, bounds)
                end = await range_end(nc, options, bounds)
                check_window(options, end, bounds)
                ranges.append((stream, start, end.last, bounds))
            return ranges

        planned = _with_connection(self.options, plan)
        for stream, start, end, _ in planned:
            log.info("jetstream read of %r: sequences %d-%d", stream, start, end)
        domain = planned[0][3].domain
        parts = _streams_partitions(
            self.options, [(stream, start, end) for stream, start, end, _ in planned], domain, self.default_parallelism
        )
        # Spark needs at least one partition; an empty range reads nothing.
        return parts or [SequenceRangePartition(0, 1, 0, domain)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SequenceRangePartition)
        yield from _read_partition(self.options, partition)


class JetStreamStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streaming read. An offset is ``{"seq": N, "created": C}``: every sequence up to N of the stream
    created at C (its identity, ``STREAM.INFO``'s ``created``) has been planned.

    Micro-batch ``(start, end]`` reads sequences ``start.seq + 1 .. end.seq``. Spark's checkpoint
    holds the offsets, so a restarted query re-plans exactly the same ranges: nothing is lost or
    repeated. Nothing is acknowledged on the server (no acks to lose at a crash).

    With ``minMessagesPerTrigger`` (Spark's Kafka source's ``minOffsetsPerTrigger``), a micro-batch is planned
    once that many sequences are new, or once ``maxTriggerDelay`` has passed since the previous one and some
    are new; the first of a (re)started query is not held back, and ``Trigger.AvailableNow`` reads without
    waiting. ``maxMessagesPerTrigger`` still caps each micro-batch.

    A stream deleted and created again under the same name since the start offset fails the query
    (``StreamRecreatedError``), or with ``failOnDataLoss=false`` is read from its first sequence: that
    batch's end offset names it (``"first"``). An offset of an earlier version (no ``created``) is
    accepted; the next one records the identity.
    """

    def __init__(self, options: ReadOptions, default_parallelism: int) -> None:
        self.options = options
        self.default_parallelism = default_parallelism
        self.available_now_target: int | None = None
        #: When the last micro-batch was planned (``time.monotonic()``); None before the first.
        self.last_planned: float | None = None
        self._domain: str | None = None
        self._domain_known = False

    def _bounds(self) -> StreamBounds:
        bounds = _with_connection(self.options, lambda nc: stream_bounds(nc, self.options))
        self._domain, self._domain_known = bounds.domain, True
        return bounds

    def initialOffset(self) -> dict:
        options = self.options

        async def first(nc: Any) -> tuple[int, str | None]:
            bounds = await stream_bounds(nc, options)
            return await resolve_start(nc, options, bounds), bounds.created

        seq, created = _with_connection(options, first)
        return _offset(seq - 1, created)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        bounds = self._bounds()
        last, after = bounds.last, start["seq"]
        recreated = not same_stream(
            self.options.stream,
            start.get(IDENTITY_KEY),
            bounds.created,
            position=f"the streaming query's offset (sequence {after})",
            fail_on_data_loss=self.options.fail_on_data_loss,
            remedy=(
                "Nothing of the new stream was read. To read it from its first sequence, restart the query with "
                "failOnDataLoss=false; to start over, give the query a new checkpointLocation"
            ),
            logger=log,
        )
        if recreated:
            after = bounds.first - 1
        if self.available_now_target is not None:
            last = min(last, self.available_now_target)
        if isinstance(limit, ReadMaxRows):
            last = min(last, after + limit.max_rows)
        elif isinstance(limit, ReadMinRows):
            last = min(last, after + (self.options.max_messages_per_trigger or last))
        if not isinstance(limit, ReadAllAvailable) and self.available_now_target is None and not recreated:
            now = time.monotonic()
            if hold_back(last - after, self.options, self.last_planned, now):
                last = after
            elif last > after:
                self.last_planned = now
        end = _offset(max(last, after), bounds.created)
        if recreated:
            end["first"] = bounds.first
        return end

    def getDefaultReadLimit(self) -> ReadLimit:
        # PySpark has no composite limit: with both, the minimum is asked and the maximum applied here.
        if self.options.min_messages_per_trigger:
            return ReadMinRows(self.options.min_messages_per_trigger)
        if self.options.max_messages_per_trigger:
            return ReadMaxRows(self.options.max_messages_per_trigger)
        return ReadAllAvailable()

    def reportLatestOffset(self) -> dict | None:
        bounds = self._bounds()
        return _offset(bounds.last, bounds.created)

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now_target = self._bounds().last

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if not self._domain_known:
            self._bounds()
        # A batch onto a recreated stream (failOnDataLoss=false) starts at its first sequence, named by its end.
        first = end["first"] if "first" in end else start["seq"] + 1
        return _partitions(self.options, first, end["seq"], self._domain, self.default_parallelism)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SequenceRangePartition)
        yield from _read_partition(self.options, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: no acknowledgements, the offsets in Spark's checkpoint are the truth."""


def hold_back(new: int, options: ReadOptions, last_planned: float | None, now: float) -> bool:
    """Whether a micro-batch of ``new`` sequences waits for more (``minMessagesPerTrigger``): fewer than the
    minimum are new and ``maxTriggerDelay`` seconds have not passed since the previous micro-batch was planned
    (``last_planned``, None: none yet, so the first is never held back)."""
    minimum = options.min_messages_per_trigger
    if minimum is None or new <= 0 or new >= minimum or last_planned is None:
        return False
    return now - last_planned < (options.max_trigger_delay or 0.0)


def _offset(seq: int, created: str | None) -> dict:
    """A streaming offset: sequences up to ``seq`` of the stream created at ``created`` are planned."""
    return {"seq": seq, IDENTITY_KEY: created} if created else {"seq": seq}


class JetStreamDataSource(DataSource):
    """The ``jetstream`` data source. See ``docs/spark.md`` for the options.

    ``default_parallelism`` is the number of partitions when ``minPartitions`` is not given:
    :func:`airflow_provider_jetstream.spark.register` sets it to Spark's default parallelism;
    otherwise the driver's CPU count.
    """

    default_parallelism: ClassVar[int | None] = None

    @classmethod
    def name(cls) -> str:
        return "jetstream"

    def schema(self) -> StructType:
        return SCHEMA

    def _check_schema(self, schema: StructType) -> None:
        if schema.simpleString() != SCHEMA.simpleString():
            raise JetStreamConfigError(
                f"the jetstream source has a fixed schema ({SCHEMA_DDL}); got {schema.simpleString()}: "
                "drop .schema(...) and select or cast columns after load()"
            )

    def _parallelism(self) -> int:
        return self.default_parallelism or os.cpu_count() or 2

    def reader(self, schema: StructType) -> DataSourceReader:
        self._check_schema(schema)
        return JetStreamBatchReader(ReadOptions.parse(self.options, streaming=False), self._parallelism())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        self._check_schema(schema)
        return JetStreamStreamReader(ReadOptions.parse(self.options, streaming=True), self._parallelism())

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from airflow_provider_jetstream.spark.writer import JetStreamWriter, check_atomic

        if overwrite:
            raise JetStreamConfigError(
                "jetstream write: mode 'overwrite' is not supported: a stream is append-only; use mode('append')"
            )
        options = WriteOptions.parse(self.options, schema.fieldNames())
        if options.atomic:
            check_atomic(options)  # refused before any task runs: no stream with allow_atomic, or an older server
        return JetStreamWriter(options, schema)


def worker_python_problem(master: str, configured_python: str | None) -> str | None:
    """Why Spark's Python workers could not import this package, or None when they can or it cannot be told.

    ``configured_python`` is ``spark.pyspark.python`` or ``PYSPARK_PYTHON`` when set: the user chose it.
    Otherwise the workers run ``python3`` from PATH; with a local master that is this machine's, so
    it is asked to import the package (a cluster's workers are not checked from here).
    """
    if configured_python or not master.startswith("local"):
        return None
    python3 = shutil.which("python3")
    if python3 is None:
        return "no `python3` on PATH for Spark's Python workers"
    if os.path.abspath(python3) == os.path.abspath(sys.executable):
        return None
    probe = subprocess.run(
        [python3, "-c", "import airflow_provider_jetstream, pyarrow, numpy, nats"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if probe.returncode == 0:
        return None
    last_line = (probe.stderr.strip().splitlines() or ["import failed"])[-1]
    return f"PYSPARK_PYTHON is not set, so Spark's Python workers run {python3}, which fails: {last_line}"


def is_spark_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (a client of a server elsewhere: no JVM, no SparkContext here)."""
    return type(spark).__module__.startswith("pyspark.sql.connect.")


def register(spark: Any) -> type[JetStreamDataSource]:
    """Register the ``jetstream`` format with ``spark``, defaulting partitions to its parallelism.

    Same as ``spark.dataSource.register(JetStreamDataSource)``, except that reads without
    ``minPartitions`` use Spark's default parallelism instead of the driver's CPU count, and that
    a local session whose Python workers cannot import this package (``PYSPARK_PYTHON`` not set,
    ``python3`` on PATH another interpreter) fails here, saying what to set, instead of at the
    first read with ``ModuleNotFoundError`` deep in a worker's traceback.
    Over Spark Connect it registers the source in the server's session (the class travels pickled; the server's
    Python workers import this package, so it must be installed where the server runs) and reads without
    ``minPartitions`` use the CPU count of the planning Python worker, on the server.
    Returns the registered class.
    """
    if is_spark_connect(spark):
        parallelism, master, configured = None, "", None
    else:
        context = spark.sparkContext
        parallelism = int(context.defaultParallelism)
        master = context.master
        configured = context.getConf().get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON")
    problem = worker_python_problem(master, configured)
    if problem:
        raise JetStreamConfigError(worker_python_hint(problem))
    source = type("JetStreamDataSource", (JetStreamDataSource,), {"default_parallelism": parallelism})
    spark.dataSource.register(source)
    return source
