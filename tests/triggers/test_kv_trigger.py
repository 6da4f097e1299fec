"""``JetStreamKeyValueTrigger`` (a KV watch) and the key check, across domains on real servers."""

from __future__ import annotations

import asyncio
import time

from nats.js.api import KeyValueConfig

from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.testing.servers import USERS
from airflow_provider_jetstream.triggers.kv import JetStreamKeyValueTrigger
from tests.support.logs import LogLines, captured_logs
from tests.support.natsutil import connect, hub_mirror_bucket, messages_sent, unique
from tests.support.triggers import first_event
from tests.support.waiting import eventually


async def leaf_bucket(topology, bucket: str):
    """A bucket in the leaf's own domain, written through a connection to the leaf server."""
    nc = await connect(topology.url("leaf"))
    kv = await nc.jetstream().create_key_value(KeyValueConfig(bucket=bucket, history=5))
    return nc, kv


def test_key_set_later_in_the_leaf_fires_the_trigger_connected_through_the_hub(hub_leaf, hub_conn) -> None:
    bucket = unique("kv")

    async def scenario(logs: LogLines) -> tuple[dict, bool]:
        nc, kv = await leaf_bucket(hub_leaf, bucket)
        trigger = JetStreamKeyValueTrigger(hub_conn, bucket, "ready", domain="leaf")
        fired = asyncio.create_task(first_event(trigger, timeout=20))
        await logs.wait_for("key 'ready' is absent; watching")  # its watch has seen the bucket without the key
        early = fired.done()
        await kv.put("ready", b"batch-42")
        event = await fired
        await nc.close()
        return event.payload, early

    with captured_logs() as logs:
        payload, early = asyncio.run(scenario(logs))
    assert not early
    assert payload["status"] == "success"
    assert payload["entry"] == {
        "bucket": bucket,
        "key": "ready",
        "target": "domain 'leaf'",
        "value": "batch-42",
        "encoding": "utf-8",
        "revision": 1,
    }


def test_deleted_or_purged_key_is_absent_and_value_and_revision_are_waited_for(hub_leaf, hub_conn) -> None:
    bucket = unique("kv")
    hook = JetStreamHook(hub_conn, domain="leaf")

    async def scenario(logs: LogLines) -> dict:
        nc, kv = await leaf_bucket(hub_leaf, bucket)
        seen = {}
        await kv.put("k", b"v1")
        await kv.delete("k")
        seen["deleted"] = (await hook.acheck_key(bucket, "k")).reason
        await kv.put("k", b"v2")
        await kv.purge("k")
        seen["purged"] = (await hook.acheck_key(bucket, "k")).reason
        trigger = JetStreamKeyValueTrigger(hub_conn, bucket, "k", domain="leaf", value="v4", after_revision=0)
        fired = asyncio.create_task(first_event(trigger, timeout=20))
        await logs.wait_for("waiting: key 'k' is purged at revision")  # the watch judged the purge marker
        seen["fired on purge marker"] = fired.done()
        await kv.put("k", b"v3")
        await logs.wait_for("waiting: key 'k' is b'v3' at revision")  # and the other value
        seen["fired on other value"] = fired.done()
        seen["check other value"] = (await hook.acheck_key(bucket, "k", value="v4")).reason
        seen["check min revision"] = (await hook.acheck_key(bucket, "k", after_revision=98)).reason
        revision = await kv.put("k", b"v4")
        seen["event"] = (await fired).payload
        seen["revision"] = revision
        await nc.close()
        return seen

    with captured_logs() as logs:
        seen = asyncio.run(scenario(logs))
    assert seen["deleted"] == "key 'k' is absent"
    assert seen["purged"] == "key 'k' is absent"
    assert seen["fired on purge marker"] is False
    assert seen["fired on other value"] is False
    assert seen["check other value"] == f"key 'k' is b'v3' at revision {seen['revision'] - 1}, not 'v4'"
    assert seen["check min revision"] == f"key 'k' is at revision {seen['revision'] - 1}, not after 98"
    assert seen["event"]["entry"]["value"] == "v4"
    assert seen["event"]["entry"]["revision"] == seen["revision"]


def test_missing_bucket_fires_an_error_at_once(hub_leaf, hub_conn) -> None:
    trigger = JetStreamKeyValueTrigger(hub_conn, unique("kv"), "k", domain="leaf")
    event = asyncio.run(first_event(trigger, timeout=5))
    assert event.payload["reason"] == "not_found"
    assert "does not exist in domain 'leaf'" in event.payload["message"]


