"""One JetStream delivery: its data, its settle actions (ack, nak, term, in progress), its ticket until it is
settled, and the JSON payload of its event."""

from __future__ import annotations

import base64
import datetime
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from airflow_provider_jetstream.core.api import JetStreamApi, retry_failover
from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.core.sync import run_sync
from airflow_provider_jetstream.core.tasks import wait_task

#: How a payload may be decoded: ``auto`` tries JSON, then UTF-8 text, then base64.
DECODINGS = ("auto", "json", "text", "base64")


#: Sends one settle body (``+ACK``, ``-NAK``...) to a delivery's ack reply subject, and returns once the
#: consumer confirmed it (:func:`send_settle`).
Send = Callable[[str, bytes], Awaitable[None]]


async def send_settle(api: JetStreamApi, reply: str, body: bytes) -> None:
    """Send one settle body to a delivery's ack reply subject on ``api``'s connection and wait for the
    consumer's answer (a double ack): a clustered consumer answers once its replicas stored the verdict, so a
    verdict confirmed is never lost with a node. Sent again across a failover (the one retry rule,
    :func:`~airflow_provider_jetstream.core.api.retry_failover`, within ``api.failover`` seconds): a consumer
    answers a verdict on a message it settled already too, so one sent twice does no harm. Each attempt
    waits ``api.timeout`` seconds; the last error is raised (the message is then delivered again after the
    consumer's ``ack_wait``)."""
    nc = api.nc

    async def ask() -> None:
        await wait_task(nc.request(reply, body, timeout=api.timeout))

    await retry_failover(ask, nc, within=api.failover, what=f"settle {body[:5].decode(errors='replace')}")


class AckHandle:
    """Where a delivery's verdict goes (its ack reply subject, and how to send there) and the verdict sent.

    A message is settled once: the first ``ack``, ``nak`` or ``term`` is sent, any later one is not
    (``in_progress`` may be sent any number of times before). ``send`` may be any connection of the
    account (an ack is a plain message to the reply subject).
    """

    def __init__(self, reply: str, send: Send) -> None:
        self.reply = reply
        self.send = send
        #: ``ack``, ``nak`` or ``term`` once settled; None before.
        self.verdict: str | None = None


