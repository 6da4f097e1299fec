"""A leaf cut off and relinked under a running watcher: nothing lost, an ack lost in the cut does not fire twice."""

from __future__ import annotations

import asyncio

from airflow_provider_jetstream.testing.servers import USERS
from tests.support.natsutil import acked_through, connect, leaf_stream, publish, unique
from tests.support.triggerer import Triggerer
from tests.support.triggers import message_trigger
from tests.support.waiting import eventually


def test_a_leaf_cut_loses_nothing_and_fires_nothing_twice(make_topology, jetstream_conn) -> None:
    topology = make_topology(leaf_domains=["leaf"])
    user, password = USERS["ACC"]
    conn = jetstream_conn(f"127.0.0.1:{topology.hub.port}", login=user, password=password)
    stream = unique("cut").upper()

    async def info() -> dict:
        from airflow_provider_jetstream.core.api import JetStreamApi

        nc = await connect(topology.url("leaf"))  # the leaf's own view: it answers while cut off
        try:
            return await JetStreamApi(nc, "$JS.leaf.API").consumer_info(stream, "af_events") or {}
        finally:
            await nc.close()

    async def floor() -> int:
        return acked_through(await info())

    async def scenario() -> None:
        await leaf_stream(topology.url("leaf"), stream)
        runner = Triggerer()
        runner.start(1, message_trigger(conn, stream, ack_wait=2.0))
        try:
            await publish(topology.url("leaf"), f"{stream}.x", [b"1", b"2", b"3"])
            await runner.wait_fired(3)
            runner.persist()
            await eventually(floor, lambda n: n == 3)
            await publish(topology.url("leaf"), f"{stream}.x", [b"4"])
            await runner.wait_fired(4)
            await asyncio.to_thread(topology.disconnect_leaf, "leaf")
            runner.persist()  # stored: its +ACK goes out while the leaf is cut off, and is lost
            await publish(topology.url("leaf"), f"{stream}.x", [b"5", b"6", b"7"])  # on the edge, during the cut
            await asyncio.to_thread(topology.reconnect_leaf, "leaf")
            await publish(topology.url("leaf"), f"{stream}.x", [b"8"])
            fired = await runner.wait_fired(8, timeout=90)
            runner.persist()
            await eventually(floor, lambda n: n == 8, timeout=60)
            sequences = [f.event.payload["seq"] for f in runner.fired]
            assert sorted(sequences) == list(range(1, 9)), sequences  # each once: #4's lost ack was re-sent
            assert len(fired) == 8
            assert (await info())["delivered"]["consumer_seq"] > 8  # the server did send something again
        finally:
            await runner.stop()

    asyncio.run(scenario())
