"""``JetStreamAwaitMessageTrigger`` on the real hub + leaf: a match in the leaf's domain through the hub, each ack
mode's effect on the consumer, and a triggerer restart (run cancelled, rebuilt from its serialized kwargs)."""

from __future__ import annotations

import asyncio
import importlib
import json
from typing import Any

import pytest
from nats.js.api import StreamConfig

from airflow_provider_jetstream.core.consume.matching import ack_match
from airflow_provider_jetstream.triggers.await_message import JetStreamAwaitMessageTrigger
from tests.support import matchers
from tests.support.natsutil import acked_through, connect, consumer_state, unique
from tests.support.waiting import eventually, scaled

FUNCTION = "tests.support.matchers.done_for_site"


def from_kwargs(classpath: str, kwargs: dict[str, Any]) -> JetStreamAwaitMessageTrigger:
    """The trigger as the triggerer rebuilds it from the row Airflow stored when the task deferred."""
    module, _, name = classpath.rpartition(".")
    return getattr(importlib.import_module(module), name)(**json.loads(json.dumps(kwargs)))


async def publish_events(url: str, stream: str, bodies: list[dict]) -> list[int]:
    nc = await connect(url)
    js = nc.jetstream()
    seqs = [(await js.publish(f"{stream}.events", json.dumps(b).encode(), headers={"site": "x"})).seq for b in bodies]
    await nc.close()
    return seqs


async def make_stream(url: str, stream: str) -> None:
    nc = await connect(url)
    await nc.jetstream().add_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
    await nc.close()


NOT_YET = [{"status": "started", "site": "lyon"}, {"status": "done", "site": "oslo"}, {"status": "running"}]
MATCH = {"status": "done", "site": "lyon", "batch": 7}


class Running:
    """A trigger's run() in a task of its own, as the triggerer runs it: its events, and a cancel (a restart)."""

    def __init__(self, trigger: JetStreamAwaitMessageTrigger) -> None:
        self.events: asyncio.Queue = asyncio.Queue()
        self.task = asyncio.create_task(self._run(trigger))

    async def _run(self, trigger: JetStreamAwaitMessageTrigger) -> None:
        async for event in trigger.run():
            await self.events.put(event.payload)

    async def first(self, timeout: float = 30) -> dict:
        return await asyncio.wait_for(self.events.get(), scaled(timeout))

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


@pytest.mark.parametrize("ack", ["all_seen", "on_match", "none"])
def test_match_in_the_leaf_through_the_hub_and_what_each_ack_mode_does(hub_leaf, hub_conn, ack) -> None:
    stream, leaf = unique("await"), hub_leaf.url("leaf")
    consumer = None if ack == "none" else "af_await_test"

    async def scenario() -> None:
        await make_stream(leaf, stream)
        trigger = JetStreamAwaitMessageTrigger(
            hub_conn, stream, FUNCTION, {"site": "lyon"}, task_consumer=consumer, ack=ack, deliver_policy="all",
            domain="leaf", max_wait=1, state={"start_sequence": 1} if ack == "none" else None,
        )  # fmt: skip
        classpath, kwargs = trigger.serialize()
        run = Running(from_kwargs(classpath, kwargs))
        seqs = await publish_events(leaf, stream, [*NOT_YET, MATCH, {"status": "later"}])
        event = await run.first()
        assert event["status"] == "success", event
        match = event["result"]["match"]
        assert match["value"] == {"site": "lyon", "batch": 7}
        assert (match["sequence"], match["domain"], match["subject"]) == (seqs[3], "leaf", f"{stream}.events")
        assert match["headers"] == {"site": ["x"]}
        subject = event["result"]["ack_subject"]
        if ack == "none":
            assert subject is None  # nothing to ack; no durable consumer exists
            await run.stop()
            return
        held = await consumer_state(leaf, stream, consumer)
        if ack == "all_seen":  # the three examined are acked; the match is held until Airflow stored it
            assert (acked_through(held), held["num_ack_pending"]) == (3, 1)
        else:  # the three examined are left for the consumer's other readers, the match is held
            assert (acked_through(held), held["num_ack_pending"]) == (0, 4)
        nc = await connect(hub_leaf.url("hub"))
        await ack_match(nc, subject, 5)  # what the sensor does once the event is stored
        await nc.close()
        await run.stop()
        after = await consumer_state(leaf, stream, consumer)
        if ack == "all_seen":
            assert (acked_through(after), after["num_ack_pending"], after["num_pending"]) == (4, 0, 1)
        else:
            assert (acked_through(after), after["num_ack_pending"]) == (0, 3)  # only the match was acked

    asyncio.run(scenario())


@pytest.mark.parametrize("ack", ["all_seen", "on_match"])
def test_a_restarted_triggerer_neither_loses_nor_rematches(hub_leaf, hub_conn, ack) -> None:
    """The first trigger examines three messages, then finds the match and is killed before Airflow stored its
    event; the trigger rebuilt from the stored kwargs gets the match again (after ack_wait) and fires once.
    With all_seen it examines nothing the first one acked; the match is acked once."""
    stream, leaf = unique("await"), hub_leaf.url("leaf")

    async def scenario() -> None:
        await make_stream(leaf, stream)
        trigger = JetStreamAwaitMessageTrigger(
            hub_conn, stream, FUNCTION, task_consumer="af_await_restart", ack=ack, deliver_policy="all",
            ack_wait=2, domain="leaf", max_wait=1,
        )  # fmt: skip
        classpath, kwargs = trigger.serialize()  # what Airflow stored when the task deferred
        matchers.EXAMINED.clear()
        first = Running(from_kwargs(classpath, kwargs))
        seqs = await publish_events(leaf, stream, NOT_YET)
        await eventually(lambda: list(matchers.EXAMINED), lambda seen: seen == seqs, timeout=30)
        [match_seq] = await publish_events(leaf, stream, [MATCH])
        event = await first.first()
        assert event["result"]["match"]["sequence"] == match_seq
        await first.stop()  # killed before the event was stored: nothing acked the match
        matchers.EXAMINED.clear()

        second = Running(from_kwargs(classpath, kwargs))
        event = await second.first(timeout=60)
        assert event["result"]["match"]["sequence"] == match_seq
        if ack == "all_seen":
            assert [match_seq] == matchers.EXAMINED  # what the first one acked is not examined again
        else:  # left ones come back once to the new trigger (it has not seen them); none matches
            assert sorted(matchers.EXAMINED) == sorted([*seqs, match_seq])
        nc = await connect(hub_leaf.url("hub"))
        await ack_match(nc, event["result"]["ack_subject"], 5)
        await nc.close()
        await second.stop()
        state = await consumer_state(leaf, stream, "af_await_restart")
        assert state["num_pending"] == 0
        assert state["num_ack_pending"] == (0 if ack == "all_seen" else 3)
        assert acked_through(state) == (match_seq if ack == "all_seen" else 0)

    asyncio.run(scenario())


def test_bad_arguments_are_refused_when_the_trigger_is_made(hub_conn) -> None:
    from airflow_provider_jetstream.core.errors import JetStreamConfigError

    with pytest.raises(JetStreamConfigError) as err:
        JetStreamAwaitMessageTrigger(hub_conn, "s", "no_dots", consumer="c", task_consumer="t", ack="sometimes")
    text = str(err.value)
    assert "apply_function='no_dots' is not allowed" in text
    assert "ack='sometimes' is not allowed" in text
    assert "consumer='c' and task_consumer='t' were both given" in text
