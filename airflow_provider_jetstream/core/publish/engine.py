"""The one publish engine: every publish goes through :func:`publish_messages`, in one of three modes, every
ack checked.

Used by :class:`~airflow_provider_jetstream.operators.publish.JetStreamPublishOperator` (through the hook's
``publish``) and the Spark writer (:mod:`airflow_provider_jetstream.spark.writer`). The ``mode`` says how the
messages go; each mode's protocol is a part of the engine in a module of its own:

- **per message** (None, here): one reply subscription takes every ack (reply subject ``<inbox>.<index>``);
  a semaphore bounds the messages in flight. Lighter per message than nats-py's ``publish_async`` (no
  future, token or callback per message);
- **fast-ingest batches** (a :class:`~airflow_provider_jetstream.core.publish.fast_ingest.BatchTarget`, from
  :func:`~airflow_provider_jetstream.core.publish.fast_ingest.batch_target`): one ack per flow window
  (:mod:`~airflow_provider_jetstream.core.publish.fast_ingest`); what the server does not take in batches
  goes per message;
- **atomic batches** (:class:`~airflow_provider_jetstream.core.publish.atomic.AtomicBatches`): each batch
  stored whole or not at all (:mod:`~airflow_provider_jetstream.core.publish.atomic`).

Before a message is sent its subject passes
:func:`~airflow_provider_jetstream.core.arguments.names.delivery_subject` (no reserved subject
spaces, no wildcards). After the last ack, :func:`ack_problems` says what went
wrong: refused messages, and messages stored by a stream or in a domain other than the one aimed at.

What is sent again, when and after what pause is the one resend rule's
(:mod:`~airflow_provider_jetstream.core.resend`): only messages with a ``Nats-Msg-Id``, when they get no ack
or an answer saying nothing could store them now (a stream's leader being elected, a cluster node gone),
until ``ack_timeout``: the stream stores an id once, so a message whose ack was lost comes back as a
duplicate. Without an id nothing is sent twice.

Airflow-free: Spark executors import it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.client import Client

from airflow_provider_jetstream.core.arguments.values import seconds
from airflow_provider_jetstream.core.connection.client import clustered
from airflow_provider_jetstream.core.errors import JetStreamPublishError
from airflow_provider_jetstream.core.protocol import is_no_responders, parse_pub_ack
from airflow_provider_jetstream.core.publish.atomic import AtomicBatches, publish_atomic_batches
from airflow_provider_jetstream.core.publish.blocks import Block, Item, expand, numbered, one_by_one
from airflow_provider_jetstream.core.publish.fast_ingest import BatchTarget, Numbered, publish_batches
from airflow_provider_jetstream.core.publish.subjects import SubjectGuard
from airflow_provider_jetstream.core.publish.summary import (
    Outgoing,
    PublishSummary,
    ack_problems,
    failure_reason,
)
from airflow_provider_jetstream.core.resend import (
    NOT_REPUBLISHED,
    may_resend,
    nothing_stores_now,
    pause_after,
    resend_after,
)

__all__ = [
    "BatchTarget",
    "Block",
    "JetStreamPublishError",
    "Outgoing",
    "PublishMode",
    "PublishSummary",
    "ack_problems",
    "failure_reason",
    "publish_messages",
]

#: How a publish sends its messages: None each on its own; a
#: :class:`~airflow_provider_jetstream.core.publish.fast_ingest.BatchTarget` in fast-ingest batches to that
#: stream; an :class:`~airflow_provider_jetstream.core.publish.atomic.AtomicBatches` in atomic batches.
PublishMode = BatchTarget | AtomicBatches | None
#: Seconds between two looks at the unacknowledged messages.
_TICK = 0.1


@dataclass
class _Flight:
    """One message sent and not yet settled."""

    message: Outgoing
    first: float
    last: float
    can_repeat: bool
    attempts: int = 1
    #: Why the last attempt was answered without an ack (a retryable error), if it was.
    error: BaseException | None = None
    #: When it may be sent again after a retryable error.
    again_at: float | None = None


async def publish_messages(
    nc: Client,
    messages: Iterable[Item],
    *,
    max_in_flight: int = 4000,
    ack_timeout: float = 30.0,
    api_prefixes: Iterable[str | None] = (),
    what: str = "publish",
    subject_field: str = "subject",
    batch: BatchTarget | None = None,
    mode: PublishMode = None,
) -> PublishSummary:
    """Publish ``messages`` in the way ``mode`` says, every ack checked; the acks' summary.

    ``mode`` None: each message on its own, at most ``max_in_flight`` unacknowledged. A
    :class:`~airflow_provider_jetstream.core.publish.fast_ingest.BatchTarget` (a stream taking fast-ingest
    batches, found by :func:`~airflow_provider_jetstream.core.publish.fast_ingest.batch_target`): fast-ingest
    batches, one ack per flow window (:mod:`~airflow_provider_jetstream.core.publish.fast_ingest`); a server
    that answers the first message as an ordinary publish (before 2.14) or cannot take a batch now gets the
    rest one by one. The guarantees are the same. An
    :class:`~airflow_provider_jetstream.core.publish.atomic.AtomicBatches`: atomic batches, each stored whole
    or not at all (:mod:`~airflow_provider_jetstream.core.publish.atomic`; ``max_in_flight`` does not apply,
    ``ack_timeout`` is each batch's).

    A message with a ``Nats-Msg-Id`` header that gets no ack (the stream's leader died, the server
    the connection used went away), or an answer saying nothing could store it now (503; no
    responders on a connection to a cluster), is published again with the same id until it is
    acknowledged or ``ack_timeout`` has passed since it was first sent (the resend rule,
    :mod:`~airflow_provider_jetstream.core.resend`): the stream stores an id once within its duplicate
    window, so a message stored by an attempt whose ack was lost is acknowledged as a duplicate. A message
    without an id is never sent again (:data:`~airflow_provider_jetstream.core.resend.NOT_REPUBLISHED`).
    Refusals (a limit, a wrong expected stream...) are failures, with the server's reason.

    :param nc: a connected client.
    :param messages: ``(subject, payload, headers)`` tuples, or :class:`Block` s of many messages to one
        subject (framed in bulk by fast ingest; taken apart otherwise); an iterator streams large volumes.
    :param max_in_flight: most messages sent but not yet acknowledged. Default 4000.
    :param ack_timeout: seconds a message may stay unacknowledged after it was first sent (republished
        meanwhile if it has a ``Nats-Msg-Id``) before the publish stops and fails; keep it below the
        stream's duplicate window (default 2 minutes). Default 30.
    :param api_prefixes: the account's JetStream API prefixes: subjects under them are refused.
    :param what: words for errors (``publish to 'orders.x'``, ``jetstream write``).
    :param subject_field: how a refused subject is named in the error.
    :param batch: the fast-ingest mode's earlier name: ``batch=target`` is ``mode=target``. Default None.
    :param mode: how the messages go (:data:`PublishMode`). Default None: each on its own.
    :raises UnsafeSubjectError: a subject is reserved or not literal (nothing more is sent).
    :raises JetStreamPublishError: a message was not acknowledged within ``ack_timeout`` (nothing more
        is sent), or, in atomic batches, more messages than one batch takes that must land together
        (nothing is sent); the error gives the exact counts (stored, duplicates, failed with their reasons).
    """
    ack_timeout = seconds()(ack_timeout, "ack_timeout")
    if batch is not None:
        if mode is not None:
            raise ValueError(
                "batch is not allowed with mode: batch is the fast-ingest mode's earlier name, give mode alone"
            )
        mode = batch
    check = SubjectGuard(api_prefixes, subject_field)
    summary = PublishSummary()
    started = time.perf_counter()
    items: Numbered | None = None
    try:
        if isinstance(mode, AtomicBatches):
            await publish_atomic_batches(
                nc, mode, expand(messages), summary, check=check, ack_timeout=ack_timeout, what=what
            )
        elif mode is not None:
            items = await publish_batches(
                nc, mode, iter(messages), summary, check=check, ack_timeout=ack_timeout, what=what
            )
        else:
            items = numbered(messages)
        if items is not None:
            await _one_by_one(nc, one_by_one(items), summary, check, max_in_flight, ack_timeout, what)
    finally:
        summary.seconds = time.perf_counter() - started
    return summary


async def _one_by_one(
    nc: Client,
    messages: Iterator[tuple[int, Outgoing]],
    summary: PublishSummary,
    check: SubjectGuard,
    max_in_flight: int,
    ack_timeout: float,
    what: str,
) -> None:
    """Each message published on its own, at most ``max_in_flight`` unacknowledged, tallied in ``summary``."""
    inbox = nc.new_inbox() + "."
    cut = len(inbox)
    to_cluster = clustered(nc)
    window = asyncio.Semaphore(max_in_flight)
    now = asyncio.get_running_loop().time
    pending: dict[int, _Flight] = {}
    # "latency": a moving average of the seconds an ack takes; "expired": messages given up on.
    state: dict[str, Any] = {"latency": 0.0, "expired": 0}
    # Messages answered "nothing could store it now", to send again at their ``again_at``.
    redo: set[int] = set()
    settled = asyncio.Event()
    publish = nc.publish

    def settle(index: int, failure: BaseException | None = None) -> None:
        pending.pop(index, None)
        if failure is not None:
            summary.failures.append((index, failure))
        window.release()
        if not pending:
            settled.set()

    async def on_ack(msg: Any) -> None:
        index = int(msg.subject[cut:])
        flight = pending.get(index)
        if flight is None:
            return  # settled already (the ack of an earlier attempt, or after it was given up)
        error: BaseException
        if is_no_responders(msg.headers):
            error = nats.js.errors.NoStreamResponseError()
        else:
            try:
                ack = parse_pub_ack(msg.data)
            except JetStreamPublishError as err:
                error = err
            else:
                state["latency"] = 0.9 * state["latency"] + 0.1 * (now() - flight.last)
                summary.acknowledged(ack)
                summary.replies += 1
                settle(index)
                return
        if nothing_stores_now(error, cluster=to_cluster):
            if flight.can_repeat:
                flight.error = error
                flight.again_at = now() + pause_after(flight.attempts)
                redo.add(index)
                return
            error = JetStreamPublishError(f"{failure_reason(error)}; {NOT_REPUBLISHED}")
        settle(index, error)

    async def resend(index: int, flight: _Flight, t: float) -> None:
        subject, payload, headers = flight.message
        flight.attempts += 1
        flight.last, flight.again_at = t, None
        summary.republished += 1
        # A connection being re-established buffers it; any other failure leaves it to the next round.
        with contextlib.suppress(nats.errors.Error):
            await publish(subject, payload, reply=f"{inbox}{index}", headers=headers or None)

    async def tend() -> None:
        # Sends again what is due, and gives up on what waited ack_timeout: a task of its own, so that it
        # runs while the sender waits for room in the window.
        while True:
            await asyncio.sleep(_TICK)
            t = now()
            for index in list(redo):
                flight = pending.get(index)
                if flight is None or flight.again_at is None or t >= flight.again_at:
                    redo.discard(index)
                if flight is not None and flight.again_at is not None and t >= flight.again_at:
                    await resend(index, flight, t)
            due_after = resend_after(state["latency"])
            young = min(due_after, ack_timeout)
            for index, flight in list(pending.items()):
                if t - flight.first < young:
                    break  # in first-send order: the later ones are younger still
                if t - flight.first >= ack_timeout:
                    why = f"no ack within {ack_timeout:g}s"
                    if flight.error is not None:
                        why = f"{failure_reason(flight.error)}, still after {ack_timeout:g}s"
                    sent = f"sent {flight.attempts} times" if flight.can_repeat else NOT_REPUBLISHED
                    state["expired"] += 1
                    settle(index, JetStreamPublishError(f"{why} ({sent})"))
                elif flight.can_repeat and flight.again_at is None and t >= flight.last + due_after:
                    await resend(index, flight, t)
            if state["expired"]:
                # Stop: the sender sends nothing more, and what is still unacknowledged is not waited for.
                settled.set()
                for _ in range(max_in_flight):
                    window.release()
                return

    sub = await nc.subscribe(inbox + "*", cb=on_ack, pending_msgs_limit=max(65536, max_in_flight * 2))
    acquire = window.acquire
    tender = asyncio.create_task(tend())
    tender.add_done_callback(lambda _: settled.set())  # were it to fail, nothing would be left waiting
    try:
        for index, (subject, payload, headers) in messages:
            check(subject)
            await acquire()
            if state["expired"]:
                break
            t = now()
            pending[index] = _Flight((subject, payload, headers), t, t, may_resend(headers))
            settled.clear()
            await publish(subject, payload, reply=f"{inbox}{index}", headers=headers or None)
            summary.count = max(summary.count, index + 1)
        if pending:
            await settled.wait()
    finally:
        tender.cancel()
        with contextlib.suppress(nats.errors.Error):
            await sub.unsubscribe()
    left = sorted(pending)
    if state["expired"] or left:
        for index in left:
            summary.failures.append((index, JetStreamPublishError("no ack yet when the publish stopped")))
        raise JetStreamPublishError(
            f"{what}: {state['expired'] + len(left)} of {summary.count} messages not acknowledged "
            f"within {ack_timeout:g}s; "
            f"{summary.counts()}: {summary.reasons()}; nothing more was sent"
        )
