"""The hub restarted under a running watcher: nothing unstored is acked, nothing is lost, the watcher carries on."""

from __future__ import annotations

import asyncio

import pytest
from nats.js.api import StreamConfig

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.testing.servers import USERS
from tests.support.natsutil import ack_state, connect, publish, unique
from tests.support.triggerer import Triggerer
from tests.support.triggers import message_trigger
from tests.support.waiting import eventually


@pytest.mark.parametrize("ack_policy", ["explicit", "all"])
def test_a_hub_restart_acks_nothing_unstored_and_loses_nothing(make_topology, jetstream_conn, ack_policy) -> None:
    topology = make_topology(leaf_domains=["leaf"])
    user, password = USERS["ACC"]
    conn = jetstream_conn(f"127.0.0.1:{topology.hub.port}", login=user, password=password)
    stream = unique("hubrs").upper()
    hub_url = topology.url("hub")

    async def state() -> tuple[int, int]:
        try:
            nc = await connect(hub_url)
        except Exception:  # the hub is still coming back
            return -1, -1
        try:
            return await ack_state(JetStreamApi(nc, "$JS.hub.API"), stream, "af_events")
        finally:
            await nc.close()

    async def scenario() -> None:
        nc = await connect(hub_url)
        await nc.jetstream().add_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
        await nc.close()
        watcher = message_trigger(conn, stream, domain="hub", ack_wait=2.0, ack_policy=ack_policy)
        runner = Triggerer()
        runner.start(1, watcher)
        try:
            await publish(hub_url, f"{stream}.x", [b"1", b"2", b"3"])
            await runner.wait_fired(3)
            runner.persist()
            await eventually(state, lambda s: s == (3, 0))
            await publish(hub_url, f"{stream}.x", [b"4", b"5"])
            await runner.wait_fired(5)  # fired, not yet stored by Airflow

            await asyncio.to_thread(topology.hub.restart)

            await publish(hub_url, f"{stream}.x", [b"6", b"7"])  # after the restart, to the same watcher
            await runner.wait_fired(7, timeout=90)
            # 4 and 5 are still not stored: held across the restart (renewed, or redelivered and
            # recognised), never acked; 6 and 7 wait with them.
            assert await eventually(state, lambda s: s == (3, 4), timeout=30) == (3, 4)

            runner.persist()
            await eventually(state, lambda s: s == (7, 0), timeout=60)
            sequences = sorted({f.event.payload["seq"] for f in runner.fired})
            assert sequences == list(range(1, 8))
            assert not runner.errors
        finally:
            await runner.stop()

    asyncio.run(scenario())
