"""Filter subjects that select nothing of their stream (issue #36): the await-message sensor with
``filter_subjects='zzz.>'`` waited for ever; now its consumer (the task's own, or an ephemeral one) and a declared
consumer are refused, naming the filter and the stream's subjects, before any consumer is created."""

from __future__ import annotations

import asyncio

import pytest

from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.triggers.await_message import JetStreamAwaitMessageTrigger
from tests.support.natsutil import connect, unique
from tests.support.triggers import Running, make_stream, rebuild

#: The await trigger's match function (importable by the triggerer).
DONE_FOR_SITE = "tests.support.matchers.done_for_site"


async def consumer_names(url: str, stream: str) -> list[str]:
    nc = await connect(url)
    try:
        return sorted(info.name for info in await nc.jetstream().consumers_info(stream))
    finally:
        await nc.close()


@pytest.mark.parametrize("ack", ["all_seen", "none"])
def test_the_await_trigger_fails_at_once_naming_the_filter_and_the_streams_subjects(hub_leaf, hub_conn, ack) -> None:
    stream, leaf = unique("overlap"), hub_leaf.url("leaf")

    async def scenario() -> None:
        await make_stream(leaf, stream)
        trigger = JetStreamAwaitMessageTrigger(
            hub_conn, stream, DONE_FOR_SITE, task_consumer=None if ack == "none" else "af_overlap", ack_mode=ack,
            filter_subjects=["zzz.>"], domain="leaf", max_wait=1,
            state={"start_sequence": 1} if ack == "none" else None,
        )  # fmt: skip
        run = Running(rebuild(trigger))
        try:
            event = await run.first(timeout=30)
        finally:
            await run.stop()
        assert event["status"] != "success", event
        text = str(event)
        assert "'zzz.>' overlaps none of the subjects" in text and f"{stream}.>" in text, text
        assert await consumer_names(leaf, stream) == [], "no consumer was created"

    asyncio.run(scenario())


def test_a_declared_consumer_with_a_filter_outside_its_stream_is_refused(hub_leaf, hub_conn) -> None:
    stream, leaf = unique("overlap"), hub_leaf.url("leaf")
    asyncio.run(make_stream(leaf, stream))
    hook = JetStreamHook(hub_conn, domain="leaf")
    with pytest.raises(
        JetStreamConfigError, match=r"consumer.filter_subject='zzz\.>' is not allowed: .*overlaps none"
    ) as err:
        hook.ensure_consumer(stream, {"name": "dur", "filter_subject": "zzz.>"})
    assert f"of stream {stream!r} in domain 'leaf' ({stream}.>)" in str(err.value)
    assert asyncio.run(consumer_names(leaf, stream)) == []
    # Overlapping filters are taken, a wildcard one too.
    made = hook.ensure_consumer(stream, {"name": "dur", "filter_subjects": [f"{stream}.a", "*.b"]})
    assert made["action"] == "created"
    assert asyncio.run(consumer_names(leaf, stream)) == ["dur"]
