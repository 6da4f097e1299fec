"""The messages of a publish: each payload's bytes, the shared headers and its ``Nats-Msg-Id`` from a template.

A list or tuple of messages goes as blocks (:class:`~airflow_provider_jetstream.core.publish.blocks.Block`),
which fast ingest frames in bulk; other iterables one message at a time, as they come.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from airflow_provider_jetstream.core.arguments.values import value_bytes
from airflow_provider_jetstream.core.protocol import MSG_ID_HEADER
from airflow_provider_jetstream.core.publish.blocks import Block, Item

#: The placeholder of a message's index in a ``msg_id`` template.
INDEX = "{index}"
#: Messages per block of a list of messages.
BLOCK = 1000


def msg_id_parts(template: str) -> tuple[str, str]:
    """``(before, after)`` the ``{index}`` placeholder; one is appended when the template has none."""
    if INDEX not in template:
        template = f"{template}/{INDEX}"
    before, _, after = template.partition(INDEX)
    return before, after


def outgoing(
    subject: str, messages: Iterable[Any], headers: dict[str, str] | None, msg_id: str | None
) -> Iterator[Item]:
    """The ``(subject, payload, headers)`` of each message, with its ``Nats-Msg-Id`` (of a list or tuple:
    blocks of :data:`BLOCK` messages); a payload that is not bytes, str or JSON is refused
    (:func:`~airflow_provider_jetstream.core.arguments.values.value_bytes`)."""
    base = dict(headers or {})
    before, after = msg_id_parts(msg_id) if msg_id else ("", "")
    if isinstance(messages, (list, tuple)):
        shared = {**base, MSG_ID_HEADER: ""} if msg_id else base
        for start in range(0, len(messages), BLOCK):
            indexes = range(start, min(start + BLOCK, len(messages)))
            payloads = [value_bytes(messages[i], f"messages[{i}]") for i in indexes]
            ids = [f"{before}{i}{after}" for i in indexes] if msg_id else None
            yield Block(subject, payloads, shared or None, ids)
        return
    for index, message in enumerate(messages):
        payload = value_bytes(message, f"messages[{index}]")
        if msg_id:
            hdrs: dict[str, str] | None = base.copy()
            hdrs[MSG_ID_HEADER] = f"{before}{index}{after}"  # type: ignore[index]
        else:
            hdrs = base.copy() if base else None
        yield subject, payload, hdrs