def test_same_named_key_in_the_hub_does_not_satisfy_a_trigger_aimed_at_the_leaf(make_topology, jetstream_conn) -> None:
    """Private topology: two same-named buckets in two domains of one account share their subjects."""
    topology = make_topology(leaf_domains=["leaf"])
    user, password = USERS["ACC"]
    conn_id = jetstream_conn(f"127.0.0.1:{topology.hub.port}", login=user, password=password)
    bucket = unique("kv")

    async def scenario(logs: LogLines) -> tuple[str, bool, dict, str]:
        hub = await connect(topology.url("hub"))
        hub_kv = await hub.jetstream().create_key_value(KeyValueConfig(bucket=bucket))
        await hub_kv.put("ready", b"hub-value")  # before the leaf's bucket exists: only the hub stores it
        leaf, leaf_kv = await leaf_bucket(topology, bucket)
        leaf_check = (await JetStreamHook(conn_id, domain="leaf").acheck_key(bucket, "ready")).reason
        fired = asyncio.create_task(first_event(JetStreamKeyValueTrigger(conn_id, bucket, "ready", domain="leaf"), 20))
        await logs.wait_for("key 'ready' is absent; watching")  # the leaf's bucket, seen without the key
        early = fired.done()
        await leaf_kv.put("ready", b"leaf-value")
        payload = (await fired).payload
        hub_check = (await JetStreamHook(conn_id, domain="hub").acheck_key(bucket, "ready")).reason
        await hub.close()
        await leaf.close()
        return leaf_check, early, payload, hub_check

    with captured_logs() as logs:
        leaf_check, early, payload, hub_check = asyncio.run(scenario(logs))
    assert leaf_check == "key 'ready' is absent"
    assert hub_check.startswith("key 'ready' present")
    assert not early
    assert (payload["entry"]["value"], payload["entry"]["revision"], payload["entry"]["target"]) == (
        "leaf-value",
        1,
        "domain 'leaf'",
    )


def test_watch_survives_the_leaf_being_cut_off_and_sees_the_key_set_meanwhile(make_topology, jetstream_conn) -> None:
    topology = make_topology(leaf_domains=["leaf"])
    user, password = USERS["ACC"]
    client_name = unique("kvcut")  # the trigger's connection, told apart in the hub's connz
    conn_id = jetstream_conn(f"127.0.0.1:{topology.hub.port}", login=user, password=password, client_name=client_name)
    bucket = unique("kv")

    async def scenario(logs: LogLines) -> tuple[bool, dict]:
        leaf, _ = await leaf_bucket(topology, bucket)
        await leaf.close()
        trigger = JetStreamKeyValueTrigger(conn_id, bucket, "ready", domain="leaf", poll_interval=1.0)
        fired = asyncio.create_task(first_event(trigger, timeout=60))
        await logs.wait_for("key 'ready' is absent; watching")  # the watch is armed
        await asyncio.to_thread(topology.disconnect_leaf, "leaf")
        leaf = await connect(topology.url("leaf"))
        await (await leaf.jetstream().key_value(bucket)).put("ready", b"set-while-cut-off")
        await leaf.close()
        # Re-arming the silent watch asks the hub for the leaf's bucket once every rewatch_interval, and no
        # JetStream answers: three requests sent since the put mean at least one whole attempt made after it.
        sent = messages_sent(topology.hub, client_name)
        retried = await eventually(lambda: messages_sent(topology.hub, client_name), lambda n: n >= sent + 3)
        assert retried >= sent + 3, "the trigger did not try to re-arm its watch while the leaf was cut off"
        early = fired.done()
        await asyncio.to_thread(topology.reconnect_leaf, "leaf")
        return early, (await fired).payload

    with captured_logs() as logs:
        early, payload = asyncio.run(scenario(logs))
    assert not early
    assert payload["status"] == "success"
    assert payload["entry"]["value"] == "set-while-cut-off"


def test_trigger_and_check_read_a_cross_domain_mirror_bucket_in_either_layout(hub_leaf, hub_conn) -> None:
    origin, official, legacy = unique("kvo"), unique("kvm"), unique("kvl")
    hook = JetStreamHook(hub_conn, domain="hub")

    async def scenario() -> dict:
        leaf, kv = await leaf_bucket(hub_leaf, origin)
        first = await kv.put("ready", b"wait")
        await hub_mirror_bucket(hub_leaf, official, origin, legacy=False)
        await hub_mirror_bucket(hub_leaf, legacy, origin, legacy=True)
        seen: dict = {"first": first}
        for copy in (official, legacy):  # wait until the mirror has copied the first put
            deadline = time.monotonic() + 15
            while (reason := (await hook.acheck_key(copy, "ready", value="go")).reason) == "key 'ready' is absent":
                assert time.monotonic() < deadline, f"{copy}: {reason}"
                await asyncio.sleep(0.1)
            seen[copy] = reason
        fired = [
            asyncio.create_task(
                first_event(JetStreamKeyValueTrigger(hub_conn, copy, "ready", domain="hub", value="go"), 30)
            )
            for copy in (official, legacy)
        ]
        seen["revision"] = await kv.put("ready", b"go")
        seen["events"] = [(await task).payload for task in fired]
        await leaf.close()
        return seen

    seen = asyncio.run(scenario())
    for copy in (official, legacy):
        assert seen[copy] == f"key 'ready' is b'wait' at revision {seen['first']}, not 'go'"
    for copy, event in zip((official, legacy), seen["events"], strict=True):
        assert event["status"] == "success"
        assert event["entry"] == {
            "bucket": copy,
            "key": "ready",
            "target": "domain 'hub'",
            "value": "go",
            "encoding": "utf-8",
            "revision": seen["revision"],
        }
