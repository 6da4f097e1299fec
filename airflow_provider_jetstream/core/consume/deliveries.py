"""What the event triggers keep of a delivery until it is settled (its :class:`Ticket`), and the JSON payload of its
event (:func:`delivery_payload`, :func:`batch_payload`).

The delivery itself, and its settles, are the consumer engine's:
:class:`~airflow_provider_jetstream.core.read.delivery.Delivery`.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, Literal

from airflow_provider_jetstream.core.read.delivery import Delivery

#: How a payload may be decoded: ``auto`` tries JSON, then UTF-8 text, then base64.
DECODINGS = ("auto", "json", "text", "base64")


#: What became of one message: stored by every watcher, refused by one, not stored, nobody listening; or
#: ``leave``: neither acked nor naked (the consumer delivers it again after its ack wait).
Settlement = Literal["ack", "reject", "fail", "idle", "leave"]


@dataclass
class Ticket:
    """A message handed to the caller and not yet settled: where to send its ack, how often it came.

    ``state`` is used with ``ack_policy: all`` only: ``out`` (handed out), ``ack`` / ``reject``
    (settled, waiting for the ack floor to reach it), ``fail`` (naked, waiting for its redelivery).
    """

    seq: int
    reply: str
    delivered: int
    delivery: Delivery
    consumer_sequence: int = 0
    state: str = "out"


def decode_payload(data: bytes, decode: str = "auto", max_bytes: int = 65536) -> tuple[str, Any]:
    """``(encoding, value)`` of a payload: ``json`` (the parsed value), ``text``, ``base64`` or ``omitted``.

    :param decode: ``auto`` (default) tries JSON, then strict UTF-8 text, then base64; ``json``,
        ``text`` and ``base64`` force one form and raise ``ValueError`` if the payload is not in it.
        An empty payload (a KV delete marker has one) is ``("text", "")`` in every form but ``base64``.
    :param max_bytes: payloads larger than this are ``omitted`` (value None): the event lands in
        Airflow's database. Default 64 KiB.
    """
    if decode not in DECODINGS:
        raise ValueError(f"decode={decode!r} is not one of {', '.join(DECODINGS)}")
    if len(data) > max_bytes:
        return "omitted", None
    if decode == "base64":
        return "base64", base64.b64encode(data).decode("ascii")
    if decode in ("auto", "json") and data:
        try:
            return "json", json.loads(data)
        except (ValueError, UnicodeDecodeError):
            if decode == "json":
                raise ValueError("the payload is not JSON") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        if decode == "text":
            raise ValueError("the payload is not UTF-8 text") from None
        return "base64", base64.b64encode(data).decode("ascii")
    return "text", text


def delivery_payload(
    delivery: Delivery, *, decode: str = "auto", max_payload_bytes: int = 65536, include_headers: bool = True
) -> dict[str, Any]:
    """The JSON-able TriggerEvent payload of one delivery; a DAG dedups by its ``seq``.

    Keys: ``stream``, ``domain``, ``consumer``, ``subject``, ``seq``, ``timestamp`` (ISO),
    ``timestamp_ns``, ``delivered``, ``headers`` (name -> list of values, if ``include_headers``),
    ``encoding``, ``data``, ``size``.
    """
    encoding, value = decode_payload(delivery.data, decode, max_payload_bytes)
    payload: dict[str, Any] = {
        "stream": delivery.stream,
        "domain": delivery.domain,
        "consumer": delivery.consumer,
        "subject": delivery.subject,
        "seq": delivery.seq,
        "timestamp": delivery.timestamp,
        "timestamp_ns": delivery.timestamp_ns,
        "delivered": delivery.delivered,
        "encoding": encoding,
        "data": value,
        "size": len(delivery.data),
    }
    if include_headers:
        payload["headers"] = {k: list(v) for k, v in (delivery.headers or {}).items()}
    return payload


def batch_payload(messages: list[dict[str, Any]], *, stream: str, domain: str | None, consumer: str) -> dict[str, Any]:
    """The payload of a batch event: ``count``, ``first_seq``, ``last_seq`` and ``messages``."""
    for message in messages:
        for key in ("stream", "domain", "consumer"):
            message.pop(key, None)
    sequences = [m["seq"] for m in messages]
    return {
        "stream": stream,
        "domain": domain,
        "consumer": consumer,
        "count": len(messages),
        "first_seq": min(sequences) if sequences else None,
        "last_seq": max(sequences) if sequences else None,
        "messages": messages,
    }
