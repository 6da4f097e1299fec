"""The ``jetstream`` scheme of common.messaging and the ``jetstream://`` asset URI, as Airflow's managers load them."""

from __future__ import annotations

import asyncio

import pytest
from airflow.sdk import Asset, AssetWatcher
from nats.js.api import StreamConfig

from airflow_provider_jetstream.assets.jetstream import create_asset, parse_stream_uri
from airflow_provider_jetstream.get_provider_info import get_provider_info
from airflow_provider_jetstream.triggers.messages import JetStreamMessageTrigger
from tests.support.natsutil import connect, unique
from tests.support.triggerer import Triggerer


def test_provider_info_declares_the_queue_and_the_asset_scheme() -> None:
    from airflow.providers_manager import ProvidersManager

    info = get_provider_info()
    assert info["queues"] == ["airflow_provider_jetstream.queues.jetstream.JetStreamMessageQueueProvider"]
    assert info["asset-uris"][0]["schemes"] == ["jetstream"]
    manager = ProvidersManager()
    manager.initialize_providers_queues()
    assert "airflow_provider_jetstream.queues.jetstream.JetStreamMessageQueueProvider" in manager.queue_class_names
    modules = {m for entry in info["triggers"] for m in entry["python-modules"]}
    assert {"airflow_provider_jetstream.triggers.messages", "airflow_provider_jetstream.triggers.kv_events"} <= modules


def test_message_queue_trigger_with_the_jetstream_scheme_is_our_trigger_end_to_end(hub_leaf, hub_conn) -> None:
    from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger

    stream = unique("mq").upper()
    queued = MessageQueueTrigger(
        scheme="jetstream",
        jetstream_conn_id=hub_conn,
        stream=stream,
        consumer="af_mq",
        domain="leaf",
        options={"cohort_wait": 0},
    )
    assert isinstance(queued.trigger, JetStreamMessageTrigger)
    classpath, kwargs = queued.serialize()
    assert classpath == "airflow_provider_jetstream.triggers.messages.JetStreamMessageTrigger"
    assert (kwargs["stream"], kwargs["consumer"], kwargs["domain"]) == (stream, "af_mq", "leaf")
    # the watcher of an asset, as a DAG file declares it
    Asset(uri=f"jetstream://hub/leaf/{stream}", watchers=[AssetWatcher(name="mq", trigger=queued)])

    async def scenario() -> None:
        nc = await connect(hub_leaf.url("leaf"))
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
        await js.publish(f"{stream}.x", b'{"hello": "mq"}')
        await nc.close()
        runner = Triggerer()
        runner.start(1, queued.trigger)  # what the DB holds: our classpath and kwargs
        try:
            (fired,) = await runner.wait_fired(1)
            assert fired.event.payload["data"] == {"hello": "mq"}
        finally:
            await runner.stop()

    asyncio.run(scenario())


def test_the_deprecated_queue_uri_names_stream_and_domain() -> None:
    from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger

    with pytest.warns(Warning):
        queued = MessageQueueTrigger(queue="jetstream://hub:4222/leaf/ORDERS", consumer="af", jetstream_conn_id="c")
    _, kwargs = queued.serialize()
    assert (kwargs["stream"], kwargs["domain"], kwargs["consumer"]) == ("ORDERS", "leaf", "af")


@pytest.mark.parametrize(
    ("uri", "normalized"),
    [
        ("jetstream://NATS-Hub:4222/leaf/EDGE", "jetstream://nats-hub/leaf/EDGE"),
        ("jetstream://hub:4333/_/ORDERS/", "jetstream://hub:4333/_/ORDERS"),
        ("JETSTREAM://10.0.0.1/hub/x-1", "jetstream://10.0.0.1/hub/x-1"),
    ],
)
def test_asset_uris_are_normalized(uri: str, normalized: str) -> None:
    assert Asset(uri=uri).uri == normalized


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("jetstream://hub/leaf", "path='/leaf' is not allowed: exactly two segments"),
        ("jetstream://hub/leaf/S/extra", "path='/leaf/S/extra'"),
        ("jetstream:///leaf/S", "server='' is not allowed"),
        ("jetstream://hub/le.af/S", "domain='le.af' is not allowed"),
        ("jetstream://hub/leaf/S*", "stream='S*' is not allowed"),
        ("jetstream://hub/leaf/S?x=1", "query='x=1' is not allowed"),
        ("jetstream://hub:0/leaf/S", "port='0' is not allowed"),
    ],
)
def test_malformed_asset_uris_are_refused_naming_field_value_and_rule(uri: str, words: str) -> None:
    with pytest.raises(ValueError) as caught:
        Asset(uri=uri)
    assert words in str(caught.value)
    assert "expected jetstream://<server>[:port]/<domain>/<stream>" in str(caught.value)


def test_create_asset_and_parse_round_trip() -> None:
    asset = create_asset(server="Hub:4222", domain="leaf", stream="EDGE")
    assert (asset.uri, asset.name) == ("jetstream://hub/leaf/EDGE", "jetstream://hub/leaf/EDGE")
    parsed = parse_stream_uri(asset.uri)
    assert (parsed.server, parsed.domain, parsed.stream) == ("hub", "leaf", "EDGE")
    assert parse_stream_uri(create_asset(server="h", stream="S").uri).domain is None
