"""Benchmark: JetStreamPublishOperator against a raw nats-py ``publish_async`` loop, in one run.

Starts a local hub + leaf (free loopback ports), creates a stream in the hub, and publishes N
messages of 100 bytes, alternating:

- ``operator``: ``JetStreamPublishOperator.execute()`` end to end (connection, double-store guard,
  per-message ``Nats-Msg-Id``, ack checks);
- ``raw+msgid``: ``js.publish_async`` in a loop with the same ``Nats-Msg-Id`` header, then
  ``publish_async_completed()`` (what a user would write for the same guarantee);
- ``raw``: the same loop without headers (no deduplication), for reference.

Prints each rate and operator / raw+msgid (target >= 0.9x).

    .venv/bin/python bench/publish.py [--messages 20000] [--rounds 3]
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
_HOME = tempfile.mkdtemp(prefix="bench-airflow-home-")
os.environ.setdefault("AIRFLOW_HOME", _HOME)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")

import nats  # noqa: E402

from airflow_provider_jetstream.testing.servers import USERS, LocalTopology  # noqa: E402

PAYLOAD = b"x" * 100


async def raw_loop(url: str, subject: str, n: int, with_ids: bool, tag: str) -> float:
    user, password = USERS["ACC"]
    nc = await nats.connect(url, user=user, password=password)
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


def operator_run(conn_id: str, subject: str, n: int, tag: str) -> float:
    from airflow_provider_jetstream.operators.publish import JetStreamPublishOperator

    op = JetStreamPublishOperator(
        task_id="bench", jetstream_conn_id=conn_id, subject=subject, messages=[PAYLOAD] * n, msg_id=f"{tag}/{{index}}"
    )
    started = time.perf_counter()
    result = op.execute({})
    elapsed = time.perf_counter() - started
    assert result["stored"] == n, result
    return n / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import logging

    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as work, LocalTopology(work) as topo:
        user, password = USERS["ACC"]
        os.environ["AIRFLOW_CONN_BENCH"] = json.dumps(
            {"conn_type": "jetstream", "host": f"127.0.0.1:{topo.hub.port}", "login": user, "password": password}
        )

        async def setup() -> None:
            nc = await nats.connect(topo.hub.url, user=user, password=password)
            await nc.jetstream().add_stream(name="bench", subjects=["bench"], duplicate_window=60)
            await nc.close()

        asyncio.run(setup())
        rates: dict[str, list[float]] = {"operator": [], "raw+msgid": [], "raw": []}
        asyncio.run(raw_loop(topo.hub.url, "bench", 2000, True, "warmup"))  # warm up
        for r in range(args.rounds):
            rates["raw+msgid"].append(asyncio.run(raw_loop(topo.hub.url, "bench", args.messages, True, f"raw{r}")))
            rates["operator"].append(operator_run("bench", "bench", args.messages, f"op{r}"))
            rates["raw"].append(asyncio.run(raw_loop(topo.hub.url, "bench", args.messages, False, "")))
        print(f"{args.messages} messages x {args.rounds} rounds, 100-byte payloads, hub on loopback")
        for name, values in rates.items():
            print(
                f"  {name:10s} median {statistics.median(values):9.0f} msg/s  (runs: "
                + ", ".join(f"{v:.0f}" for v in values)
                + ")"
            )
        ratio = statistics.median(rates["operator"]) / statistics.median(rates["raw+msgid"])
        plain = statistics.median(rates["operator"]) / statistics.median(rates["raw"])
        print(f"operator / raw publish_async loop with Nats-Msg-Id: {ratio:.2f}x (target >= 0.9x)")
        print(f"operator / raw publish_async loop without headers: {plain:.2f}x")


if __name__ == "__main__":
    main()
