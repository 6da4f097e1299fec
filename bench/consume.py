"""Benchmark: consuming and acking through the hook and the consume operator, against a plain nats-py loop.

Starts a local hub + leaf (free loopback ports) and stores N messages of 100 bytes in a hub stream, each with
a ``Nats-Msg-Id`` header (with ``--repeated-header`` also ``Bench-Tag: a`` and ``Bench-Tag: b``). Then, in R
interleaved rounds (the order reversed every other round, round 0 a warm-up not counted), each path reads
all N through a new durable pull consumer of its own (``ack_policy`` explicit) and acks each message. Each
path is timed whole, from its first call (connection included) until it returned with every message acked:

- ``nats-py`` (the baseline, issue #35's loop): ``js.pull_subscribe_bind(...)``, then ``fetch(batch_size)``
  and ``await msg.ack()`` per message until N, then a flush;
- ``consume``: ``for m in hook.consume(...): m.ack()`` from synchronous code (how a ``@task`` consumes);
- ``aconsume``: ``async for m in hook.aconsume(...): await m.aack()``;
- ``afetch``: ``hook.afetch(...)`` batches, ``await m.aack()`` each, inside ``async with hook.aconnect()``
  (one connection for the fetches and the acks, as the docs say to settle many);
- ``operator``: ``JetStreamConsumeOperator(apply_function=..., max_messages=N).execute({})``, its function doing
  nothing but what every package path does with a message: count it and check its headers.

And, named in ``--paths`` (``all``: every path), what acking from synchronous code costs:

- ``nats-py-ack-sync``: the baseline with ``await msg.ack_sync()`` (each ack confirmed), for reference;
- ``fetch``: blocking ``hook.fetch`` batches, ``m.ack()`` each outside any block (a connection per ack);
- ``fetch-connected``: the same inside ``with hook.connected():`` (one connection for fetches and acks).

Every path uses the same ``--batch-size`` (messages per pull). After each path the consumer's info must say
``num_ack_pending`` 0 and an ack floor at the stream's last sequence (read again for up to 10 s), and every
path must have handed over N messages, else the script stops with an error: a path cannot be fast by dropping
acks. The package's paths also count messages whose headers lost a value (nats-py keeps only the last one).

Prints each round's rates, then per path the median msg/s, ms per message and the median of each round's
ratio to the baseline, against the target (>= 1x), and the load average before and after.

    .venv/bin/python bench/consume.py [--messages 10000] [--rounds 5] [--batch-size 500] [--repeated-header]
        [--paths nats-py,consume,aconsume,afetch,operator | all]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any, NamedTuple

from hub import CONN_ID, connect, hub_topology

from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.operators.consume import JetStreamConsumeOperator
from airflow_provider_jetstream.testing.servers import USERS

STREAM = "consume"
PAYLOAD = b"x" * 100
TAG_HEADER, TAG_VALUES = "Bench-Tag", ["a", "b"]
#: Seconds a pull waits for its batch to fill (each fills at once: N is a multiple of the batch size).
MAX_WAIT = 5.0
#: Seconds the consumer's info may take to show every ack after a path returned.
CONFIRM_WITHIN = 10.0
TARGET = 1.0

# -- The package's calls, one adapter per path: the argument names change with docs/glossary.md ----------------


def new_hook() -> JetStreamHook:
    """The hook every hook path uses, on the hub's own JetStream."""
    return JetStreamHook(CONN_ID)


def hook_consume(hook: JetStreamHook, consumer: str, batch_size: int) -> Iterator[Any]:
    """``consume``: the blocking iteration of ``consumer``'s messages, over when a pull brings none."""
    return hook.consume(STREAM, consumer, batch_size=batch_size, max_wait=MAX_WAIT, stop_when_empty=True)


def hook_aconsume(hook: JetStreamHook, consumer: str, batch_size: int) -> AsyncIterator[Any]:
    """``aconsume``: the async iteration of ``consumer``'s messages, over when a pull brings none."""
    return hook.aconsume(STREAM, consumer, batch_size=batch_size, max_wait=MAX_WAIT, stop_when_empty=True)


async def hook_afetch(hook: JetStreamHook, consumer: str, batch_size: int) -> list[Any]:
    """``afetch``: one batch of ``consumer``'s messages."""
    return await hook.afetch(STREAM, consumer, batch_size=batch_size, max_wait=MAX_WAIT)


