"""Reads, KV writes and the replication sensor across a hub cluster's failover, on real servers.

A 3-node hub with R3 streams: killing a stream's leader must not fail a read (it resumes after the
election: every message once, in order), nor a compare-and-set (stored exactly once); losing the
quorum (2 of 3 nodes down) is "hub unavailable", waited for, never a configuration error.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import nats

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.errors import WAIT, JetStreamDomainUnavailableError, disposition
from airflow_provider_jetstream.core.manage.buckets import kv_get, kv_put
from airflow_provider_jetstream.core.read.range import read_range
from airflow_provider_jetstream.core.read.settings import PullSettings
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.sensors.replication_lag import JetStreamReplicationLagSensor
from airflow_provider_jetstream.testing.servers import USERS, LocalTopology
from tests.support.management import uid
from tests.support.natsutil import connect_cluster
from tests.support.waiting import eventually, wait_until

HUB_API = "$JS.hub.API"
COUNT = 20_000
#: Small buffers, so most of the range is still on the servers when the leader dies; quick heartbeats,
#: so a consumer lost with its node is noticed within 1.5 s; 2 s API requests, so that the election
#: (5-7 s) outlasts several of them.
SETTINGS = PullSettings(max_buffered_messages=1000, chunk_messages=500, heartbeat=0.5, expires=5, request_timeout=2)


async def _r3_stream(nc: Any, count: int) -> str:
    name = uid("failover")
    api = JetStreamApi(nc, HUB_API)
    await api.request(f"STREAM.CREATE.{name}", {"name": name, "subjects": [f"{name}.>"], "num_replicas": 3})
    js = nc.jetstream()
    for start in range(0, count, 1000):
        acks = [await js.publish_async(f"{name}.x", b"m%d" % i) for i in range(start + 1, start + 1001)]
        await asyncio.gather(*acks)
    return name


async def _lead_where_the_reader_is(topology: LocalTopology, api: JetStreamApi, stream: str) -> int:
    """Make the node of the reading consumer (its only replica) the stream's leader and the meta leader;
    its index."""
    (consumer,) = (await api.request(f"CONSUMER.NAMES.{stream}"))["consumers"]
    info = await api.request(f"CONSUMER.INFO.{stream}.{consumer}")
    node = topology.hub_node_named(info["cluster"]["leader"])
    if await topology._stream_leader(stream, "ACC", 30) != node:
        preferred = {"placement": {"preferred": topology.hubs[node].name}}
        await api.request(f"STREAM.LEADER.STEPDOWN.{stream}", preferred)
        await eventually(lambda: topology._stream_leader(stream, "ACC", 30), lambda leader: leader == node, 30)
    # And the cluster's meta leader (consumer creates go through it): the worst node to lose.
    name = topology.hubs[node].name
    user, password = USERS["SYS"]
    system = await nats.connect(servers=topology.hub_urls.split(","), user=user, password=password)
    try:

        def meta_leader() -> str | None:
            return ((topology.hubs[node].monitor("jsz", quiet=True) or {}).get("meta_cluster") or {}).get("leader")

        if meta_leader() != name:
            body = json.dumps({"placement": {"preferred": name}}).encode()
            await system.request("$JS.API.META.LEADER.STEPDOWN", body, timeout=5)
            assert await eventually(meta_leader, lambda leader: leader == name, 30) == name
    finally:
        await system.close()
    return node


def test_a_range_read_resumes_after_its_streams_leader_is_killed_every_message_once_in_order(
    hub_cluster: LocalTopology,
) -> None:
    """The stream's leader dies with the reader's consumer on it: the read resumes once a new leader is
    elected (the consumer made again across the election), every message once, in order."""

    async def scenario() -> tuple[list[int], list[bytes]]:
        nc = await connect_cluster(hub_cluster)
        try:
            stream = await _r3_stream(nc, COUNT)
            seqs: list[int] = []
            payloads: list[bytes] = []
            reader = read_range(nc, stream, 1, COUNT, api_prefix=HUB_API, settings=SETTINGS)
            try:
                first = await reader.__anext__()
                seqs += list(first.sequences)
                payloads += list(first.payloads)
                leader = await _lead_where_the_reader_is(hub_cluster, JetStreamApi(nc, HUB_API), stream)
                await asyncio.to_thread(hub_cluster.kill_hub_node, leader)
                async for chunk in reader:
                    seqs += list(chunk.sequences)
                    payloads += list(chunk.payloads)
            finally:
                await reader.aclose()
            return seqs, payloads
        finally:
            await nc.close()

    seqs, payloads = asyncio.run(scenario())
    assert seqs == list(range(1, COUNT + 1)), "every sequence once, in order"
    assert payloads == [b"m%d" % s for s in seqs]


def test_a_compare_and_set_across_a_leader_kill_is_stored_exactly_once(
    hub_cluster: LocalTopology, cluster_conn: str
) -> None:
    bucket = uid("fokv")
    JetStreamHook(cluster_conn, domain="hub").ensure_key_value({"bucket": bucket, "replicas": 3, "history": 5})

    async def scenario() -> tuple[int, int, int]:
        nc = await connect_cluster(hub_cluster)
        try:
            api = JetStreamApi(nc, HUB_API, timeout=2)  # several asks within the election
            first = await kv_put(api, bucket, "k", b"one")
            leader = await hub_cluster._stream_leader(f"KV_{bucket}", "ACC", 30)
            await asyncio.to_thread(hub_cluster.kill_hub_node, leader)
            second = await kv_put(api, bucket, "k", b"two", expected_revision=first)
            entry = await kv_get(api, bucket, "k")
            assert entry is not None and (entry.value, entry.revision) == (b"two", second)
            info = await api.request(f"STREAM.INFO.KV_{bucket}", {"subjects_filter": f"$KV.{bucket}.k"})
            return first, second, info["state"]["messages"]
        finally:
            await nc.close()

    first, second, stored = asyncio.run(scenario())
    assert second > first
    assert stored == 2, "the compare-and-set was stored exactly once"


def test_a_kv_get_waits_out_an_election(hub_cluster: LocalTopology, cluster_conn: str) -> None:
    bucket = uid("fokvg")
    hook = JetStreamHook(cluster_conn, domain="hub")
    hook.ensure_key_value({"bucket": bucket, "replicas": 3})
    hook.kv_put(bucket, "k", b"v")

    async def scenario() -> Any:
        nc = await connect_cluster(hub_cluster)
        try:
            leader = await hub_cluster._stream_leader(f"KV_{bucket}", "ACC", 30)
            await asyncio.to_thread(hub_cluster.kill_hub_node, leader)
            return await kv_get(JetStreamApi(nc, HUB_API, timeout=2), bucket, "k")  # across the election
        finally:
            await nc.close()

    entry = asyncio.run(scenario())
    assert entry is not None and entry.value == b"v"


def test_quorum_loss_is_hub_unavailable_and_the_sensor_waits_until_the_nodes_return(
    hub_cluster: LocalTopology, cluster_conn: str
) -> None:
    origin, copy = uid("foorig"), uid("focopy")
    leaf = JetStreamHook(cluster_conn, domain="leaf")
    leaf.ensure_stream({"name": origin, "subjects": [f"{origin}.>"]})
    leaf.publish(f"{origin}.a", [b"1", b"2", b"3"])
    hub = JetStreamHook(cluster_conn, domain="hub")
    hub.ensure_stream({"name": copy, "num_replicas": 3, "sources": [{"name": origin, "domain": "leaf"}]})
    bucket = uid("fokvq")
    hub.ensure_key_value({"bucket": bucket, "replicas": 3})
    sensor = JetStreamReplicationLagSensor(
        task_id="wait", jetstream_conn_id=cluster_conn, domain="hub", stream=copy, poke_interval=0.2
    )
    wait_until(lambda: sensor.poke({}), bool, timeout=30, what="caught up before the outage")

    # The leader and one follower: the other follower survives, and no election can make it leader.
    leader = hub_cluster.stream_leader(copy)
    down = [leader, next(i for i in range(3) if i != leader)]
    for index in down:
        hub_cluster.kill_hub_node(index)

    # The first answers may be timeouts while the client moves to the survivor: then the survivor's.
    error = wait_until(
        lambda: _raised(lambda: hub.replication_status(copy, request_timeout=2)),
        lambda e: e is not None and "has no leader" in str(e),
        timeout=30,
        what="the survivor's answer",
    )
    assert isinstance(error, JetStreamDomainUnavailableError) and disposition(error) == WAIT, error
    message = str(error)
    assert f"JetStream in domain 'hub' has no leader for stream {copy!r}" in message, message
    assert "a node is down or an election is under way" in message, message
    assert "no mirror and no sources" not in message
    assert sensor.poke({}) is False  # waiting, not failing
    # A KV get names the cluster's failover too, on every answer: never a leaf or a domain name.
    errors = asyncio.run(_kv_get_errors(hub_cluster, bucket))
    assert f"JetStream in domain 'hub' has no leader for stream 'KV_{bucket}'" in errors[-1], errors
    for text in errors:
        assert "a node is down or an election is under way" in text, errors
        assert "leaf" not in text and "domain connected" not in text, errors

    for index in down:
        hub_cluster.start_hub_node(index)
    started = time.monotonic()
    assert wait_until(lambda: sensor.poke({}), bool, timeout=45, what="done once the nodes are back")
    assert time.monotonic() - started < 45


async def _kv_get_errors(topology: LocalTopology, bucket: str) -> list[str]:
    """The errors of KV gets until one says the stream has no leader (each asked across a failover for
    4 s at most: the quorum stays lost)."""
    nc = await connect_cluster(topology)
    try:
        api = JetStreamApi(nc, HUB_API, timeout=2, failover=4)
        errors: list[str] = []

        async def error_now() -> str:
            error = await _error_of(kv_get(api, bucket, "k"))
            if error is not None:
                errors.append(str(error))
            return str(error)

        await eventually(error_now, lambda text: "has no leader" in text, 30)
        return errors
    finally:
        await nc.close()


def _raised(call: Any) -> BaseException | None:
    try:
        call()
    except Exception as err:
        return err
    return None


async def _error_of(call: Any) -> BaseException | None:
    try:
        await call
    except JetStreamDomainUnavailableError as err:
        return err
    return None
