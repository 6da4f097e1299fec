"""Benchmark: JetStreamPublishOperator against a raw nats-py ``publish_async`` loop, in one run.

Starts a local hub + leaf (free loopback ports), creates a stream in the hub, and publishes N
messages of 100 bytes, alternating:

- ``operator``: ``JetStreamPublishOperator.execute()`` end to end (connection, double-store guard,
  per-message ``Nats-Msg-Id``, ack checks);
- ``raw+msgid``: ``js.publish_async`` in a loop with the same ``Nats-Msg-Id`` header, then
  ``publish_async_completed()`` (what a user would write for the same guarantee);
- ``raw``: the same loop without headers (no deduplication), for reference.

And, on a second stream with ``allow_batched`` (nats-server 2.14+), in the same rounds:

- ``per-message``: the operator with ``fast_ingest=False`` (one ack per message);
- ``fast-ingest``: the operator as it is, which publishes in fast-ingest batches there;
- ``ceiling``: the server's ingest ceiling: a core ``nc.publish`` loop into the stream, no reply,
  no ids, timed until the stream holds every message.

And the Spark writer (``df.write.format("jetstream")``, ``local[2]``, two tasks) into the
``allow_batched`` stream, in rounds of its own after those: ``spark per-message``
(``fastIngest=false``) against ``spark fast-ingest`` (the default), ``--spark-rows`` rows of 100 bytes
with a ``Nats-Msg-Id`` each (0: no Spark rounds), and ``fast-ingest ceiling``: the same messages, made
into blocks before the clock starts, sent in fast-ingest batches over two connections at once (the writer's
two tasks without Spark), the most the server stores through fast ingest.

Prints each rate and operator / raw+msgid (target >= 0.9x), fast-ingest / per-message for the operator
and the writer (target >= 3x) and fast-ingest / ceiling (target >= 0.5x); for the writer also its share
of the fast-ingest ceiling, and the hub server's CPU in cores while the fast paths ran.

    .venv/bin/python bench/publish.py [--messages 20000] [--rounds 3] [--spark-rows 200000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from typing import TypeVar

from hub import CONN_ID, connect, hub_topology

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.protocol import EXPECTED_STREAM_HEADER, MSG_ID_HEADER
from airflow_provider_jetstream.core.publish.blocks import Block
from airflow_provider_jetstream.core.publish.fast_ingest import batch_target, publish_batches
from airflow_provider_jetstream.core.publish.summary import PublishSummary
from bench.spark_read import CpuMeter, spark_session

PAYLOAD = b"x" * 100
T = TypeVar("T")


def server_cores(pid: int, run: Callable[[], T]) -> tuple[T, float]:
    """``run()``, and the CPU the server ``pid`` used meanwhile, in cores (CPU seconds per second)."""
    with CpuMeter({"server": pid}) as meter:
        started = time.perf_counter()
        result = run()
        elapsed = time.perf_counter() - started
    return result, meter.used["server"] / elapsed


async def raw_loop(url: str, subject: str, n: int, with_ids: bool, tag: str) -> float:
    nc = await connect(url)
    try:
        js = nc.jetstream(publish_async_max_pending=4000)
        started = time.perf_counter()
        for i in range(n):
            headers = {"Nats-Msg-Id": f"{tag}/{i}"} if with_ids else None
            await js.publish_async(subject, PAYLOAD, headers=headers)
        await js.publish_async_completed()
        return n / (time.perf_counter() - started)
    finally:
        await nc.close()


async def ceiling_loop(url: str, subject: str, stream: str, n: int) -> float:
    """Core publishes into the stream (no reply, no ids), timed until the stream holds them all."""
    nc = await connect(url)
    try:
        js = nc.jetstream()
        target = (await js.stream_info(stream)).state.messages + n
        started = time.perf_counter()
        for _ in range(n):
            await nc.publish(subject, PAYLOAD)
        await nc.flush()
        while (await js.stream_info(stream)).state.messages < target:
            await asyncio.sleep(0.002)
        return n / (time.perf_counter() - started)
    finally:
        await nc.close()


async def fast_ingest_ceiling(url: str, stream: str, n: int, tag: str, connections: int) -> float:
    """``n`` messages to the subject ``stream`` with a ``Nats-Msg-Id`` and ``Nats-Expected-Stream`` each (the
    writer's headers), made into blocks of 1,000 before the clock starts, sent in fast-ingest batches over
    ``connections`` connections at once (framed as they go, as the writer's are), timed until every batch's
    final ack."""
    clients = [await connect(url) for _ in range(connections)]
    try:
        target = await batch_target(JetStreamApi(clients[0], "$JS.API", timeout=5), stream)
        assert target is not None, f"stream {stream!r} takes no fast-ingest batches"
        headers = {MSG_ID_HEADER: "", EXPECTED_STREAM_HEADER: stream}
        share = n // connections
        blocks = [
            [
                Block(stream, [PAYLOAD] * len(ids), headers, ids)
                for ids in ([f"{tag}/{c}/{i}" for i in range(k, min(k + 1000, share))] for k in range(0, share, 1000))
            ]
            for c in range(connections)
        ]

        async def send(nc, blocks: list[Block]) -> None:  # type: ignore[no-untyped-def]
            summary = PublishSummary()
            left = await publish_batches(
                nc, target, iter(blocks), summary, check=lambda _: None, ack_timeout=30, what="bench"
            )
            assert left is None and summary.stored == share and not summary.failures, summary

        started = time.perf_counter()
        await asyncio.gather(*(send(nc, own) for nc, own in zip(clients, blocks, strict=True)))
        return connections * share / (time.perf_counter() - started)
    finally:
        for nc in clients:
            await nc.close()


def operator_run(conn_id: str, subject: str, n: int, tag: str, fast_ingest: bool | None = None) -> float:
    from airflow_provider_jetstream.operators.publish import JetStreamPublishOperator

    op = JetStreamPublishOperator(
        task_id="bench",
        jetstream_conn_id=conn_id,
        subject=subject,
        messages=[PAYLOAD] * n,
        msg_id=f"{tag}/{{index}}",
        options={"fast_ingest": fast_ingest},
    )
    started = time.perf_counter()
    result = op.execute({})
    elapsed = time.perf_counter() - started
    assert result["stored"] == n, result
    assert result["batches"] == (1 if subject == "batched" and fast_ingest is not False else 0), result
    return n / elapsed


def spark_write(spark, subject: str, stream: str, n: int, tag: str, fast_ingest: bool) -> float:  # type: ignore[no-untyped-def]
    """``n`` rows written by two Spark tasks, timed until the write returns (every row acknowledged)."""
    rows = spark.range(n).selectExpr(f"concat('{tag}/', id) AS id", "repeat('x', 100) AS data").coalesce(2)
    started = time.perf_counter()
    rows.write.format("jetstream").option("subject", subject).option("expectedStream", stream).option(
        "msgIdColumn", "id"
    ).option("fastIngest", str(fast_ingest).lower()).mode("append").save()
    return n / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--spark-rows", type=int, default=200000)
    args = parser.parse_args()
    with hub_topology() as topo:

        async def setup() -> None:
            nc = await connect(topo.hub.url)
            await nc.jetstream().add_stream(name="bench", subjects=["bench"], duplicate_window=60)
            body = {
                "name": "batched",
                "subjects": ["batched"],
                "duplicate_window": 60_000_000_000,
                "allow_batched": True,
            }
            reply = await nc.request("$JS.API.STREAM.CREATE.batched", json.dumps(body).encode(), 5)
            assert json.loads(reply.data)["config"].get("allow_batched"), "allow_batched needs nats-server 2.14+"
            await nc.close()

        asyncio.run(setup())
        rates: dict[str, list[float]] = {
            "operator": [],
            "raw+msgid": [],
            "raw": [],
            "per-message": [],
            "fast-ingest": [],
            "ceiling": [],
        }
        hub_pid = topo.hub.process.pid  # type: ignore[union-attr]
        cores: dict[str, list[float]] = {"fast-ingest": [], "ceiling": []}
        asyncio.run(raw_loop(topo.hub.url, "bench", 2000, True, "warmup"))  # warm up
        operator_run(CONN_ID, "batched", 2000, "warmup")
        for r in range(args.rounds):
            rates["raw+msgid"].append(asyncio.run(raw_loop(topo.hub.url, "bench", args.messages, True, f"raw{r}")))
            rates["operator"].append(operator_run(CONN_ID, "bench", args.messages, f"op{r}"))
            rates["raw"].append(asyncio.run(raw_loop(topo.hub.url, "bench", args.messages, False, "")))
            rates["per-message"].append(operator_run(CONN_ID, "batched", args.messages, f"pm{r}", fast_ingest=False))
            rate, used = server_cores(hub_pid, lambda r=r: operator_run(CONN_ID, "batched", args.messages, f"fi{r}"))
            rates["fast-ingest"].append(rate)
            cores["fast-ingest"].append(used)
            rate, used = server_cores(
                hub_pid, lambda: asyncio.run(ceiling_loop(topo.hub.url, "batched", "batched", args.messages))
            )
            rates["ceiling"].append(rate)
            cores["ceiling"].append(used)
        if args.spark_rows:
            spark = spark_session(topo)
            for name in ("spark per-message", "spark fast-ingest", "fast-ingest ceiling"):
                rates[name], cores[name] = [], []
            spark_write(spark, "batched", "batched", 2000, "warmup", True)
            rows = args.spark_rows
            paths: dict[str, Callable[[str], float]] = {
                "spark per-message": lambda tag: spark_write(spark, "batched", "batched", rows, tag, False),
                "spark fast-ingest": lambda tag: spark_write(spark, "batched", "batched", rows, tag, True),
                "fast-ingest ceiling": lambda tag: asyncio.run(
                    fast_ingest_ceiling(topo.hub.url, "batched", rows, tag, connections=2)
                ),
            }
            for r in range(args.rounds):
                order = list(paths) if r % 2 == 0 else list(reversed(paths))
                for name in order:
                    rate, used = server_cores(hub_pid, lambda name=name, r=r: paths[name](f"s{r}{name}"))
                    rates[name].append(rate)
                    cores[name].append(used)
            spark.stop()
        print(f"{args.messages} messages x {args.rounds} rounds, 100-byte payloads, hub on loopback")
        for name, values in rates.items():
            print(
                f"  {name:17s} median {statistics.median(values):9.0f} msg/s  (runs: "
                + ", ".join(f"{v:.0f}" for v in values)
                + ")"
            )
        ratio = statistics.median(rates["operator"]) / statistics.median(rates["raw+msgid"])
        plain = statistics.median(rates["operator"]) / statistics.median(rates["raw"])
        print(f"operator / raw publish_async loop with Nats-Msg-Id: {ratio:.2f}x (target >= 0.9x)")
        print(f"operator / raw publish_async loop without headers: {plain:.2f}x")
        fast = statistics.median(rates["fast-ingest"])
        print(
            f"fast-ingest / per-message (allow_batched stream): {fast / statistics.median(rates['per-message']):.2f}x"
        )
        print(
            f"fast-ingest / ingest ceiling (core publish, no acks): {fast / statistics.median(rates['ceiling']):.2f}x"
        )
        for name, values in cores.items():
            print(f"  hub server CPU during {name}: median {statistics.median(values):.2f} cores")
        if args.spark_rows:
            writer = statistics.median(rates["spark fast-ingest"])
            per_message = statistics.median(rates["spark per-message"])
            top = statistics.median(rates["fast-ingest ceiling"])
            print(f"Spark writer fast-ingest / per-message ({args.spark_rows} rows): {writer / per_message:.2f}x")
            print(f"Spark writer fast-ingest / fast-ingest ceiling: {writer / top:.2f}x")
            print(f"fast-ingest ceiling / Spark writer per-message (the writer's bound): {top / per_message:.2f}x")


if __name__ == "__main__":
    main()
