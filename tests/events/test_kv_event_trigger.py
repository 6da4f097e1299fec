"""``JetStreamKeyValueEventTrigger`` on a real leaf bucket: an event per change, resuming after the last stored one."""

from __future__ import annotations

import asyncio

import pytest
from nats.js.api import KeyValueConfig

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.triggers.kv_events import JetStreamKeyValueEventTrigger, kv_consumer_name
from tests.support.natsutil import connect, hub_mirror_bucket, unique
from tests.support.triggerer import Triggerer
from tests.support.triggers import rebuild
from tests.support.waiting import eventually, scaled


async def ack_floor(url: str, bucket: str, consumer: str) -> int:
    nc = await connect(url)
    try:
        info = await JetStreamApi(nc, "$JS.leaf.API").consumer_info(f"KV_{bucket}", consumer)
    finally:
        await nc.close()
    return ((info or {}).get("ack_floor") or {}).get("stream_seq", 0)


def test_each_change_fires_and_a_restart_resumes_after_the_last_stored_revision(hub_leaf, hub_conn) -> None:
    bucket = unique("kvev")
    watch = JetStreamKeyValueEventTrigger(
        jetstream_conn_id=hub_conn,
        bucket=bucket,
        keys=["site.*"],
        domain="leaf",
        options={"cohort_wait": 0, "ack_wait": 2},
    )  # a short ack_wait: what the stopped triggerer's last pull request took comes back soon
    consumer = kv_consumer_name(bucket, ["site.*"], "new")

    async def scenario() -> None:
        nc = await connect(hub_leaf.url("leaf"))
        kv = await nc.jetstream().create_key_value(KeyValueConfig(bucket=bucket, history=10))
        first = Triggerer()
        first.start(1, watch)
        try:
            await eventually(lambda: _consumer_exists(hub_leaf, bucket, consumer), bool)
            r1 = await kv.put("site.a", b'{"load": 1}')
            await kv.put("other", b"ignored: not watched")
            (e1,) = await first.wait_fired(1)
            assert e1.event.payload == {
                **e1.event.payload,
                "bucket": bucket,
                "key": "site.a",
                "revision": r1,
                "operation": "PUT",
                "value": {"load": 1},
                "domain": "leaf",
            }
            first.persist()
            await eventually(lambda: ack_floor(hub_leaf.url("leaf"), bucket, consumer), lambda n: n == r1)
            r2 = await kv.put("site.a", b"2")
            await first.wait_fired(2)  # fired, never stored: the triggerer dies now
        finally:
            await first.stop()
        r3 = await kv.put("site.b", b"3")  # while no triggerer runs
        await kv.delete("site.a")
        r4 = r3 + 1  # the delete marker is the next revision
        second = Triggerer()
        second.start(7, rebuild(watch))
        try:
            fired = await second.wait_fired(3)
            got = [(f.event.payload["revision"], f.event.payload["operation"], f.event.payload["value"]) for f in fired]
            # a redelivery may come after newer revisions: the order across a restart is not kept
            assert sorted(got) == [(r2, "PUT", 2), (r3, "PUT", 3), (r4, "DEL", None)]
            assert fired[[f.event.payload["revision"] for f in fired].index(r2)].event.payload["delivered"] >= 2
            second.persist()
            await eventually(lambda: ack_floor(hub_leaf.url("leaf"), bucket, consumer), lambda n: n == r4)
        finally:
            await second.stop()
            await nc.close()

    asyncio.run(scenario())


async def _consumer_exists(hub_leaf, bucket: str, consumer: str) -> bool:
    nc = await connect(hub_leaf.url("leaf"))
    try:
        return await JetStreamApi(nc, "$JS.leaf.API").consumer_info(f"KV_{bucket}", consumer) is not None
    finally:
        await nc.close()


