"""Benchmark: the two range readers (vectorised, nats-py) alone and in Spark, against references.

One run on one machine: N messages of 100 bytes in a stream of the leaf domain, then R interleaved
rounds, each measuring

  (a)  the hub's server-side mirror of the leaf stream catching up (no Python),
  (b)  a plain nats-py ``pull_subscribe().fetch(1000)`` loop through the hub,
  (c0) ``read_range(reader="nats-py")`` (the earlier fast path) in this process, on the leaf itself,
  (c1) ``read_range(reader="vectorised")`` the same way,
  (f)  framing only: raw pull requests into the same frame splitter, frames counted (the Python
       limit of this design: no columns, no range logic),
  (d0/d1) ``spark.read.format("jetstream").load().count()`` on local[2] from the leaf server (the
       stream's own server), nats-py / vectorised reader,
  (h0/h1) the same through the hub (the leaf's domain read from a hub connection),
  (e0/e1) the packaged job (leaf stream -> Parquet, checkpoint in a hub KV bucket) in this driver,
       through the hub, nats-py / vectorised reader.

For each Spark read it also records the cost per core, CPU microseconds per message (from /proc): of
Spark's JVM, of its Python workers (where the readers run), and of each nats-server (the stream's
own server, and the hub when reading through it).

Prints medians, reader CPU per message (this process's CPU time / messages; each reader warms up
first) and the ratios c1/c0, c1/f, d1/d0, h1/h0, e1/e0 taken within each round (so a busy machine
slows both sides), and the vectorised reader's CPU against the nats-py reader's within a round.
The leaf links' compression is pinned (``--leaf-compression``, default off): with nats-server's
default, s2_auto, a leaf starts compressing everything it sends to the hub once it measures a round
trip over 10 ms, which this machine's loopback shows while it is saturated, and its CPU per message
read through the hub then doubles, in some runs and not others.

With ``--readers-only`` no Spark session is started: the readers are timed (a, b, c, f) without a
Spark JVM sharing the machine.

    python bench/spark_read.py [--messages 1000000] [--fetch-messages 200000] [--rounds 3] [--readers-only]
                               [--leaf-compression off]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nats
import psutil
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, ExternalStream, StreamConfig, StreamSource

from airflow_provider_jetstream.core.connection.settings import JetStreamConnectionConfig
from airflow_provider_jetstream.core.read.range import read_range
from airflow_provider_jetstream.core.read.vectorised.tap import install
from airflow_provider_jetstream.testing.servers import USERS, LocalTopology

STREAM = "BENCH"
MIRROR = "BENCH_MIRROR"


def _cpu_seconds(process: psutil.Process) -> float:
    """CPU seconds of ``process`` and of the children it reaped."""
    times = process.cpu_times()
    return times.user + times.system + times.children_user + times.children_system


def cpu_by_kind(root: int, exclude: set[int]) -> dict[str, float]:
    """CPU seconds of ``root``'s live descendants (not ``root``, not the ``exclude`` processes), as
    ``jvm`` (java) and ``python`` (Spark's Python workers); reaped processes count in their parent."""
    used = {"jvm": 0.0, "python": 0.0}
    for child in psutil.Process(root).children(recursive=True):
        if child.pid in exclude:
            continue
        try:
            used["jvm" if child.name() == "java" else "python"] += _cpu_seconds(child)
        except psutil.NoSuchProcess:
            continue
    return used


class CpuMeter:
    """CPU seconds spent during a read by Spark (JVM, Python workers) and by the given nats-servers."""

    def __init__(self, servers: dict[str, int]) -> None:
        self.servers = servers
        self.start: dict[str, float] = {}
        self.used: dict[str, float] = {}

    def sample(self) -> dict[str, float]:
        out = cpu_by_kind(os.getpid(), exclude=set(self.servers.values()))
        for name, pid in self.servers.items():
            out[name] = _cpu_seconds(psutil.Process(pid))
        return out

    def __enter__(self) -> CpuMeter:
        self.start = self.sample()
        return self

    def __exit__(self, *exc: object) -> None:
        end = self.sample()
        self.used = {name: end[name] - self.start[name] for name in end}


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


async def mirror_catch_up(topology: LocalTopology, count: int, round_no: int) -> float:
    """(a) Create a hub mirror of the leaf stream and time until it holds every message (then delete it)."""
    nc = await _connect(topology.hub.port)
    js = nc.jetstream()
    name = f"{MIRROR}_{round_no}"
    started = time.perf_counter()
    await js.add_stream(
        StreamConfig(name=name, mirror=StreamSource(name=STREAM, external=ExternalStream(api="$JS.leaf.API")))
    )
    while (await js.stream_info(name)).state.messages < count:
        await asyncio.sleep(0.02)
    elapsed = time.perf_counter() - started
    await js.delete_stream(name)
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


async def one_process(port: int, count: int, reader: str, api_prefix: str) -> tuple[float, float]:
    """(c) ``read_range`` with ``reader`` in this process. Returns msg/s and reader CPU us/msg."""
    nc = await _connect(port)
    cpu, started = time.process_time(), time.perf_counter()
    received = 0
    async for chunk in read_range(nc, STREAM, 1, count, api_prefix=api_prefix, include_headers=False, reader=reader):
        received += len(chunk)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    await nc.close()
    if received != count:
        raise SystemExit(f"the {reader} reader read {received} messages, not {count}")
    return count / elapsed, cpu / count * 1e6


class _Counter:
    """A frame sink that only counts: what is left is framing (the Python limit of this design)."""

    def __init__(self) -> None:
        self.count = 0
        self.event = asyncio.Event()

    def on_data(self, bufs: list, records: object) -> None:
        self.count += len(records)  # type: ignore[arg-type]
        self.event.set()

    def on_other(self, *frame: bytes) -> None:
        self.event.set()


async def framing_only(port: int, count: int, api_prefix: str, window: int = 20_000) -> tuple[float, float]:
    """(f) Raw pull requests into the same frame splitter, frames counted and dropped (no columns)."""
    nc = await _connect(port)
    jsm = nc.jsm(prefix=api_prefix)
    name = f"raw_{time.monotonic_ns()}"
    config = ConsumerConfig(
        name=name,
        deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=1,
        ack_policy=AckPolicy.NONE,
        mem_storage=True,
        inactive_threshold=60,
    )
    await jsm.add_consumer(STREAM, config)
    counter = _Counter()
    tap = install(nc)
    sub = await nc.subscribe(nc.new_inbox(), cb=_ignore)
    tap.tap(sub._id, counter)
    cpu, started = time.process_time(), time.perf_counter()
    requested = 0
    while counter.count < count:
        if requested - counter.count <= window // 2 and requested < count:
            batch = min(window - (requested - counter.count), count - requested)
            request = json.dumps({"batch": batch, "expires": 30_000_000_000}).encode()
            await nc.publish(f"{api_prefix}.CONSUMER.MSG.NEXT.{STREAM}.{name}", request, reply=sub.subject)
            requested += batch
        counter.event.clear()
        await asyncio.wait_for(counter.event.wait(), 30)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    tap.untap(sub._id)
    await jsm.delete_consumer(STREAM, name)
    await nc.close()
    return count / elapsed, cpu / count * 1e6


async def _ignore(msg: object) -> None:
    """Tapped: nothing reaches nats-py."""


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


def spark_count(spark, count: int, reader: str, leaf_port: int | None = None) -> float:  # type: ignore[no-untyped-def]
    """(d) spark.read.format("jetstream").load().count() with ``reader``: through the hub, or on the
    leaf server itself (the stream's own server) when ``leaf_port`` is given."""

    def make():  # type: ignore[no-untyped-def]
        # A DataFrameReader's option() changes it in place: a fresh one per read.
        frame = spark.read.format("jetstream").option("stream", STREAM).option("reader", reader)
        if leaf_port is None:
            return frame.option("domain", "leaf")
        user, password = USERS["ACC"]
        servers = f"nats://127.0.0.1:{leaf_port}"
        return frame.option("servers", servers).option("user", user).option("password", password)

    started = time.perf_counter()
    counted = make().option("includeHeaders", "false").option("endSeq", str(count)).load().count()
    elapsed = time.perf_counter() - started
    if counted != count:
        raise SystemExit(f"Spark counted {counted} messages, not {count}")
    return count / elapsed


def packaged_job(spark, count: int, workdir: Path, reader: str, run: str) -> float:  # type: ignore[no-untyped-def]
    """(e) The packaged job in this driver, through the hub: the leaf stream -> Parquet, checkpoint
    in a hub KV bucket (a new key and output directory per run, so each run copies 1..count)."""
    from airflow_provider_jetstream.spark.jobs.stream_to_parquet import StreamToParquetJob, parse_args

    argv = ["--stream", STREAM, "--domain", "leaf", "--output-path", str(workdir / "parquet" / run)]
    argv += ["--checkpoint-bucket", "bench", "--checkpoint-key", f"bench.{run}", "--reader", reader]
    argv += ["--end-seq", str(count)]
    started = time.perf_counter()
    result = StreamToParquetJob(spark, parse_args(argv)).run()
    elapsed = time.perf_counter() - started
    if (result.start, result.end, result.wrote) != (1, count, True):
        raise SystemExit(f"the job copied {result.start}-{result.end} (wrote: {result.wrote}), not 1-{count}")
    return count / elapsed


LABELS = {
    "a": "hub mirror catch-up (server side, no Python)",
    "b": "nats-py pull_subscribe().fetch(1000)",
    "c0": "read_range, reader=nats-py (today's fast path)",
    "c1": "read_range, reader=vectorised",
    "f": "framing only (raw frames counted, Python limit)",
    "d0": "Spark count(), leaf's own server, nats-py",
    "d1": "Spark count(), leaf's own server, vectorised",
    "h0": "Spark count(), leaf through the hub, nats-py",
    "h1": "Spark count(), leaf through the hub, vectorised",
    "e0": "packaged job to Parquet, through the hub, nats-py",
    "e1": "packaged job to Parquet, through the hub, vectorised",
}
#: The Spark reads whose cost per core is recorded, and the servers they load.
SPARK_KEYS = ("d0", "d1", "h0", "h1", "e0", "e1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages in the leaf stream")
    parser.add_argument(
        "--fetch-messages", type=int, default=200_000, help="messages read by the slow fetch loop (b); its rate"
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians are reported")
    parser.add_argument(
        "--readers-only",
        action="store_true",
        help="only a, b, c0, c1 and f: no Spark JVM on the machine while the readers are timed",
    )
    parser.add_argument(
        "--leaf-compression",
        default="off",
        help="the leaf link's compression mode (nats-server's default is s2_auto, which switches to s2_fast "
        "when it measures a round trip over 10 ms, as a busy machine's loopback can)",
    )
    ns = parser.parse_args()
    count = ns.messages
    keys = [key for key in LABELS if not (ns.readers_only and key in SPARK_KEYS)]
    rates: dict[str, list[float]] = {key: [] for key in keys}
    cpu: dict[str, list[float]] = {"c0": [], "c1": [], "f": []}
    ratios: dict[str, list[float]] = {
        ratio: [] for ratio in ("c1/c0", "c1/f", "d1/d0", "h1/h0", "e1/e0") if ratio.split("/")[0] in keys
    }
    # CPU us per message of each Spark read: the JVM, the Python workers, the leaf server, the hub server.
    costs = {key: {side: [] for side in ("jvm", "python", "leaf", "hub")} for key in SPARK_KEYS}
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="jetstream-bench-") as tmp:
        workdir = Path(tmp)
        with LocalTopology(
            workdir / "servers", leaf_domains=["leaf"], leaf_compression=ns.leaf_compression
        ) as topology:
            leaf = topology.leaves["leaf"].port
            print(f"{count:,} messages of 100 bytes in leaf stream {STREAM!r}; {ns.rounds} interleaved rounds")
            print(f"  leaf link compression: {ns.leaf_compression}")
            filled = asyncio.run(fill_leaf_stream(topology, count))
            print(f"  publish to the leaf (core NATS, for setup)  {filled:>10,.0f} msg/s")
            # Import and warm up the readers (pyarrow.compute loads on the first vectorised read).
            for reader in ("nats-py", "vectorised"):
                asyncio.run(one_process(leaf, min(count, 50_000), reader, "$JS.API"))
            asyncio.run(framing_only(leaf, min(count, 50_000), "$JS.API"))
            spark = None if ns.readers_only else spark_session(topology)
            # Warm up the JVM, the workers and the Parquet writer (its JIT keeps warming for minutes).
            for reader in ("vectorised", "nats-py") if spark else ():
                spark_count(spark, min(count, 50_000), reader)
                packaged_job(spark, min(count, 200_000), workdir, reader, f"warm-{reader}")
            for round_no in range(ns.rounds):
                rates["a"].append(asyncio.run(mirror_catch_up(topology, count, round_no)))
                rates["b"].append(asyncio.run(fetch_loop(topology, min(ns.fetch_messages, count))))
                for key, reader in (("c0", "nats-py"), ("c1", "vectorised")):
                    rate, per_msg = asyncio.run(one_process(leaf, count, reader, "$JS.API"))
                    rates[key].append(rate)
                    cpu[key].append(per_msg)
                rate, per_msg = asyncio.run(framing_only(leaf, count, "$JS.API"))
                rates["f"].append(rate)
                cpu["f"].append(per_msg)
                meter_servers = {"leaf": topology.leaves["leaf"].process.pid, "hub": topology.hub.process.pid}
                runs = []
                # Either reader goes first in every other round: what warms up over the run favours neither.
                order = (("0", "nats-py"), ("1", "vectorised"))
                for index, reader in (order if round_no % 2 == 0 else order[::-1]) if spark else ():
                    job_run = f"{round_no}-{reader}"
                    runs += [
                        ("d" + index, lambda r=reader: spark_count(spark, count, r, leaf_port=leaf)),
                        ("h" + index, lambda r=reader: spark_count(spark, count, r)),
                        ("e" + index, lambda r=reader, j=job_run: packaged_job(spark, count, workdir, r, j)),
                    ]
                for key, measure in runs:
                    with CpuMeter(meter_servers) as meter:
                        rates[key].append(measure())
                    for side, seconds in meter.used.items():
                        costs[key][side].append(seconds / count * 1e6)
                for ratio in ratios:
                    top, bottom = ratio.split("/")
                    ratios[ratio].append(rates[top][-1] / rates[bottom][-1])
                print(f"  round {round_no + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in rates.items()))
            if spark:
                spark.stop()
    median = {key: statistics.median(values) for key, values in rates.items()}
    print(f"\nload average at start: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} (2 cores)")
    print(f"\n{'':5}{'reader':50}{'msg/s':>11}{'x (a)':>8}{'CPU us/msg':>12}")
    for key in keys:
        label = LABELS[key]
        per_msg = f"{statistics.median(cpu[key]):.2f}" if key in cpu else ""
        print(f"({key:>2}) {label:50}{median[key]:>11,.0f}{median[key] / median['a']:>8.2f}{per_msg:>12}")
    print("\nratios within a round (median of rounds):")
    targets = {"c1/c0": 2.5, "c1/f": 0.5, "d1/d0": 2.0, "h1/h0": 1.4, "e1/e0": 1.5}
    for ratio, values in ratios.items():
        value = statistics.median(values)
        rounds = " ".join(f"{v:.2f}" for v in values)
        verdict = "met" if value >= targets[ratio] else "MISSED"
        print(f"  {ratio:6} {value:5.2f}x  (target >= {targets[ratio]}x: {verdict}; rounds {rounds})")
    c1_cpu = statistics.median(cpu["c1"])
    verdict = "met" if c1_cpu <= 2 else "MISSED"
    rounds = " ".join(f"{v:.2f}" for v in cpu["c1"])
    print(f"  vectorised reader CPU {c1_cpu:.2f} us/msg (target <= 2: {verdict}; rounds {rounds})")
    # The machine's speed moves the absolute figure: the same reader's CPU against nats-py's, within a round.
    relative = statistics.median(v1 / v0 for v1, v0 in zip(cpu["c1"], cpu["c0"], strict=True))
    print(f"  vectorised reader CPU / nats-py reader CPU {relative:.3f} (within a round, median of rounds)")
    if ns.readers_only:
        return
    print("\ncost per core, CPU us per message (median of rounds): Spark's JVM and Python workers, each server")
    print(f"{'':5}{'read':50}{'JVM':>8}{'Python':>8}{'leaf':>8}{'hub':>8}")
    for key in SPARK_KEYS:
        row = {side: statistics.median(values) for side, values in costs[key].items()}
        cells = "".join(f"{row[side]:>8.2f}" for side in ("jvm", "python", "leaf", "hub"))
        print(f"({key:>2}) {LABELS[key]:50}{cells}")


if __name__ == "__main__":
    main()
