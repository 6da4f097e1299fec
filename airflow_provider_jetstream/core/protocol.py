"""The JetStream wire protocol as plain data: ack reply subjects, pull statuses, header blocks and publish acks.

The one place that knows these layouts; every reader, consumer and publisher of the package goes
through it (the vectorised reader finds the same ack reply fields in bulk,
:mod:`airflow_provider_jetstream.core.read.vectorised.scan`, and its tests hold it to this parser).

- An **ack reply** is the reply subject of a delivered message:
  ``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<timestamp ns>.<pending>``
  (9 tokens, servers before 2.9) or, with ``<domain>.<account hash>`` after ``$JS.ACK`` and a random
  token at the end, 11 or 12 tokens (domain ``_``: none). :func:`parse_ack_reply`.
- A **pull status** is a message without payload on a pull request's inbox whose header block starts
  ``NATS/1.0 <code> <description>``. :func:`pull_status` reads it as one of five outcomes, as the
  official clients (nats.go ``jetstream``, nats.js) do: :data:`HEARTBEAT` (``100``: the server is there,
  nothing to send), :data:`REQUEST_DONE` (``404``, ``408``, ``409`` batch completed, message size exceeds
  max bytes, leadership change: that request is over, pull again), :data:`RETRY_AFTER` (``503`` no
  JetStream answered, ``409`` server shutdown, exceeded max waiting, or a 409 this table does not know:
  pull again after a pause), :data:`RESUME` (``409`` consumer deleted: the consumer must be made again,
  if it is the reader's own) and :data:`FATAL` (``400``, ``409`` exceeded max request batch / expires /
  max bytes, consumer is push based, ``423`` pin id mismatch, any other code: the same request would be
  refused again).
- A **header block** is ``NATS/1.0[ <code>[ <description>]]\\r\\n<name>: <value>\\r\\n...``; a name may repeat.
  The names of the headers the package writes or reads are declared here, once (``*_HEADER``, :data:`KV_OPERATION`).
- A **publish ack** is the JSON ``{"stream", "seq"[, "domain", "duplicate"]}`` (the commit of an atomic batch
  adds ``"batch"``, its id, and ``"count"``, its messages); anything else is not one.
- A **settle** is what a consumer is told of a delivered message, sent to its ack reply subject: :data:`ACK`,
  :data:`TERM`, :data:`IN_PROGRESS`, or :func:`nak_body` (``-NAK``, with a redelivery delay if given). Sent with
  a reply subject, the consumer answers it once it took it (a double ack).
- A **store probe** is a publish every stream listening on its subject refuses before storing it (its
  ``Nats-Expected-Stream`` names no stream that can exist: stream names have no dots); each refusal
  ``{"error": {"err_code": 10060}, "stream"}`` names one stream that stores that subject.
  :data:`STORE_PROBE_HEADERS`, :func:`probe_refusal`.

Pure logic, Airflow-free.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from airflow_provider_jetstream.core.errors import JetStreamPublishError

ACK_PREFIX = "$JS.ACK."
#: Every number of an ack reply is below this (what the vectorised reader's int64 columns hold).
_INT64_END = 2**63

# -- ack replies ------------------------------------------------------------------------------------------


class AckReply(NamedTuple):
    """The metadata JetStream puts in a delivered message's reply subject (see the module doc)."""

    stream: str
    consumer: str
    delivered: int
    sequence: int
    consumer_sequence: int
    timestamp_ns: int
    pending: int
    domain: str | None = None


def parse_ack_reply(reply: str | None) -> AckReply | None:
    """The metadata of a JetStream ack reply subject; None for any other reply (a status, a plain reply,
    a malformed one)."""
    if not reply or not reply.startswith(ACK_PREFIX):
        return None
    tokens = reply.split(".")
    if len(tokens) == 9:
        _, _, stream, consumer, delivered, sseq, dseq, ts, pending = tokens
        domain = None
    elif len(tokens) in (11, 12):
        domain = None if tokens[2] == "_" else tokens[2]
        stream, consumer, delivered, sseq, dseq, ts, pending = tokens[4:11]
    else:
        return None
    fields = (delivered, sseq, dseq, ts, pending)
    if not all(field.isascii() and field.isdigit() for field in fields):
        return None
    numbers = [int(field) for field in fields]
    if any(number >= _INT64_END for number in numbers):
        return None  # the server writes none: not an ack reply
    return AckReply(stream, consumer, *numbers, domain)


