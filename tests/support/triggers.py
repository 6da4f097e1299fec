"""Trigger helpers: the round trip Airflow makes (serialize, rebuild, run), a run as the triggerer does it."""

from __future__ import annotations

import asyncio
import importlib
import json
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent
from nats.js.api import StreamConfig

from airflow_provider_jetstream.core.signatures.events import MESSAGE_TUNING
from airflow_provider_jetstream.triggers.await_message import JetStreamAwaitMessageTrigger
from airflow_provider_jetstream.triggers.messages import JetStreamMessageTrigger
from tests.support.natsutil import connect
from tests.support.waiting import scaled


def rebuild(trigger: BaseTrigger) -> BaseTrigger:
    """Serialize a trigger, check its kwargs are plain JSON, and rebuild it from classpath + kwargs."""
    classpath, kwargs = trigger.serialize()
    assert json.loads(json.dumps(kwargs)) == kwargs, f"kwargs are not plain JSON: {kwargs!r}"
    module, _, name = classpath.rpartition(".")
    return getattr(importlib.import_module(module), name)(**kwargs)


async def first_event(trigger: BaseTrigger, timeout: float) -> TriggerEvent:
    """Round trip a trigger (serialize -> rebuild -> run) and return its first event, then clean up."""
    rebuilt = rebuild(trigger)
    events = rebuilt.run()
    try:
        return await asyncio.wait_for(anext(events), timeout)
    finally:
        await events.aclose()
        await rebuilt.cleanup()


def message_trigger(conn: str, stream: str, **kw: Any) -> JetStreamMessageTrigger:
    """A message trigger: domain ``leaf``, consumer ``af_events`` and no cohort wait unless given; the
    settings that live in its options (``ack_wait``, ``ack_policy``...) may be given flat here."""
    kw.setdefault("domain", "leaf")
    kw.setdefault("consumer", "af_events")
    options = {"cohort_wait": 0, **{name: kw.pop(name) for name in MESSAGE_TUNING if name in kw}}
    return JetStreamMessageTrigger(jetstream_conn_id=conn, stream=stream, options=options, **kw)


async def make_stream(url: str, stream: str) -> None:
    nc = await connect(url)
    await nc.jetstream().add_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"]))
    await nc.close()


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