def hook_fetch(hook: JetStreamHook, consumer: str, batch_size: int) -> list[Any]:
    """``fetch`` and ``fetch-connected``: one batch of ``consumer``'s messages, blocking."""
    return hook.fetch(STREAM, consumer, batch_size=batch_size, max_wait=MAX_WAIT)


def run_operator(consumer: str, messages: int, batch_size: int, function: Callable[[Any], None]) -> int:
    """``operator``: one run of the consume operator as a worker runs it; the messages it acked."""
    operator = JetStreamConsumeOperator(
        task_id="bench",
        jetstream_conn_id=CONN_ID,
        stream=STREAM,
        consumer=consumer,
        apply_function=function,
        max_messages=messages,
        batch_size=batch_size,
        max_wait=MAX_WAIT,
    )
    return operator.execute({})["acked"]


# -- The paths ---------------------------------------------------------------------------------------------------


class Outcome(NamedTuple):
    """One path's run: seconds taken, messages acked, messages whose headers lost a value (None: not checked)."""

    seconds: float
    acked: int
    headers_lost: int | None


class Tally:
    """The messages a path was handed (``seen``), and those whose headers lost a value (``lost``): their one
    ``Nats-Msg-Id``, and with ``--repeated-header`` both values of ``Bench-Tag``, in order."""

    def __init__(self, repeated_header: bool) -> None:
        self.repeated_header = repeated_header
        self.seen = self.lost = 0

    def __call__(self, message: Any) -> None:
        self.seen += 1
        headers = message.headers or {}
        kept = len(headers.get("Nats-Msg-Id", ())) == 1
        if self.repeated_header:
            kept = kept and headers.get(TAG_HEADER) == TAG_VALUES
        self.lost += not kept


async def nats_py_loop(url: str, consumer: str, messages: int, batch_size: int, confirm_each: bool) -> Outcome:
    """The baseline: fetch batches and ack each message (``ack_sync`` with ``confirm_each``), then flush."""
    started = time.perf_counter()
    nc = await connect(url)
    try:
        subscription = await nc.jetstream().pull_subscribe_bind(consumer, STREAM)
        acked = 0
        while acked < messages:
            for msg in await subscription.fetch(batch_size, timeout=MAX_WAIT):
                if confirm_each:
                    await msg.ack_sync(timeout=5)
                else:
                    await msg.ack()
                acked += 1
        await nc.flush()
    finally:
        await nc.close()
    return Outcome(time.perf_counter() - started, acked, None)


def consume_blocking(consumer: str, messages: int, batch_size: int, tally: Tally) -> Outcome:
    started = time.perf_counter()
    acked = 0
    with contextlib.closing(hook_consume(new_hook(), consumer, batch_size)) as deliveries:
        for message in deliveries:
            tally(message)
            acked += message.ack()
            if tally.seen == messages:
                break
    return Outcome(time.perf_counter() - started, acked, tally.lost)


async def consume_async(consumer: str, messages: int, batch_size: int, tally: Tally) -> Outcome:
    started = time.perf_counter()
    acked = 0
    async with contextlib.aclosing(hook_aconsume(new_hook(), consumer, batch_size)) as deliveries:
        async for message in deliveries:
            tally(message)
            acked += await message.aack()
            if tally.seen == messages:
                break
    return Outcome(time.perf_counter() - started, acked, tally.lost)


async def fetch_async(consumer: str, messages: int, batch_size: int, tally: Tally) -> Outcome:
    started = time.perf_counter()
    acked = 0
    hook = new_hook()
    async with hook.aconnect():
        while tally.seen < messages and (batch := await hook_afetch(hook, consumer, batch_size)):
            for message in batch:
                tally(message)
                acked += await message.aack()
    return Outcome(time.perf_counter() - started, acked, tally.lost)


def fetch_blocking(consumer: str, messages: int, batch_size: int, tally: Tally, connected: bool) -> Outcome:
    started = time.perf_counter()
    acked = 0
    hook = new_hook()
    with hook.connected() if connected else contextlib.nullcontext():
        while tally.seen < messages and (batch := hook_fetch(hook, consumer, batch_size)):
            for message in batch:
                tally(message)
                acked += message.ack()
    return Outcome(time.perf_counter() - started, acked, tally.lost)


def consume_operator(consumer: str, messages: int, batch_size: int, tally: Tally) -> Outcome:
    started = time.perf_counter()
    acked = run_operator(consumer, messages, batch_size, tally)
    return Outcome(time.perf_counter() - started, acked, tally.lost)