@dataclass(frozen=True)
class Delivery:
    """One message as a consumer delivered it (or, for the KV trigger, one revision of a key).

    ``headers`` maps each header name to all of its values, in order; None when the message has none.
    ``timestamp_ns`` is when the stream stored the message (ns since the epoch, UTC).

    A message of a durable consumer (fetched with ``JetStreamHook.fetch`` / ``consume``) can be settled:
    ``ack()``, ``nak(delay)``, ``term()`` and ``in_progress()`` (``aack()``... from async code), each at most
    once (:class:`AckHandle`) and confirmed by the consumer (:func:`send_settle`). A message read without a
    durable consumer has nothing to settle (``ackable`` False): those raise :class:`JetStreamConfigError`.
    """

    stream: str
    consumer: str
    subject: str
    sequence: int
    delivered: int
    timestamp_ns: int
    data: bytes
    headers: dict[str, list[str]] | None = None
    domain: str | None = None
    pending: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    handle: AckHandle | None = field(default=None, compare=False, repr=False)

    @property
    def time(self) -> datetime.datetime:
        """When the stream stored the message, as a UTC datetime (microsecond precision)."""
        return datetime.datetime.fromtimestamp(self.timestamp_ns / 1e9, tz=datetime.timezone.utc)

    @property
    def payload(self) -> bytes:
        """The message's payload (``data``)."""
        return self.data

    @property
    def ackable(self) -> bool:
        """Whether the message can be settled (delivered by a durable consumer that takes acks)."""
        return self.handle is not None

    @property
    def verdict(self) -> str | None:
        """``ack``, ``nak`` or ``term`` once this process settled it; None before (or when not ackable)."""
        return self.handle.verdict if self.handle is not None else None

    async def _settle(self, verdict: str | None, body: bytes) -> bool:
        handle = self.handle
        if handle is None:
            raise JetStreamConfigError(
                f"message {self.sequence} of stream {self.stream!r} was read without a durable consumer that "
                "takes acks: there is nothing to settle (name a consumer with ack_policy explicit or all)"
            )
        if handle.verdict is not None:
            return False  # settled already: never a second ack (or a nak after an ack)
        if verdict is not None:
            handle.verdict = verdict
        try:
            await handle.send(handle.reply, body)
        except BaseException:
            if verdict is not None:
                handle.verdict = None  # not confirmed: the message may still be settled otherwise
            raise
        return True

    async def aack(self) -> bool:
        """Acknowledge the message: processed, never delivered again. False (nothing sent) if it was settled."""
        return await self._settle("ack", b"+ACK")

    async def anak(self, delay: float | None = None) -> bool:
        """Negative acknowledgement: deliver it again, after ``delay`` seconds (default None: at once, or
        per the consumer's ``backoff``). False (nothing sent) if it was settled."""
        body = b"-NAK" if not delay else b"-NAK " + json.dumps({"delay": int(delay * 1e9)}).encode()
        return await self._settle("nak", body)

    async def aterm(self) -> bool:
        """Terminate it: never delivered again, not processed (dead-letter it first if it must be kept).
        False (nothing sent) if it was settled."""
        return await self._settle("term", b"+TERM")

    async def ain_progress(self) -> bool:
        """Work in progress: the consumer's ``ack_wait`` starts again. False (nothing sent) once settled."""
        if self.handle is not None and self.handle.verdict is not None:
            return False
        return await self._settle(None, b"+WPI")

    def ack(self) -> bool:
        """Blocking form of :meth:`aack`: on the connection of a blocking ``consume`` or ``hook.connected()``
        block, else on one opened for the one message."""
        return run_sync(self.aack())

    def nak(self, delay: float | None = None) -> bool:
        """Blocking form of :meth:`anak`."""
        return run_sync(self.anak(delay))

    def term(self) -> bool:
        """Blocking form of :meth:`aterm`."""
        return run_sync(self.aterm())

    def in_progress(self) -> bool:
        """Blocking form of :meth:`ain_progress`."""
        return run_sync(self.ain_progress())

    @property
    def timestamp(self) -> str:
        """``timestamp_ns`` as an ISO-8601 UTC string (microsecond precision)."""
        return self.time.isoformat()

    def header(self, name: str) -> str | None:
        """The last value of header ``name`` (NATS header names are case-sensitive), or None."""
        values = (self.headers or {}).get(name)
        return values[-1] if values else None


#: What became of one message: stored by every watcher, refused by one, not stored, nobody listening; or
#: ``leave``: neither acked nor naked (the consumer delivers it again after its ack wait).
Settlement = Literal["ack", "reject", "fail", "idle", "leave"]


@dataclass
class Ticket:
    """A message handed to the caller and not yet settled: where to send its ack, how often it came.

    ``state`` is used with ``ack_policy: all`` only: ``out`` (handed out), ``ack`` / ``reject``
    (settled, waiting for the ack floor to reach it), ``fail`` (naked, waiting for its redelivery).
    """

    sequence: int
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
    """The JSON-able TriggerEvent payload of one delivery; a DAG dedups by its ``sequence``.

    Keys: ``stream``, ``domain``, ``consumer``, ``subject``, ``sequence``, ``timestamp`` (ISO),
    ``timestamp_ns``, ``delivered``, ``headers`` (name -> list of values, if ``include_headers``),
    ``encoding``, ``data``, ``size``.
    """
    encoding, value = decode_payload(delivery.data, decode, max_payload_bytes)
    payload: dict[str, Any] = {
        "stream": delivery.stream,
        "domain": delivery.domain,
        "consumer": delivery.consumer,
        "subject": delivery.subject,
        "sequence": delivery.sequence,
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
    """The payload of a batch event: ``count``, ``first_sequence``, ``last_sequence`` and ``messages``."""
    for message in messages:
        for key in ("stream", "domain", "consumer"):
            message.pop(key, None)
    sequences = [m["sequence"] for m in messages]
    return {
        "stream": stream,
        "domain": domain,
        "consumer": consumer,
        "count": len(messages),
        "first_sequence": min(sequences) if sequences else None,
        "last_sequence": max(sequences) if sequences else None,
        "messages": messages,
    }