# -- settles ---------------------------------------------------------------------------------------------

#: Processed: never delivered again.
ACK = b"+ACK"
#: Never delivered again, not processed.
TERM = b"+TERM"
#: Work in progress: the consumer's ``ack_wait`` starts again.
IN_PROGRESS = b"+WPI"
_NAK = b"-NAK"


def nak_body(delay: float | None = None) -> bytes:
    """``-NAK``: deliver it again, after ``delay`` seconds (None or 0: at once, or per the consumer's
    ``backoff``)."""
    return _NAK if not delay else _NAK + b" " + json.dumps({"delay": int(delay * 1e9)}).encode()


def settle_verb(body: bytes) -> str:
    """A settle body's verb in words for messages: ``+ACK``, ``-NAK``..."""
    return body[:5].decode(errors="replace").strip()


# -- header blocks ----------------------------------------------------------------------------------------

STATUS = "Status"
DESCRIPTION = "Description"
#: What a dead-letter copy adds to the message's headers: why, and where it came from.
DLQ_REASON_HEADER = "Airflow-DLQ-Reason"
DLQ_ORIGIN_HEADERS = {
    "stream": "Airflow-DLQ-Stream",
    "domain": "Airflow-DLQ-Domain",
    "consumer": "Airflow-DLQ-Consumer",
    "subject": "Airflow-DLQ-Subject",
    "seq": "Airflow-DLQ-Sequence",
    "delivered": "Airflow-DLQ-Delivered",
    "timestamp": "Airflow-DLQ-Timestamp",
}
#: The status of a request nothing answered: no JetStream there, or no stream for a published subject.
NO_RESPONDERS = "503"

#: A message's id: a stream stores an id once within its duplicate window.
MSG_ID_HEADER = "Nats-Msg-Id"
#: The stream that must store a message (any other refuses it, 10060).
EXPECTED_STREAM_HEADER = "Nats-Expected-Stream"
#: The id the stream's last message must have (any other: "wrong last msg ID", 10070).
EXPECTED_LAST_MSG_ID_HEADER = "Nats-Expected-Last-Msg-Id"
#: The sequence the subject's last message must have: a KV compare-and-set (any other: 10071).
EXPECTED_LAST_SUBJECT_SEQUENCE_HEADER = "Nats-Expected-Last-Subject-Sequence"
#: ``sub``: the message replaces every earlier one of its subject (a KV purge, an object's meta).
ROLLUP_HEADER = "Nats-Rollup"
#: An atomic batch's id, each message's place in it (1, 2, ...), and ``1`` on its last message, the commit.
BATCH_ID_HEADER = "Nats-Batch-Id"
BATCH_SEQUENCE_HEADER = "Nats-Batch-Sequence"
BATCH_COMMIT_HEADER = "Nats-Batch-Commit"
#: A KV entry's operation: none (or ``PUT``) for a value, ``DEL`` or ``PURGE`` for a delete or purge marker.
KV_OPERATION = "KV-Operation"
#: A pull status's messages of the request it did not deliver.
PENDING_MESSAGES_HEADER = "Nats-Pending-Messages"
#: An idle heartbeat's last stream and consumer sequences the consumer delivered.
LAST_STREAM_HEADER = "Nats-Last-Stream"
LAST_CONSUMER_HEADER = "Nats-Last-Consumer"
#: A push consumer's heartbeat while it waits for flow control: the subject to answer for it to go on.
CONSUMER_STALLED_HEADER = "Nats-Consumer-Stalled"


def parse_header_block(raw: bytes) -> tuple[str | None, str, dict[str, list[str]]]:
    """``(status code, description, headers)`` of a raw ``NATS/1.0`` header block: every value of a
    repeated name, in order, names and values stripped; code None when the first line has none."""
    lines = raw.split(b"\r\n")
    first = lines[0][len(b"NATS/1.0") :].strip() if lines and lines[0].startswith(b"NATS/1.0") else b""
    code, _, description = first.partition(b" ")
    headers: dict[str, list[str]] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        name = name.strip()
        if sep and name:
            headers.setdefault(name.decode("utf-8", "replace"), []).append(value.strip().decode("utf-8", "replace"))
    status = code.decode() if code.isdigit() else None
    return status, description.strip().decode("utf-8", "replace"), headers


