"""The one publish engine: bounded in-flight JetStream publishes, every ack checked.

Used by :class:`~airflow_provider_jetstream.operators.publish.JetStreamPublishOperator` and the
Spark writer (:mod:`airflow_provider_jetstream.spark.writer`). One reply subscription takes every
ack (reply subject ``<inbox>.<index>``); a semaphore bounds the messages in flight. Lighter per
message than nats-py's ``publish_async`` (no future, token or callback per message).

Before a message is sent its subject passes
:func:`~airflow_provider_jetstream.core.publish.subjects.check_publish_subject` (no reserved subject
spaces, no wildcards). After the last ack, :func:`ack_problems` says what went
wrong: refused messages, and messages stored by a stream or in a domain other than the one aimed at.

Airflow-free: Spark executors import it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.client import Client

from airflow_provider_jetstream.core.arguments.values import seconds
from airflow_provider_jetstream.core.errors import JetStreamPublishError
from airflow_provider_jetstream.core.protocol import PubAck, is_no_responders, parse_pub_ack
from airflow_provider_jetstream.core.publish.subjects import SubjectGuard

#: One message to publish: ``(subject, payload, headers or None)``.
Outgoing = tuple[str, bytes, "dict[str, str] | None"]


@dataclass
class PublishSummary:
    """What the acks said. ``streams`` counts stored messages by ``(stream, domain)``."""

    count: int = 0
    stored: int = 0
    duplicates: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    failures: list[tuple[int, BaseException]] = field(default_factory=list)
    streams: dict[tuple[str | None, str | None], int] = field(default_factory=dict)
    seconds: float = 0.0


async def publish_messages(
    nc: Client,
    messages: Iterable[Outgoing],
    *,
    max_in_flight: int = 4000,
    ack_timeout: float = 30.0,
    api_prefixes: Iterable[str | None] = (),
    what: str = "publish",
    subject_field: str = "subject",
) -> PublishSummary:
    """Publish ``messages``, at most ``max_in_flight`` unacknowledged; the acks' summary.

    :param nc: a connected client.
    :param messages: ``(subject, payload, headers)`` tuples (an iterator streams large volumes).
    :param max_in_flight: most messages sent but not yet acknowledged. Default 4000.
    :param ack_timeout: seconds without any ack (while messages are in flight) before failing.
        Default 30.
    :param api_prefixes: the account's JetStream API prefixes: subjects under them are refused.
    :param what: words for errors (``publish to 'orders.x'``, ``jetstream write``).
    :param subject_field: how a refused subject is named in the error.
    :raises UnsafeSubjectError: a subject is reserved or not literal (nothing more is sent).
    :raises JetStreamPublishError: acks missing after ``ack_timeout``.
    """
    ack_timeout = seconds()(ack_timeout, "ack_timeout")
    check = SubjectGuard(api_prefixes, subject_field)
    inbox = nc.new_inbox() + "."
    cut = len(inbox)
    window = asyncio.Semaphore(max_in_flight)
    loop = asyncio.get_running_loop()
    now = loop.time
    # "progress" is the loop time of the last publish or ack; "stalled" is set by the watchdog.
    state: dict[str, Any] = {"acked": 0, "sent": None, "published": 0, "progress": now(), "stalled": False}
    all_acked = asyncio.Event()
    acks: dict[int, Any] = {}

    async def on_ack(msg: Any) -> None:
        index = int(msg.subject[cut:])
        if index in acks:
            return
        if is_no_responders(msg.headers):
            acks[index] = nats.js.errors.NoStreamResponseError()
        else:
            try:
                acks[index] = parse_pub_ack(msg.data)
            except JetStreamPublishError as err:
                acks[index] = err
        state["acked"] += 1
        state["progress"] = now()
        window.release()
        if state["acked"] == state["sent"]:
            all_acked.set()

    async def watchdog() -> None:
        # A stall watchdog that works on every supported Python (asyncio.timeout is 3.11+, and was
        # skipped on 3.10): with at most max_in_flight unacked, no ack and no publish for
        # ack_timeout while messages are unacked means no progress at all. It wakes the publisher.
        while True:
            waiting = state["published"] > state["acked"]
            due = state["progress"] + ack_timeout - now()
            if waiting and due <= 0:
                break
            await asyncio.sleep(due if waiting else ack_timeout)
        state["stalled"] = True
        all_acked.set()
        window.release()

    sub = await nc.subscribe(inbox + "*", cb=on_ack, pending_msgs_limit=max(65536, max_in_flight * 2))
    publish = nc.publish
    acquire = window.acquire
    started = time.perf_counter()
    sent = 0
    watcher = asyncio.create_task(watchdog())
    try:
        for index, (subject, payload, headers) in enumerate(messages):
            check(subject)
            await acquire()
            if state["stalled"]:
                break
            await publish(subject, payload, reply=f"{inbox}{index}", headers=headers or None)
            sent += 1
            state["published"] = sent
            state["progress"] = now()
        state["sent"] = sent
        if state["acked"] >= sent:
            all_acked.set()
        await all_acked.wait()
        if state["stalled"]:
            missing = sent - state["acked"]
            raise JetStreamPublishError(
                f"{what}: {missing} of {sent} messages not acknowledged within {ack_timeout:g}s"
            )
    finally:
        watcher.cancel()
        with contextlib.suppress(nats.errors.Error):
            await sub.unsubscribe()
    summary = PublishSummary(count=sent, seconds=time.perf_counter() - started)
    for index in range(sent):
        ack = acks.get(index)
        if not isinstance(ack, PubAck):
            summary.failures.append((index, ack or JetStreamPublishError("no ack")))
            continue
        if ack.duplicate:
            summary.duplicates += 1
        else:
            summary.stored += 1
        seq = ack.seq
        if summary.first_seq is None:
            summary.first_seq = seq
        summary.last_seq = seq if summary.last_seq is None else max(summary.last_seq, seq)
        key = (ack.stream, ack.domain)
        summary.streams[key] = summary.streams.get(key, 0) + 1
    return summary


def ack_problems(
    summary: PublishSummary, *, target_domain: str | None = None, expected_stream: str | None = None
) -> list[str]:
    """What the acks of ``summary`` say went wrong (empty: every message stored where aimed).

    :param target_domain: the domain whose streams must store the messages (None: any).
    :param expected_stream: the stream that must store them (None: any).
    """
    problems = []
    if summary.failures:
        index, err = summary.failures[0]
        reason = (
            "no stream listens on it"
            if isinstance(err, (nats.js.errors.NoStreamResponseError, nats.errors.NoRespondersError))
            else f"{type(err).__name__}: {err}"
        )
        problems.append(
            f"{len(summary.failures)} of {summary.count} messages were not stored (first: #{index}, {reason})"
        )
    # An ack without a domain does not count for a target that has one: every server of a domain names it.
    wrong_domain = {k: n for k, n in summary.streams.items() if target_domain and k[1] != target_domain}
    if wrong_domain:
        problems.append(
            "stored outside domain "
            + repr(target_domain)
            + ": "
            + ", ".join(f"{n} by stream {s!r} in domain {d!r}" for (s, d), n in wrong_domain.items())
        )
    wrong_stream = {k: n for k, n in summary.streams.items() if expected_stream and k[0] != expected_stream}
    if wrong_stream:
        problems.append(
            f"stored outside stream {expected_stream!r}: "
            + ", ".join(f"{n} by stream {s!r}" for (s, _), n in wrong_stream.items())
        )
    return problems
