"""`make demo`: a local hub + leaf NATS topology, a stream in each domain, a leaf -> hub mirror.

Starts real nats-server processes under .demo/ (ignored by git), drives them through the
provider's JetStreamHook from an Airflow connection given as an AIRFLOW_CONN_* variable, prints
what exists in each domain, and stops every server on exit, Ctrl-C included.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

from nats.js.api import ExternalStream, StreamConfig, StreamSource

from airflow_provider_jetstream.local.servers import LocalTopology

WORKDIR = Path(__file__).resolve().parents[1] / ".demo"
MESSAGES = 1000


async def build(hook) -> list[str]:
    async with hook.ajetstream(domain="leaf") as leaf, hook.ajetstream(domain="hub") as hub:
        await leaf.add_stream(StreamConfig(name="readings", subjects=["edge.readings.>"]))
        await hub.add_stream(StreamConfig(name="commands", subjects=["hub.commands.>"]))
        await hub.add_stream(
            StreamConfig(
                name="backup-readings-leaf",
                mirror=StreamSource(name="readings", external=ExternalStream(api="$JS.leaf.API")),
            )
        )
        for i in range(MESSAGES):
            payload = {"site": "leaf", "sensor": i % 10, "value": round(20 + (i % 7) * 0.5, 1)}
            await leaf.publish(f"edge.readings.sensor{i % 10}", json.dumps(payload).encode())
        deadline = time.monotonic() + 30
        while (await hub.stream_info("backup-readings-leaf")).state.messages < MESSAGES:
            if time.monotonic() > deadline:
                raise TimeoutError("the hub mirror did not catch up in 30s")
            await asyncio.sleep(0.1)
        lines = []
        for domain, js in (("leaf", leaf), ("hub", hub)):
            for name in await js.streams_info():
                mirror = name.config.mirror
                origin = f"  mirror of {mirror.name} ({mirror.external.api})" if mirror else ""
                lines.append(f"  {domain:5} {name.config.name:22} {name.state.messages:6} msgs{origin}")
        return lines


def main() -> int:
    started = time.monotonic()
    with LocalTopology(WORKDIR, leaf_domains=["leaf"]) as topology:
        os.environ["AIRFLOW_CONN_NATS_DEMO"] = json.dumps(
            {
                "conn_type": "jetstream",
                "host": f"127.0.0.1:{topology.hub.port}",
                "login": "acc",
                "password": "acc",
                "extra": {"client_name": "demo"},
            }
        )
        from airflow_provider_jetstream.hooks.jetstream import JetStreamHook

        hook = JetStreamHook("nats_demo")
        ok, message = hook.test_connection()
        print(f"hub: {message}" if ok else f"connection failed: {message}")
        if not ok:
            return 1
        print(f"published {MESSAGES} readings on the leaf; the hub mirrored them:")
        print("\n".join(hook.run(build(hook))))
    print(f"done in {time.monotonic() - started:.1f}s; servers stopped")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted; servers stopped")
        sys.exit(130)
