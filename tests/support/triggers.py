"""Trigger helpers: the serialize -> rebuild -> run round trip Airflow makes; the event tests' message trigger."""

from __future__ import annotations

import asyncio
import importlib
import json
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_jetstream.core.signatures.events import MESSAGE_TUNING
from airflow_provider_jetstream.triggers.messages import JetStreamMessageTrigger


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