def status_headers(raw: bytes) -> dict[str, str]:
    """A raw header block as nats-py gives a message's ``headers``: ``Status`` and ``Description`` from the
    first line, and the last value of each header."""
    status, description, headers = parse_header_block(raw)
    out = {name: values[-1] for name, values in headers.items()}
    if status is not None:
        out[STATUS] = status
    if description:
        out[DESCRIPTION] = description
    return out


def headers_from_api(message: Mapping[str, Any]) -> dict[str, list[str]]:
    """Every header value of a ``STREAM.MSG.GET`` answer (its ``hdrs`` field is the base64 raw block)."""
    raw = message.get("hdrs")
    if not raw:
        return {}
    try:
        return parse_header_block(base64.b64decode(raw))[2]
    except (binascii.Error, ValueError):
        return {}


# -- pull statuses ----------------------------------------------------------------------------------------

#: The server is there and has nothing to send (an idle heartbeat).
HEARTBEAT = "heartbeat"
#: That pull request is over (expired, filled, or ended by the server): pull again.
REQUEST_DONE = "request_done"
#: Nothing could serve the request now (no JetStream answered, a server shutting down, too many waiting
#: requests): pull again after a pause.
RETRY_AFTER = "retry_after"
#: The consumer is gone: make it again (if it is the reader's own), then pull again.
RESUME = "resume"
#: The same request would be refused again.
FATAL = "fatal"


@dataclass(frozen=True)
class PullStatus:
    """What a pull status says (see the module doc).

    :param outcome: :data:`HEARTBEAT`, :data:`REQUEST_DONE`, :data:`RETRY_AFTER`, :data:`RESUME` or :data:`FATAL`.
    :param unfilled: messages of the request it did not deliver (``Nats-Pending-Messages``); None when the
        status does not say.
    :param every_request: every pull request of the consumer is over, not only one (a leadership change).
    :param oversized: the request ended because the next message is larger than its ``max_bytes``.
    :param last_stream_seq: a heartbeat's ``Nats-Last-Stream``: the last stream sequence the consumer
        delivered (None when absent).
    :param last_consumer_seq: a heartbeat's ``Nats-Last-Consumer``: the last consumer sequence it delivered.
    """

    outcome: str
    code: str
    description: str = ""
    unfilled: int | None = None
    every_request: bool = False
    oversized: bool = False
    last_stream_seq: int | None = None
    last_consumer_seq: int | None = None

    @property
    def reason(self) -> str:
        """The status in words: ``409 Consumer Deleted``."""
        return f"{self.code} {self.description}".strip()

    @property
    def no_responders(self) -> bool:
        """No JetStream answered the request (a domain not connected)."""
        return self.code == NO_RESPONDERS


#: 409 descriptions (lower case, as a prefix) that end one request, and that end every one.
_DONE_409 = ("batch completed", "message size exceeds maxbytes")
_LEADERSHIP = "leadership change"
#: 409 descriptions of a request the consumer's limits refuse, or a consumer a pull cannot use.
_FATAL_409 = (
    "exceeded maxrequestbatch",
    "exceeded maxrequestexpires",
    "exceeded maxrequestmaxbytes",
    "consumer is push",
)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


