"""Event watchers (the durable puller: messages, and a KV watch) across the death of their consumer's leader
on a 3-node hub.

An R3 stream, the watcher's durable consumer on it; the node leading the consumer is killed after the first
events were stored. The watcher carries on through the election without an error: the messages published
after the kill fire too, and once Airflow stored the events the consumer's ack floor reaches the last one with
nothing left unacknowledged (an ack lost with the node is sent again when the message comes back).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import nats
import pytest
from nats.js.api import KeyValueConfig

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.testing.servers import LocalTopology
from airflow_provider_jetstream.triggers.kv_events import JetStreamKeyValueEventTrigger, kv_consumer_name
from tests.support.natsutil import ack_state, connect_cluster, unique
from tests.support.triggerer import Triggerer
from tests.support.triggers import message_trigger
from tests.support.waiting import eventually

HUB_API = "$JS.hub.API"

pytestmark = pytest.mark.timeout(300)


async def _stored(write: Callable[[], Awaitable[Any]]) -> Any:
    """What ``write()`` returns once it succeeds: an election refuses or drops writes for a few seconds."""

    async def attempt() -> Any:
        try:
            return await write()
        except (nats.errors.Error, nats.js.errors.Error):
            return None

    result = await eventually(attempt, lambda answer: answer is not None, timeout=60)
    assert result is not None, "never stored"
    return result


@pytest.mark.parametrize("ack_policy", ["explicit", "all"])
def test_a_watcher_goes_on_across_its_consumers_leader_kill(
    hub_cluster: LocalTopology, cluster_conn: str, ack_policy: str
) -> None:
    stream = unique("clev").upper()

    async def scenario() -> None:
        nc = await connect_cluster(hub_cluster)
        api = JetStreamApi(nc, HUB_API)
        js = nc.jetstream(domain="hub")

        def message(n: int) -> Awaitable[Any]:
            return js.publish(f"{stream}.x", b"%d" % n, timeout=2, headers={"Nats-Msg-Id": str(n)})

        async def state() -> tuple[int, int]:
            return await ack_state(api, stream, "af_events")

        await api.request(f"STREAM.CREATE.{stream}", {"name": stream, "subjects": [f"{stream}.>"], "num_replicas": 3})
        watcher = message_trigger(cluster_conn, stream, domain="hub", ack_wait=2.0, ack_policy=ack_policy)
        runner = Triggerer()
        runner.start(1, watcher)
        try:
            for n in (1, 2, 3):
                await _stored(lambda n=n: message(n))
            await runner.wait_fired(3)
            runner.persist()
            assert await eventually(state, lambda s: s == (3, 0)) == (3, 0)

            leader = (await api.consumer_info(stream, "af_events"))["cluster"]["leader"]
            await asyncio.to_thread(hub_cluster.kill_hub_node, hub_cluster.hub_node_named(leader))
            for n in (4, 5, 6):
                await _stored(lambda n=n: message(n))

            await runner.wait_fired(6, timeout=120)
            runner.persist()
            assert await eventually(state, lambda s: s == (6, 0), timeout=90) == (6, 0)
            assert sorted({f.event.payload["seq"] for f in runner.fired}) == [1, 2, 3, 4, 5, 6]
            assert not runner.errors
        finally:
            await runner.stop()
            await nc.close()

    asyncio.run(scenario())


def test_a_kv_watch_goes_on_across_its_consumers_leader_kill(hub_cluster: LocalTopology, cluster_conn: str) -> None:
    bucket = unique("clkv")
    consumer = kv_consumer_name(bucket, ["site.*"], "new")

    async def scenario() -> None:
        nc = await connect_cluster(hub_cluster)
        api = JetStreamApi(nc, HUB_API)
        kv = await nc.jetstream(domain="hub").create_key_value(KeyValueConfig(bucket=bucket, history=10, replicas=3))

        async def floor() -> int:
            return (await ack_state(api, f"KV_{bucket}", consumer))[0]

        watch = JetStreamKeyValueEventTrigger(
            jetstream_conn_id=cluster_conn,
            bucket=bucket,
            keys=["site.*"],
            domain="hub",
            options={"cohort_wait": 0, "ack_wait": 2},
        )
        runner = Triggerer()
        runner.start(1, watch)
        try:
            # Led: a clustered consumer of new revisions starts after the last one its leader saw when elected.
            led = await eventually(
                lambda: api.consumer_info(f"KV_{bucket}", consumer),
                lambda info: bool((info or {}).get("cluster", {}).get("leader")),
            )
            assert led, runner.errors
            first = await kv.put("site.a", b"1")
            await runner.wait_fired(1)
            runner.persist()
            assert await eventually(floor, lambda n: n == first) == first

            leader = (await api.consumer_info(f"KV_{bucket}", consumer))["cluster"]["leader"]
            await asyncio.to_thread(hub_cluster.kill_hub_node, hub_cluster.hub_node_named(leader))
            revisions = [first]
            for key, value in (("site.b", b"2"), ("site.a", b"3")):
                revisions.append(await _stored(lambda k=key, v=value: kv.put(k, v)))

            await runner.wait_fired(3, timeout=120)
            runner.persist()
            assert await eventually(floor, lambda n: n == revisions[-1], timeout=90) == revisions[-1]
            assert sorted({f.event.payload["revision"] for f in runner.fired}) == revisions
            assert not runner.errors
        finally:
            await runner.stop()
            await nc.close()

    asyncio.run(scenario())