def test_the_standalone_round_trip_and_skipping_deletes(hub_leaf, hub_conn) -> None:
    bucket = unique("kvrt")

    async def scenario() -> None:
        nc = await connect(hub_leaf.url("leaf"))
        kv = await nc.jetstream().create_key_value(KeyValueConfig(bucket=bucket, history=5))
        await kv.put("a", b"1")
        await kv.delete("a")
        await kv.put("a", b"x")
        trigger = JetStreamKeyValueEventTrigger(
            jetstream_conn_id=hub_conn, bucket=bucket, domain="leaf", initial="current", include_deletes=False
        )
        classpath, kwargs = trigger.serialize()
        assert classpath.endswith("kv_events.JetStreamKeyValueEventTrigger") and kwargs["bucket"] == bucket
        rebuilt = rebuild(trigger)
        events = rebuilt.run()
        event = await asyncio.wait_for(anext(events), scaled(30))  # the current value only ("current")
        assert (event.payload["key"], event.payload["value"], event.payload["revision"]) == ("a", "x", 3)
        await events.aclose()
        await nc.close()

    asyncio.run(scenario())


def test_a_hub_mirror_of_a_leaf_bucket_fires_in_either_layout(hub_leaf, hub_conn) -> None:
    """A hub bucket mirroring a leaf bucket, as nats.go and nats.js make it (the keys stay under the origin's
    name) or as earlier releases did (a subject transform): a change made on the leaf fires the hub watch,
    naming the hub bucket and the key, through a shared stream and standalone alike."""
    origin, official, legacy = unique("kveo"), unique("kvem"), unique("kvel")

    def watch(copy: str, **more) -> JetStreamKeyValueEventTrigger:
        return JetStreamKeyValueEventTrigger(
            jetstream_conn_id=hub_conn, bucket=copy, keys=["site.*"], domain="hub", options={"cohort_wait": 0}, **more
        )

    async def scenario() -> None:
        nc = await connect(hub_leaf.url("leaf"))
        kv = await nc.jetstream().create_key_value(KeyValueConfig(bucket=origin, history=5))
        await hub_mirror_bucket(hub_leaf, official, origin, legacy=False)
        await hub_mirror_bucket(hub_leaf, legacy, origin, legacy=True)
        triggerer = Triggerer()
        triggerer.start(1, watch(official, initial="current"))
        triggerer.start(2, watch(legacy, initial="current"))
        alone = rebuild(watch(official, initial="current", consumer="standalone")).run()
        try:
            await kv.put("other", b"not watched")
            await kv.put("site.a", b'{"load": 1}')
            fired = await triggerer.wait_fired(2)
            first_alone = await asyncio.wait_for(anext(alone), scaled(30))
        finally:
            await alone.aclose()
            await triggerer.stop()
            await nc.close()
        events = {f.trigger_id: f.event.payload for f in fired}
        events[3] = first_alone.payload
        for trigger_id, copy in ((1, official), (2, legacy), (3, official)):
            payload = events[trigger_id]
            assert payload == {
                **payload,
                "bucket": copy,
                "key": "site.a",
                "operation": "PUT",
                "value": {"load": 1},
                "domain": "hub",
            }, trigger_id

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"bucket": "a.b"}, "bucket='a.b'"),
        ({"keys": ["a.>.b"]}, "'>' only the whole last part"),
        ({"keys": ["a..b"]}, "keys[0]='a..b'"),
        ({"initial": "oldest"}, "initial='oldest'"),
        ({"options": {"max_ack_pending": -3}}, "options.max_ack_pending=-3"),
        ({"options": {"ack_policy": "all"}}, "options.ack_policy='all' is not allowed: this operator does not take it"),
    ],
)
def test_invalid_watches_are_refused_at_parse_time(kwargs, words) -> None:
    with pytest.raises(JetStreamConfigError) as caught:
        JetStreamKeyValueEventTrigger(**{"bucket": "b", **kwargs})
    assert words in str(caught.value)