def pull_status(headers: Mapping[str, str] | None) -> PullStatus | None:
    """The outcome of a pull status, from the message's headers as nats-py gives them (``Status``,
    ``Description`` and the last value of each header; see :func:`status_headers`); None when the
    message is not a status."""
    code = (headers or {}).get(STATUS)
    if not code:
        return None
    assert headers is not None
    description = str(headers.get(DESCRIPTION, "")).strip()
    text = description.lower()
    unfilled = _int(headers.get(PENDING_MESSAGES_HEADER))

    def status(outcome: str, **more: Any) -> PullStatus:
        return PullStatus(outcome, code, description, unfilled=unfilled, **more)

    if code == "100":
        last = _int(headers.get(LAST_STREAM_HEADER)), _int(headers.get(LAST_CONSUMER_HEADER))
        return status(HEARTBEAT, last_stream_seq=last[0], last_consumer_seq=last[1])
    if code in ("404", "408"):
        return status(REQUEST_DONE)
    if code == NO_RESPONDERS:
        return status(RETRY_AFTER)
    if code == "409":
        if text.startswith(_LEADERSHIP):
            return status(REQUEST_DONE, every_request=True)
        if text.startswith(_DONE_409):
            return status(REQUEST_DONE, oversized=text.startswith("message size exceeds maxbytes"))
        if text.startswith("consumer deleted"):
            return status(RESUME)
        if text.startswith(_FATAL_409):
            return status(FATAL)
        return status(RETRY_AFTER)  # server shutdown, exceeded maxwaiting, and what this table does not know
    return status(FATAL)


# -- publish acks -----------------------------------------------------------------------------------------


class PubAck(NamedTuple):
    """A JetStream publish ack: the stream that stored the message, its sequence there, the stream's
    domain (None when the server has none) and whether it was a duplicate (already stored). The ack of
    an atomic batch's commit also gives the batch's id (``batch``) and how many messages it stored
    (``count``), its ``seq`` the last one's; None for any other ack."""

    stream: str
    seq: int
    domain: str | None = None
    duplicate: bool = False
    batch: str | None = None
    count: int | None = None


def is_no_responders(headers: Mapping[str, str] | None) -> bool:
    """The reply (headers as nats-py gives them) says nothing answered the request or publish."""
    return (headers or {}).get(STATUS) == NO_RESPONDERS


def parse_pub_ack(data: bytes) -> PubAck:
    """The publish ack in a reply; :class:`~airflow_provider_jetstream.core.errors.JetStreamPublishError`
    saying what came instead: the server's refusal (its ``err_code`` and ``description``), or a reply
    that is not an ack (it does not name a stream and a sequence), so that nothing counts as stored
    that the server did not say it stored."""
    try:
        reply = json.loads(data) if data else None
    except (ValueError, UnicodeDecodeError):
        reply = None
    if isinstance(reply, dict) and isinstance(reply.get("error"), dict):
        error = reply["error"]
        code, description = error.get("err_code"), str(error.get("description") or "")
        status = error.get("code") if isinstance(error.get("code"), int) else None
        raise JetStreamPublishError(f"{description} (err_code {code})", code, description, status)
    if not isinstance(reply, dict):
        raise JetStreamPublishError(f"not a JetStream publish ack: {data[:80]!r}")
    stream, seq, domain = reply.get("stream"), reply.get("seq"), reply.get("domain")
    if (
        not isinstance(stream, str)
        or not stream
        or isinstance(seq, bool)
        or not isinstance(seq, int)
        or seq < 1
        or (domain is not None and not isinstance(domain, str))
    ):
        raise JetStreamPublishError(f"not a JetStream publish ack (no stream and sequence): {data[:80]!r}")
    batch, count = reply.get("batch"), reply.get("count")
    return PubAck(
        stream,
        seq,
        domain or None,
        reply.get("duplicate") is True,
        batch if isinstance(batch, str) and batch else None,
        count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else None,
    )


#: ``Nats-Expected-Stream`` of a store probe: a stream name has no dots, so every stream refuses it unstored.
STORE_PROBE_HEADERS = {EXPECTED_STREAM_HEADER: "store.probe"}
#: JetStream's refusal "expected stream does not match".
EXPECTED_STREAM_MISMATCH = 10060


def probe_refusal(data: bytes) -> str | None:
    """The stream that refused a store probe in this reply (it listens on the probe's subject, and stored
    nothing); None for any other reply (a plain subscriber's, an ack: not a refusal of the probe)."""
    try:
        reply = json.loads(data) if data else None
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(reply, dict) or not isinstance(reply.get("error"), dict):
        return None
    stream = reply.get("stream")
    if reply["error"].get("err_code") != EXPECTED_STREAM_MISMATCH or not isinstance(stream, str) or not stream:
        return None
    return stream
