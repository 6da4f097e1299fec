"""Benchmark: reading a leaf stream through the hub, from server-side mirroring to Spark.

One run on one machine: N messages of 100 bytes in a stream of the leaf domain, read through a
connection to the hub, by

  (a) the hub's server-side mirror of the leaf stream catching up (the ceiling: no Python),
  (b) a plain nats-py ``pull_subscribe().fetch(1000)`` loop,
  (c) the fast pull path (``airflow_provider_jetstream.core.pull.read_range``) in one process,
  (d) ``spark.read.format("jetstream").load().count()`` on local[2] (warm),
  (e) the packaged stream_to_parquet job (Spark, local[2]) writing Parquet.

Prints msg/s for each and the ratios; the targets are (d) >= 4x (b) and (d) >= 0.5x (a).

    python bench/spark_read.py [--messages 1000000] [--fetch-messages 200000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import nats
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, ExternalStream, StreamConfig, StreamSource

from airflow_provider_jetstream.core.connection import JetStreamConnectionConfig
from airflow_provider_jetstream.core.pull import read_range
from airflow_provider_jetstream.testing.servers import USERS, LocalTopology

STREAM = "BENCH"
MIRROR = "BENCH_MIRROR"


async def _connect(port: int) -> nats.NATS:
    user, password = USERS["ACC"]
    return await nats.connect(f"nats://127.0.0.1:{port}", user=user, password=password)


async def fill_leaf_stream(topology: LocalTopology, count: int) -> float:
    """Publish ``count`` 100-byte messages to the leaf stream (core publish, then wait until stored)."""
    nc = await _connect(topology.leaves["leaf"].port)
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name=STREAM, subjects=["bench.>"]))
    payload = b"x" * 100
    started = time.perf_counter()
    for i in range(count):
        await nc.publish(f"bench.{i % 8}", payload)
        if i % 20_000 == 0:
            await nc.flush()
    await nc.flush()
    while (await js.stream_info(STREAM)).state.messages < count:
        await asyncio.sleep(0.05)
    elapsed = time.perf_counter() - started
    stored = (await js.stream_info(STREAM)).state.messages
    await nc.close()
    if stored != count:
        raise SystemExit(f"the leaf stream stored {stored} messages, not {count}")
    return count / elapsed


async def mirror_catch_up(topology: LocalTopology, count: int) -> float:
    """(a) Create the hub's mirror of the leaf stream and time until it holds every message."""
    nc = await _connect(topology.hub.port)
    js = nc.jetstream()
    started = time.perf_counter()
    await js.add_stream(
        StreamConfig(name=MIRROR, mirror=StreamSource(name=STREAM, external=ExternalStream(api="$JS.leaf.API")))
    )
    while (await js.stream_info(MIRROR)).state.messages < count:
        await asyncio.sleep(0.02)
    elapsed = time.perf_counter() - started
    await nc.close()
    return count / elapsed


async def fetch_loop(topology: LocalTopology, count: int) -> float:
    """(b) nats-py's pull_subscribe().fetch(1000), no acks, through the hub into the leaf domain."""
    nc = await _connect(topology.hub.port)
    js = nc.jetstream(domain="leaf")
    sub = await js.pull_subscribe(
        "bench.>",
        stream=STREAM,
        config=ConsumerConfig(ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL, inactive_threshold=60),
    )
    started = time.perf_counter()
    received = 0
    while received < count:
        received += len(await sub.fetch(1000, timeout=10))
    elapsed = time.perf_counter() - started
    await sub.unsubscribe()
    await nc.close()
    return received / elapsed


async def fast_path(topology: LocalTopology, count: int) -> float:
    """(c) The fast pull path in this process, through the hub into the leaf domain."""
    nc = await _connect(topology.hub.port)
    started = time.perf_counter()
    received = 0
    async for chunk in read_range(nc, STREAM, 1, count, api_prefix="$JS.leaf.API", include_headers=False):
        received += len(chunk)
    elapsed = time.perf_counter() - started
    await nc.close()
    if received != count:
        raise SystemExit(f"the fast path read {received} messages, not {count}")
    return count / elapsed