#: Every path: what it does (as printed), and whether it runs without ``--paths``.
PATHS = {
    "nats-py": ("baseline: nats-py fetch + ack()", True),
    "consume": ("hook.consume() + ack(), blocking", True),
    "aconsume": ("hook.aconsume() + aack()", True),
    "afetch": ("hook.afetch() + aack(), in aconnect()", True),
    "operator": ("consume operator, a counting function", True),
    "nats-py-ack-sync": ("nats-py fetch + ack_sync()", False),
    "fetch": ("hook.fetch() + ack(), a connection per ack", False),
    "fetch-connected": ("hook.fetch() + ack(), in connected()", False),
}
BASELINE = "nats-py"


def run_path(path: str, url: str, consumer: str, args: argparse.Namespace) -> Outcome:
    """One run of ``path`` over ``consumer``'s ``args.messages`` messages."""
    n, size, tally = args.messages, args.batch_size, Tally(args.repeated_header)
    if path in ("nats-py", "nats-py-ack-sync"):
        return asyncio.run(nats_py_loop(url, consumer, n, size, confirm_each=path == "nats-py-ack-sync"))
    if path == "consume":
        return consume_blocking(consumer, n, size, tally)
    if path == "aconsume":
        return asyncio.run(consume_async(consumer, n, size, tally))
    if path == "afetch":
        return asyncio.run(fetch_async(consumer, n, size, tally))
    if path in ("fetch", "fetch-connected"):
        return fetch_blocking(consumer, n, size, tally, connected=path == "fetch-connected")
    return consume_operator(consumer, n, size, tally)


# -- The stream and its consumers --------------------------------------------------------------------------------


async def store_messages(host: str, port: int, messages: int, repeated_header: bool) -> None:
    """Store ``messages`` messages of 100 bytes in the stream, each with a ``Nats-Msg-Id`` (and both ``Bench-Tag``
    values), written as raw ``HPUB`` frames (nats-py's dict headers cannot repeat a name), 1,000 at a time, each
    thousand stored before the next is sent."""
    nc = await connect(f"nats://{host}:{port}")
    js = nc.jetstream()
    await js.add_stream(name=STREAM, subjects=[STREAM])
    user, password = USERS["ACC"]
    reader, writer = await asyncio.open_connection(host, port)
    try:
        await reader.readline()  # the server's INFO
        hello = {"user": user, "pass": password, "headers": True, "verbose": False, "pedantic": False, "protocol": 1}
        writer.write(b"CONNECT " + json.dumps(hello).encode() + b"\r\n")
        tags = "".join(f"{TAG_HEADER}: {value}\r\n" for value in TAG_VALUES) if repeated_header else ""
        for start in range(1, messages + 1, 1000):
            end = min(messages, start + 999)
            frames = []
            for seq in range(start, end + 1):
                block = f"NATS/1.0\r\nNats-Msg-Id: m{seq}\r\n{tags}\r\n".encode()
                frames.append(
                    b"HPUB %s %d %d\r\n%s%s\r\n" % (STREAM.encode(), len(block), len(block) + 100, block, PAYLOAD)
                )
            writer.write(b"".join(frames) + b"PING\r\n")
            while not (line := await reader.readline()).startswith(b"PONG"):
                assert line.startswith((b"INFO ", b"PING")), line  # -ERR: the server refused the frames
                if line.startswith(b"PING"):
                    writer.write(b"PONG\r\n")
            deadline = time.monotonic() + 30
            while (await js.stream_info(STREAM)).state.messages < end:
                assert time.monotonic() < deadline, f"the stream did not store messages up to {end}"
                await asyncio.sleep(0.01)
        state = (await js.stream_info(STREAM)).state
        assert state.messages == messages and state.last_seq == messages, state
    finally:
        writer.close()
        await nc.close()


async def declare_consumer(url: str, consumer: str) -> None:
    nc = await connect(url)
    try:
        await nc.jetstream().add_consumer(STREAM, durable_name=consumer, ack_policy="explicit", ack_wait=120)
    finally:
        await nc.close()


