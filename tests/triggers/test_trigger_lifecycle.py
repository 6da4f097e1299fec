"""What every trigger holds is released when it fires, fails or is cancelled; connection failures end it."""

from __future__ import annotations

import asyncio

import pytest
from nats.js.api import KeyValueConfig

from airflow_provider_jetstream.testing.servers import USERS
from airflow_provider_jetstream.triggers.consumer_lag import JetStreamConsumerLagTrigger
from airflow_provider_jetstream.triggers.kv import JetStreamKeyValueTrigger
from airflow_provider_jetstream.triggers.replication_lag import JetStreamReplicationLagTrigger
from tests.support.natsutil import connect, connection_count, unique
from tests.support.triggers import first_event, rebuild
from tests.support.waiting import eventually


@pytest.fixture
def named_conn(hub_leaf, jetstream_conn) -> tuple[str, str]:
    client_name = unique("life")
    user, password = USERS["ACC"]
    conn_id = jetstream_conn(f"127.0.0.1:{hub_leaf.hub.port}", login=user, password=password, client_name=client_name)
    return conn_id, client_name


async def leaf_bucket(hub_leaf, bucket: str) -> None:
    leaf = await connect(hub_leaf.url("leaf"))
    await leaf.jetstream().create_key_value(KeyValueConfig(bucket=bucket))
    await leaf.close()


def test_cancelled_triggers_close_their_connection_and_watch(hub_leaf, named_conn) -> None:
    conn_id, client_name = named_conn
    bucket = unique("life")
    asyncio.run(leaf_bucket(hub_leaf, bucket))
    trigger = rebuild(JetStreamKeyValueTrigger(conn_id, bucket, "never", domain="leaf"))

    async def scenario() -> tuple[int, int, int]:
        task = asyncio.create_task(anext(trigger.run()))
        leaf = await connect(hub_leaf.url("leaf"))

        async def watchers_now() -> int:
            return (await leaf.jetstream().stream_info(f"KV_{bucket}")).state.consumer_count

        watchers = await eventually(watchers_now, lambda n: n >= 1)
        running = connection_count(hub_leaf.hub, client_name)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await trigger.cleanup()
        after = await eventually(lambda: connection_count(hub_leaf.hub, client_name), lambda n: n == 0)
        await leaf.close()
        return running, watchers, after

    running, watchers, after = asyncio.run(scenario())
    assert (running, watchers, after) == (1, 1, 0)  # one shared connection, one KV watch, then none


def test_a_trigger_that_fires_releases_the_connection(hub_leaf, named_conn) -> None:
    conn_id, client_name = named_conn
    trigger = JetStreamReplicationLagTrigger(conn_id, unique("life"), domain="hub", poll_interval=0.2)

    async def scenario() -> tuple[str, int]:
        event = await first_event(trigger, timeout=30)
        after = await eventually(lambda: connection_count(hub_leaf.hub, client_name), lambda n: n == 0)
        return event.payload["reason"], after

    assert asyncio.run(scenario()) == ("not_found", 0)


@pytest.mark.parametrize("kind", ["consumer", "replication", "kv"])
def test_unreachable_server_ends_the_trigger_with_a_clear_error(jetstream_conn, unused_url, kind) -> None:
    conn_id = jetstream_conn(unused_url, login="acc", password="sens-secret-pw", connect_timeout=1)
    trigger = {
        "consumer": JetStreamConsumerLagTrigger(conn_id, "s", "c"),
        "replication": JetStreamReplicationLagTrigger(conn_id, "s"),
        "kv": JetStreamKeyValueTrigger(conn_id, "b", "k"),
    }[kind]
    event = asyncio.run(first_event(trigger, timeout=10))
    assert event.payload["status"] == "error"
    assert f"connection {conn_id!r}: no NATS server reachable" in event.payload["message"]
    assert "sens-secret-pw" not in event.payload["message"]