def spark_session(topology: LocalTopology):  # type: ignore[no-untyped-def]
    from pyspark.sql import SparkSession

    from airflow_provider_jetstream.spark import register
    from airflow_provider_jetstream.spark.options import connection_env

    user, password = USERS["ACC"]
    hub = JetStreamConnectionConfig.from_fields(
        conn_id="bench", host=f"127.0.0.1:{topology.hub.port}", login=user, password=password
    )
    # The JVM (and the data source's planner processes) inherit this: as under the operator.
    os.environ.update(connection_env(hub))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def spark_count(spark, count: int) -> float:  # type: ignore[no-untyped-def]
    """(d) spark.read.format("jetstream").load().count(), after a warm-up read."""

    def reader():  # type: ignore[no-untyped-def]
        # A DataFrameReader's option() changes it in place: a fresh one per read.
        return spark.read.format("jetstream").option("stream", STREAM).option("domain", "leaf")

    reader().option("endingSequence", str(min(count, 50_000))).load().count()  # warm up JVM and workers
    started = time.perf_counter()
    counted = reader().option("includeHeaders", "false").load().count()
    elapsed = time.perf_counter() - started
    if counted != count:
        raise SystemExit(f"Spark counted {counted} messages, not {count}")
    return count / elapsed


def packaged_job(spark, count: int, workdir: Path) -> float:  # type: ignore[no-untyped-def]
    """(e) The packaged job (in this driver): leaf stream -> Parquet, checkpoint in a hub KV bucket."""
    from airflow_provider_jetstream.spark.jobs.stream_to_parquet import StreamToParquetJob, parse_args

    args = parse_args(
        ["--stream", STREAM, "--domain", "leaf", "--output", str(workdir / "parquet"), "--checkpoint-bucket", "bench"]
    )
    started = time.perf_counter()
    result = StreamToParquetJob(spark, args).run()
    elapsed = time.perf_counter() - started
    if (result.start, result.end) != (1, count):
        raise SystemExit(f"the job copied {result.start}-{result.end}, not 1-{count}")
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages in the leaf stream")
    parser.add_argument(
        "--fetch-messages", type=int, default=200_000, help="messages read by the slow fetch loop (b); its rate"
    )
    ns = parser.parse_args()
    count = ns.messages
    with tempfile.TemporaryDirectory(prefix="jetstream-bench-") as tmp:
        workdir = Path(tmp)
        with LocalTopology(workdir / "servers", leaf_domains=["leaf"]) as topology:
            print(f"{count:,} messages of 100 bytes in leaf stream {STREAM!r}, read through the hub; 2 cores shared")
            filled = asyncio.run(fill_leaf_stream(topology, count))
            print(f"  publish to the leaf (core NATS, for setup)  {filled:>10,.0f} msg/s")
            rates = {
                "a": asyncio.run(mirror_catch_up(topology, count)),
                "b": asyncio.run(fetch_loop(topology, min(ns.fetch_messages, count))),
                "c": asyncio.run(fast_path(topology, count)),
            }
            spark = spark_session(topology)
            rates["d"] = spark_count(spark, count)
            rates["e"] = packaged_job(spark, count, workdir)
            spark.stop()
    labels = {
        "a": "hub mirror catch-up (server side)",
        "b": "nats-py pull_subscribe().fetch(1000)",
        "c": "fast pull path, one process",
        "d": 'spark.read.format("jetstream").count()',
        "e": "packaged job to Parquet",
    }
    print(f"\n{'':4}{'reader':42}{'msg/s':>12}{'x (a)':>9}{'x (b)':>9}")
    for key, label in labels.items():
        rate = rates[key]
        print(f"({key}) {label:42}{rate:>12,.0f}{rate / rates['a']:>9.2f}{rate / rates['b']:>9.2f}")
    d_vs_b, d_vs_a = rates["d"] / rates["b"], rates["d"] / rates["a"]
    print(
        f"\ntargets: (d) >= 4x (b): {d_vs_b:.2f}x {'met' if d_vs_b >= 4 else 'MISSED'}; "
        f"(d) >= 0.5x (a): {d_vs_a:.2f}x {'met' if d_vs_a >= 0.5 else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