async def confirm_and_delete(url: str, path: str, consumer: str, outcome: Outcome, messages: int) -> None:
    """Stop the script unless ``path`` acked every message and the consumer confirms it: ``num_ack_pending``
    0 and its ack floor at the stream's last sequence (within :data:`CONFIRM_WITHIN` seconds). Then delete
    the consumer."""
    nc = await connect(url)
    try:
        js = nc.jetstream()
        last = (await js.stream_info(STREAM)).state.last_seq
        deadline = time.monotonic() + CONFIRM_WITHIN
        while True:
            info = await js.consumer_info(STREAM, consumer)
            floor = info.ack_floor.stream_seq if info.ack_floor else 0
            if info.num_ack_pending == 0 and floor == last:
                break
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"{path}: consumer {consumer!r} did not confirm every ack within {CONFIRM_WITHIN}s: "
                    f"num_ack_pending={info.num_ack_pending}, ack floor at {floor} (the stream's last is {last})"
                )
            await asyncio.sleep(0.05)
        if outcome.acked != messages:
            raise SystemExit(f"{path}: acked {outcome.acked} messages, not {messages}")
        if outcome.headers_lost:
            raise SystemExit(f"{path}: {outcome.headers_lost} messages lost a header value")
        await js.delete_consumer(STREAM, consumer)
    finally:
        await nc.close()


# -- Rounds and report -------------------------------------------------------------------------------------------


def chosen_paths(value: str) -> list[str]:
    """The paths of ``--paths``, the baseline first whether named or not."""
    if value == "all":
        return list(PATHS)
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in PATHS]
    if unknown or not names:
        raise SystemExit(f"--paths={value!r} is not allowed: 'all' or a comma-separated list of {', '.join(PATHS)}")
    return [BASELINE, *(name for name in names if name != BASELINE)]


def load_average() -> str:
    return " / ".join(f"{value:.2f}" for value in os.getloadavg())


def report(paths: Iterable[str], rates: dict[str, list[float]], args: argparse.Namespace) -> None:
    baseline = rates[BASELINE]
    headers = " with a repeated header" if args.repeated_header else ""
    print(
        f"\n{args.messages} messages of 100 bytes{headers}, batch size {args.batch_size}, {args.rounds} rounds; "
        f"medians; x baseline: the median of each round's ratio (target >= {TARGET:g}x)"
    )
    print(f"  {'path':18s} {'what':42s} {'msg/s':>9s} {'ms/msg':>7s} {'x base':>7s}")
    for path in paths:
        rate = statistics.median(rates[path])
        ratio = statistics.median(r / b for r, b in zip(rates[path], baseline, strict=True))
        verdict = "" if path == BASELINE or not PATHS[path][1] else ("met" if ratio >= TARGET else "missed")
        print(f"  {path:18s} {PATHS[path][0]:42s} {rate:9,.0f} {1000 / rate:7.3f} {ratio:6.3f}x {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10000, help="messages stored and read by each path")
    parser.add_argument("--rounds", type=int, default=5, help="rounds counted (a warm-up round runs first)")
    parser.add_argument("--batch-size", type=int, default=500, help="messages per pull, every path")
    parser.add_argument("--repeated-header", action="store_true", help=f"add {TAG_HEADER}: a and {TAG_HEADER}: b")
    default_paths = ",".join(path for path, (_, default) in PATHS.items() if default)
    parser.add_argument("--paths", default=default_paths, help=f"comma-separated, or all (default {default_paths})")
    args = parser.parse_args()
    if args.batch_size < 1 or args.messages < 1 or args.messages % args.batch_size:
        raise SystemExit(
            f"--messages={args.messages} is not allowed with --batch-size={args.batch_size}: a positive multiple "
            "of it (a last pull that cannot fill would wait its max_wait)"
        )
    if args.rounds < 1:
        raise SystemExit(f"--rounds={args.rounds} is not allowed: 1 or more")
    paths = chosen_paths(args.paths)
    print(f"load average (1 / 5 / 15 min) at the start: {load_average()}", flush=True)

    with hub_topology() as topology:
        url = topology.hub.url
        asyncio.run(store_messages("127.0.0.1", topology.hub.port, args.messages, args.repeated_header))
        rates: dict[str, list[float]] = {path: [] for path in paths}
        for round_ in range(args.rounds + 1):  # round 0 warms up, not counted
            order = paths if round_ % 2 == 0 else paths[::-1]
            for path in order:
                consumer = f"r{round_}-{path}"
                asyncio.run(declare_consumer(url, consumer))
                outcome = run_path(path, url, consumer, args)
                asyncio.run(confirm_and_delete(url, path, consumer, outcome, args.messages))
                if round_:
                    rates[path].append(args.messages / outcome.seconds)
            line = ", ".join(f"{path} {rates[path][-1]:,.0f}" for path in paths) if round_ else "warm-up"
            print(f"round {round_}: {line}" + (" msg/s" if round_ else ""), flush=True)
        report(paths, rates, args)
    print(f"load average (1 / 5 / 15 min) at the end: {load_average()}")


if __name__ == "__main__":
    main()
