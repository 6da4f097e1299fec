"""Benchmark: acking fetched messages one by one from synchronous code, against nats-py in async code.

Starts a local hub + leaf (free loopback ports), stores N messages of 100 bytes in a hub stream, and in
each round, for each path in turn (the order alternating), reads them through a durable consumer of its
own and acks each, every ack confirmed by the consumer. Times the acks only (the fetch before them is
not timed), except for ``consume``, timed whole:

- ``nats-py``: the baseline; ``await msg.ack_sync()`` for each message of a nats-py ``fetch``, on its
  one connection;
- ``own connection``: ``message.ack()`` after a blocking ``hook.fetch``, outside any block: each ack
  opens a connection and closes it;
- ``connected()``: the same inside ``with hook.connected():``, one connection for the fetch and the acks;
- ``consume``: ``for message in hook.consume(...): message.ack()``, the fetches included.

Prints the median milliseconds per message of each path and its ratio to the baseline.

    .venv/bin/python bench/settle.py [--messages 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable

from hub import CONN_ID, connect, hub_topology

STREAM = "settle"
PATHS = ("nats-py", "own connection", "connected()", "consume")


async def _setup(url: str, messages: int) -> None:
    nc = await connect(url)
    js = nc.jetstream()
    await js.add_stream(name=STREAM, subjects=[STREAM])
    for _ in range(messages):
        await js.publish(STREAM, b"x" * 100)
    await nc.close()


async def _declare(url: str, consumer: str) -> None:
    nc = await connect(url)
    await nc.jetstream().add_consumer(STREAM, durable_name=consumer, ack_policy="explicit", ack_wait=120)
    await nc.close()


async def _nats_py(url: str, consumer: str, messages: int) -> float:
    nc = await connect(url)
    try:
        sub = await nc.jetstream().pull_subscribe_bind(consumer, STREAM)
        fetched = await sub.fetch(messages, timeout=10)
        started = time.perf_counter()
        for msg in fetched:
            await msg.ack_sync(timeout=5)
        return time.perf_counter() - started
    finally:
        await nc.close()


def _own_connection(hook, consumer: str, messages: int) -> float:
    fetched = hook.fetch(STREAM, consumer, batch=messages, max_wait=10)
    started = time.perf_counter()
    assert all(message.ack() for message in fetched)
    return time.perf_counter() - started


def _connected(hook, consumer: str, messages: int) -> float:
    with hook.connected():
        fetched = hook.fetch(STREAM, consumer, batch=messages, max_wait=10)
        started = time.perf_counter()
        assert all(message.ack() for message in fetched)
        return time.perf_counter() - started


def _consume(hook, consumer: str, messages: int) -> float:
    started = time.perf_counter()
    acked = 0
    for message in hook.consume(STREAM, consumer, batch=min(100, messages), max_wait=10):
        acked += message.ack()
        if acked == messages:
            break
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from airflow_provider_jetstream.hooks.jetstream import JetStreamHook

    with hub_topology() as topo:
        url = topo.hub.url
        asyncio.run(_setup(url, args.messages))
        hook = JetStreamHook(CONN_ID, domain="hub")
        runs: dict[str, Callable[[str, int], float]] = {
            "nats-py": lambda consumer, n: asyncio.run(_nats_py(url, consumer, n)),
            "own connection": lambda consumer, n: _own_connection(hook, consumer, n),
            "connected()": lambda consumer, n: _connected(hook, consumer, n),
            "consume": lambda consumer, n: _consume(hook, consumer, n),
        }
        per_message: dict[str, list[float]] = {path: [] for path in PATHS}
        for round_ in range(args.rounds + 1):  # round 0 warms up, not counted
            order = PATHS if round_ % 2 == 0 else tuple(reversed(PATHS))
            for path in order:
                consumer = f"r{round_}p{PATHS.index(path)}"
                asyncio.run(_declare(url, consumer))
                took = runs[path](consumer, args.messages)
                if round_:
                    per_message[path].append(took / args.messages * 1000)
            if round_:
                print(f"round {round_}: " + ", ".join(f"{p} {per_message[p][-1]:.3f}" for p in PATHS), flush=True)

        baseline = statistics.median(per_message["nats-py"])
        print(f"\n{args.messages} messages, {args.rounds} rounds; ms per message (median), x the nats-py baseline")
        for path in PATHS:
            median = statistics.median(per_message[path])
            print(f"  {path:15s} {median:7.3f} ms   {median / baseline:5.2f}x")
        own, connected = (statistics.median(per_message[p]) for p in ("own connection", "connected()"))
        print(f"own connection / connected(): {own / connected:.1f}x")


if __name__ == "__main__":
    main()
