"""Issue #9: sensors that can never succeed fail at once; a domain that does not answer is waited for,
up to ``unreachable_timeout``.

- A user whose permissions deny the API a sensor needs gets ``-ERR 'Permissions Violation'`` (the
  request itself just times out): the consumer-lag, replication and KV sensors and their triggers
  fail at once, saying so.
- An account without the import of an imported API prefix (``JS.acc@hub.API``) gets no responders:
  the same.
- A domain that does not answer (a leaf that is offline, or a typo) is waited for, with both
  possibilities in the log, until ``unreachable_timeout``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from nats.js.api import ConsumerConfig, KeyValueConfig, StreamConfig, StreamSource

from airflow_provider_jetstream.compat import AirflowFailException
from airflow_provider_jetstream.sensors.consumer_lag import JetStreamConsumerLagSensor
from airflow_provider_jetstream.sensors.kv import JetStreamKeyValueSensor
from airflow_provider_jetstream.sensors.replication_lag import JetStreamReplicationLagSensor
from airflow_provider_jetstream.testing.servers import NatsServer
from airflow_provider_jetstream.triggers.consumer_lag import JetStreamConsumerLagTrigger
from airflow_provider_jetstream.triggers.kv import JetStreamKeyValueTrigger
from airflow_provider_jetstream.triggers.replication_lag import JetStreamReplicationLagTrigger
from tests.support.natsutil import connect
from tests.support.triggers import first_event

DENIED = [
    "$JS.API.CONSUMER.INFO.>",
    "$JS.API.CONSUMER.CREATE.>",
    "$JS.API.STREAM.MSG.GET.>",
    "$JS.API.DIRECT.GET.>",
]


@pytest.fixture(scope="module")
def restricted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """One JetStream server; user ``full`` may do anything, user ``limited`` may not read consumer
    info, create consumers or get messages."""
    work = tmp_path_factory.mktemp("refusals")
    body = (
        f"jetstream {{ store_dir: {json.dumps(str(work / 'store'))} }}\n"
        "accounts { A: { jetstream: enabled, users: [\n"
        "  {user: full, password: fullpass},\n"
        f"  {{user: limited, password: limitedpass, permissions: {{publish: {{deny: {json.dumps(DENIED)}}}}}}}\n"
        "] } }\n"
    )
    server = NatsServer(name="refusals", workdir=work, body=body).start()

    async def setup() -> None:
        nc = await connect(f"nats://full:fullpass@127.0.0.1:{server.port}")
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name="orig", subjects=["orig.>"]))
        for i in range(2):
            await js.publish("orig.in", f"m{i}".encode())
        await js.add_stream(StreamConfig(name="orig_copy", mirror=StreamSource(name="orig")))
        await js.add_consumer("orig", ConsumerConfig(durable_name="worker"))
        kv = await js.create_key_value(KeyValueConfig(bucket="kvb"))
        await kv.put("k", b"v")
        await nc.close()

    try:
        asyncio.run(setup())
        yield server
    finally:
        server.stop()


@pytest.fixture
def limited_conn(restricted: NatsServer, jetstream_conn: Callable[..., str]) -> str:
    return jetstream_conn(f"127.0.0.1:{restricted.port}", login="limited", password="limitedpass", connect_timeout=1.5)


def sensors(conn_id: str, max_unprocessed: int = 0, **kwargs: Any) -> dict[str, Any]:
    common = {"jetstream_conn_id": conn_id, **kwargs}
    return {
        "consumer": JetStreamConsumerLagSensor(
            task_id="c", stream="orig", consumer="worker", max_unprocessed=max_unprocessed, **common
        ),
        "replication": JetStreamReplicationLagSensor(task_id="r", stream="orig_copy", **common),
        "kv": JetStreamKeyValueSensor(task_id="k", bucket="kvb", key="k", **common),
    }


def triggers(conn_id: str, **kwargs: Any) -> dict[str, Any]:
    return {
        "consumer": JetStreamConsumerLagTrigger(conn_id, "orig", "worker", poll_interval=0.2, **kwargs),
        "replication": JetStreamReplicationLagTrigger(conn_id, "orig_copy", poll_interval=0.2, **kwargs),
        "kv": JetStreamKeyValueTrigger(conn_id, "kvb", "k", poll_interval=0.2, **kwargs),
    }


@pytest.mark.parametrize("which", ["consumer", "replication", "kv"])
def test_a_permission_refusal_fails_the_sensor_at_once(limited_conn, which) -> None:
    sensor = sensors(limited_conn)[which]
    started = time.monotonic()
    with pytest.raises(AirflowFailException, match="Permissions Violation") as failed:
        sensor.poke({})
    assert time.monotonic() - started < 10, "one check, not a wait for the sensor's timeout"
    # nats-py lowercases the server's error text
    assert "refused this user's publish to '$js.api." in str(failed.value)


@pytest.mark.parametrize("which", ["consumer", "replication", "kv"])
def test_a_permission_refusal_fails_the_trigger_at_once(limited_conn, which) -> None:
    event = asyncio.run(first_event(triggers(limited_conn)[which], timeout=15))
    assert event.payload["status"] == "error" and event.payload["reason"] == "permission"
    assert "Permissions Violation" in event.payload["message"]


def test_the_full_user_is_not_refused(restricted, jetstream_conn) -> None:
    conn_id = jetstream_conn(f"127.0.0.1:{restricted.port}", login="full", password="fullpass")
    for name, sensor in sensors(conn_id, max_unprocessed=2).items():
        deadline = time.monotonic() + 20
        while not sensor.poke({}):
            assert time.monotonic() < deadline, f"{name} never succeeded for the full user"
            time.sleep(0.2)


@pytest.fixture
def import_client(hub_leaf, jetstream_conn) -> str:
    """IMPORT_CLIENT imports only ``JS.acc@hub.API.CONSUMER.MSG.NEXT.aggregate-test-leaf.dur``."""
    return jetstream_conn(
        f"127.0.0.1:{hub_leaf.hub.port}",
        login="import_client",
        password="import_client",
        api_prefix="JS.acc@hub.API",
        connect_timeout=1.5,
    )


@pytest.mark.parametrize("which", ["consumer", "kv"])
def test_an_account_without_the_import_fails_at_once(import_client, which) -> None:
    sensor = {
        "consumer": JetStreamConsumerLagSensor(
            task_id="c", jetstream_conn_id=import_client, stream="aggregate-test-leaf", consumer="dur"
        ),
        "kv": JetStreamKeyValueSensor(task_id="k", jetstream_conn_id=import_client, bucket="kvb", key="k"),
    }[which]
    with pytest.raises(AirflowFailException, match=r"JS\.acc@hub\.API") as failed:
        sensor.poke({})
    assert "import" in str(failed.value)
    trigger = {
        "consumer": JetStreamConsumerLagTrigger(import_client, "aggregate-test-leaf", "dur", poll_interval=0.2),
        "kv": JetStreamKeyValueTrigger(import_client, "kvb", "k", poll_interval=0.2),
    }[which]
    event = asyncio.run(first_event(trigger, timeout=15))
    assert event.payload["reason"] == "permission" and "import" in event.payload["message"]


@pytest.mark.parametrize("which", ["consumer", "replication", "kv"])
def test_a_domain_that_does_not_answer_is_waited_for_until_unreachable_timeout(hub_conn, which) -> None:
    sensor = sensors(hub_conn, domain="nowhere", unreachable_timeout="1s")[which]
    started = time.monotonic()
    with pytest.raises(AirflowFailException) as failed:
        while time.monotonic() - started < 15:
            assert sensor.poke({}) is False  # waits: the leaf may be offline
            time.sleep(0.2)
    assert time.monotonic() - started >= 1.0
    message = str(failed.value)
    assert "domain 'nowhere'" in message and "a leaf that is offline, or a wrong domain name" in message
    assert "unreachable_timeout 1.00s" in message

    began = time.monotonic()
    event = asyncio.run(first_event(triggers(hub_conn, domain="nowhere", unreachable_timeout=1)[which], timeout=15))
    assert event.payload["reason"] == "unreachable" and time.monotonic() - began >= 1.0
    assert "a leaf that is offline, or a wrong domain name" in event.payload["message"]
